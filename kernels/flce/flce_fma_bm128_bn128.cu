// FLCE exact-fp32 variants with 128x128x8 block tiles (8x8 outputs per thread):
// one file per tile shape so the instantiations compile in parallel.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_fma.cuh"
#include "kernels/flce/variants.h"

namespace detfuse::flce {

void register_flce_fma_bm128_bn128(Registry& r) {
  register_tile_config<F32Engine, SimtConfig128x128>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
}

}  // namespace detfuse::flce
