// FLCE wgmma variants with 128x128x64 block tiles in 2x1 clusters, 6 stages
// (smaller tiles: more of them for the short dX and dW grids): one file per
// tile shape so the CUTLASS instantiations compile in parallel. sm_90a only.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmma.cuh"
#include "kernels/flce/variants.h"

namespace detfuse::flce {

void register_flce_wgmma_bn128_c2(Registry& r) {
  using Cfg = WgConfig<128, 128, 64, 2, 6>;
  register_tile_config<WgmmaEngine, Cfg>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
}

}  // namespace detfuse::flce
