// FLCE wgmma variants with 128x256x64 block tiles in 2x1 clusters (B tiles
// multicast to both CTAs), 4 stages: one file per tile shape so the CUTLASS
// instantiations compile in parallel. Built for sm_90a only.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmma.cuh"
#include "kernels/flce/variants.h"

namespace detfuse::flce {

void register_flce_wgmma_bn256_c2(Registry& r) {
  using Cfg = WgConfig<128, 256, 64, 2, 4>;
  register_tile_config<WgmmaEngine, Cfg>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
}

}  // namespace detfuse::flce
