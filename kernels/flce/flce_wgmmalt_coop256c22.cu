// FLCE hybrid variants (engine `wgmmalt`, WgmmaExpLtEngine in engine_wgmmalt.cuh):
// the ex16 logits GEMM on wgmma, cooperative 128x256x64 tiles in 2x2 clusters
// (A and B multicast, `c22`), 4 stages, then dX and dW by cuBLASLt. The wgmma launchers are the
// instances of flce_wgmma_coop256c22.cu (declared extern in wgmma_configs.h), the cuBLASLt
// products those of flce_cublaslt.cu: this file compiles only the driver.
#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_wgmmalt.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"

namespace detfuse::flce {

void register_flce_wgmmalt_coop256c22(Registry& r) {
  register_owning<WgmmaExpLtEngine, WgCoop256c22>(r, kHybridChunkMiB);
}

}  // namespace detfuse::flce
