// FLCE exact-fp32 variants with 64x64x8 block tiles (4x8 outputs per thread):
// one file per tile shape so the instantiations compile in parallel.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_fma.cuh"
#include "kernels/flce/variants.h"

namespace detfuse::flce {

void register_flce_fma_bm64_bn64(Registry& r) {
  register_tile_config<F32Engine, SimtConfig64x64>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
}

}  // namespace detfuse::flce
