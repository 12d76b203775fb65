// FLCE wgmma variants, cooperative 128x256x64 tiles in 2x1 clusters (B multicast), 4 stages.
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_WGMMA_IMPL).
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmma.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_INSTANCES(, WgCoop256c2)

void register_flce_wgmma_coop256c2(Registry& r) {
  register_tile_config<WgmmaEngine, WgCoop256c2>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
  // The ex16 engine (bf16 exp(z - m_tile) chunk): owning only, the same budgets.
  register_owning<WgmmaExpEngine, WgCoop256c2>(r, kOwningChunkMiB);
}

}  // namespace detfuse::flce
