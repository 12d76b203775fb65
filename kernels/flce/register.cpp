// Explicit registration of every FLCE variant (DESIGN.md: no static-init magic).
#include "kernels/flce/variants.h"
#include "kernels/registry.h"

namespace detfuse {

void register_flce(Registry& r) {
  flce::register_flce_mma_bm128_bn128(r);
  flce::register_flce_mma_bm128_bn256(r);
  flce::register_flce_mma_bm64_bn128(r);
#if defined(DETFUSE_HAVE_WGMMA)
  flce::register_flce_wgmma_coop256c2(r);
  flce::register_flce_wgmma_coop256c1(r);
  flce::register_flce_wgmma_coop128c2(r);
  flce::register_flce_wgmma_ping128c2(r);
  flce::register_flce_wgmma_ping128c1(r);
  flce::register_flce_wgmmalt_ping128c2(r);
  flce::register_flce_wgmmalt_coop256c2(r);
  flce::register_flce_wgmmalt_ping128c22(r);
  flce::register_flce_wgmmalt_coop256c22(r);
  flce::register_flce_wgmmalt_ping128c2t(r);
  flce::register_flce_wgmmalt_ping128c22t(r);
  flce::register_flce_wgmmalt_coop256c2t(r);
  flce::register_flce_wgmmalt_coop256x128c12t(r);
#endif
  flce::register_flce_cublaslt(r);
  flce::register_flce_fma_bm128_bn128(r);
  flce::register_flce_fma_bm128_bn64(r);
  flce::register_flce_fma_bm64_bn64(r);
}

}  // namespace detfuse
