// FLCE bf16 tensor-core variants with 64x128x32 block tiles (2x2 warps, 4 stages):
// one file per tile shape so the instantiations compile in parallel.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_mma.cuh"
#include "kernels/flce/variants.h"

namespace detfuse::flce {

void register_flce_mma_bm64_bn128(Registry& r) {
  using Cfg = TcConfig<64, 128, 32, 2, 2, 4>;
  register_tile_config<Bf16Engine, Cfg>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
}

}  // namespace detfuse::flce
