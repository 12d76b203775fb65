// The wgmma launchers of the cooperative 128x256x64 configuration in 2x2
// clusters (A and B multicast), 4 stages: WgCoop256c22, wgmma_configs.h. Only
// the hybrid engine registers variants on it (flce_wgmmalt_coop256c22.cu: its
// ex16 logits GEMM); the dX and dW layouts are instantiated too, for the
// engine tests and experiments/wgmma_probe. Built for sm_90a only
// (DETFUSE_WGMMA_IMPL).
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_INSTANCES(, WgCoop256c22)

}  // namespace detfuse::flce
