// FLCE wgmma variants, ping-pong 128x128x64 tiles per warpgroup in 2x1 clusters, 6 stages.
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_WGMMA_IMPL).
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmma.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_INSTANCES(, WgPing128c2)

void register_flce_wgmma_ping128c2(Registry& r) {
  register_tile_config<WgmmaEngine, WgPing128c2>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
  // The ex16 engine (bf16 exp(z - m_tile) chunk): owning only, the same budgets.
  register_owning<WgmmaExpEngine, WgPing128c2>(r, kOwningChunkMiB);
}

}  // namespace detfuse::flce
