// Attention fma-engine variants, bf16 storage, 64x32 query x key tiles, 4 warps,
// head dims 64 and 128: one file per configuration so instantiations build in parallel.
#include "kernels/attention/driver_fma.cuh"

namespace detfuse::attention {

void register_fma_bf16_br64_bc32(Registry& r) { fma::register_config<__nv_bfloat16, 64, 32, 4>(r); }

}  // namespace detfuse::attention
