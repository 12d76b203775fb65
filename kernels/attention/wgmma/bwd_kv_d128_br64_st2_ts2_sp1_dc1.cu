// Attention backward kv kernel (dK, dV) on wgmma/TMA, configurations
// KvD128Br64St2OTS2PD and KvD128Br64St2ATS2PD (attention_wgmma_bwd.h: dc1, the
// ordered and atomic kv kernels with decoupled consumer warpgroups). Both in
// one translation unit (one file less for CI's build of every CUDA TU); built
// for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2OTS2PD)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2ATS2PD)

}  // namespace detfuse::attention::wg
