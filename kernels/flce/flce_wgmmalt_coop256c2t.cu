// FLCE hybrid variant (engine `wgmmalt`, WgmmaExpLtEngine in engine_wgmmalt.cuh)
// with the ex16 logits epilogue through shared memory and a TMA store
// (EPI_TMA, token `ot1`): cooperative 128x256x64 tiles in 2x1 clusters, 4
// stages, the tile stored as two 128-column passes through one 32 KiB shared
// tile; then dX and dW by cuBLASLt. This file holds the configuration's only
// wgmma instance (the logits layout) and the driver; its fallback (register
// epilogue) is WgCoop256c2's instance in flce_wgmma_coop256c2.cu.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmmalt.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_LOGITS_INSTANCE(, WgCoop256c2t)

// 1024 MiB only: mb1920 breaks issue 17's 1.2 GiB memory bar.
void register_flce_wgmmalt_coop256c2t(Registry& r) { register_owning<WgmmaExpLtEngine, WgCoop256c2t>(r, {1024}); }

}  // namespace detfuse::flce
