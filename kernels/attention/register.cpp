// Explicit registration of every attention variant (DESIGN.md: no static-init
// magic). A Hopper engine built in kernels/attention/wgmma/ plugs in through
// DETFUSE_HAVE_ATTENTION_WGMMA without touching this list.
#include "kernels/attention/variants.h"
#include "kernels/registry.h"

namespace detfuse {

#ifdef DETFUSE_HAVE_ATTENTION_WGMMA
void register_attention_wgmma(Registry&);
#endif

void register_attention(Registry& r) {
#ifdef DETFUSE_HAVE_ATTENTION_WGMMA
  register_attention_wgmma(r);
#endif
  attention::register_fma_bf16_br64_bc64(r);
  attention::register_fma_bf16_br64_bc32(r);
  attention::register_fma_bf16_br32_bc32(r);
  attention::register_fma_f32_br64_bc64(r);
  attention::register_fma_f32_br64_bc32(r);
  attention::register_fma_f32_br32_bc32(r);
}

}  // namespace detfuse
