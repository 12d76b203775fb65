// FLCE hybrid variants (engine `wgmmalt`, WgmmaExpLtEngine in engine_wgmmalt.cuh)
// with the ex16 logits epilogue through shared memory and a TMA store
// (EPI_TMA, token `ot1`): ping-pong 128x128x64 tiles per warpgroup in 2x1
// clusters, 5 stages, then dX and dW by cuBLASLt. This file holds the
// configuration's only wgmma instance (the logits layout), so it compiles
// CUTLASS once, and the driver.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmmalt.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_LOGITS_INSTANCE(, WgPing128c2t)

void register_flce_wgmmalt_ping128c2t(Registry& r) {
  register_owning<WgmmaExpLtEngine, WgPing128c2t>(r, kHybridChunkMiB);
}

}  // namespace detfuse::flce
