// Attention fma-engine variants, f32 storage, 32x32 query x key tiles, 4 warps,
// head dims 64 and 128: one file per configuration so instantiations build in parallel.
#include "kernels/attention/driver_fma.cuh"

namespace detfuse::attention {

void register_fma_f32_br32_bc32(Registry& r, int partials_mib) {
  fma::register_config<float, 32, 32, 4>(r, partials_mib);
}

}  // namespace detfuse::attention
