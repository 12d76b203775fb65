// FLCE wgmma variants, cooperative 128x256x64 tiles, no cluster, 4 stages.
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_WGMMA_IMPL).
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmma.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_INSTANCES(, WgCoop256c1)

void register_flce_wgmma_coop256c1(Registry& r) {
  register_tile_config<WgmmaEngine, WgCoop256c1>(r, kOwningChunkMiB, kChunkMiB, kSplits, kSlabRows);
}

}  // namespace detfuse::flce
