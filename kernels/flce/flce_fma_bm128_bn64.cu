// FLCE exact-fp32 variants with 128x64x8 block tiles (8x4 outputs per thread):
// one file per tile shape so the instantiations compile in parallel.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_fma.cuh"
#include "kernels/flce/variants.h"

namespace detfuse::flce {

void register_flce_fma_bm128_bn64(Registry& r) {
  register_tile_config<F32Engine, SimtConfig128x64>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
}

}  // namespace detfuse::flce
