// FLCE hybrid variant (engine `wgmmalt`, WgmmaExpLtEngine in engine_wgmmalt.cuh)
// with the ex16 logits epilogue through shared memory and a TMA store
// (EPI_TMA, token `ot1`): cooperative 256x128x64 tiles (128 rows per consumer
// warpgroup) in 1x2 clusters (A multicast along N), 4 stages, the tile stored
// as two 64-column passes through one 32 KiB shared tile; then dX and dW by
// cuBLASLt. This file holds the configuration's wgmma instance and that of
// its register-epilogue fallback WgCoop256x128c12 (the logits layout only:
// no other variant runs that tile), and the driver.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmmalt.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_LOGITS_INSTANCE(, WgCoop256x128c12t)
DETFUSE_WGMMA_LOGITS_INSTANCE(, WgCoop256x128c12)

// 1024 MiB only: mb1920 breaks issue 17's 1.2 GiB memory bar.
void register_flce_wgmmalt_coop256x128c12t(Registry& r) {
  register_owning<WgmmaExpLtEngine, WgCoop256x128c12t>(r, {1024});
}

}  // namespace detfuse::flce
