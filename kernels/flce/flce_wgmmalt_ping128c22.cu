// FLCE hybrid variants (engine `wgmmalt`, WgmmaExpLtEngine in engine_wgmmalt.cuh):
// the ex16 logits GEMM on wgmma, ping-pong 128x128x64 tiles per warpgroup in 2x2 clusters
// (A and B multicast, `c22`), 6 stages, then dX and dW by cuBLASLt. The wgmma launchers are the
// instances of flce_wgmma_ping128c22.cu (declared extern in wgmma_configs.h), the cuBLASLt
// products those of flce_cublaslt.cu: this file compiles only the driver.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmmalt.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

void register_flce_wgmmalt_ping128c22(Registry& r) {
  register_owning<WgmmaExpLtEngine, WgPing128c22>(r, kHybridChunkMiB);
}

}  // namespace detfuse::flce
