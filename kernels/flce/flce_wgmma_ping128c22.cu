// The wgmma launchers of the ping-pong 128x128x64 configuration in 2x2
// clusters (A and B multicast), 6 stages: WgPing128c22, wgmma_configs.h. Only
// the hybrid engine registers variants on it (flce_wgmmalt_ping128c22.cu: its
// ex16 logits GEMM); the dX and dW layouts are instantiated too, for the
// engine tests and experiments/wgmma_probe. Built for sm_90a only
// (DETFUSE_WGMMA_IMPL).
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

DETFUSE_WGMMA_INSTANCES(, WgPing128c22)

}  // namespace detfuse::flce
