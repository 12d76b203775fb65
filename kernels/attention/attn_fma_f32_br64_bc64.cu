// Attention fma-engine variants, f32 storage, 64x64 query x key tiles, 8 warps,
// head dims 64 and 128: one file per configuration so instantiations build in parallel.
#include "kernels/attention/driver_fma.cuh"

namespace detfuse::attention {

void register_fma_f32_br64_bc64(Registry& r) { fma::register_config<float, 64, 64, 8>(r); }

}  // namespace detfuse::attention
