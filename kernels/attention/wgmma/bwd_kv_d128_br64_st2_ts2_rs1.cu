// Attention backward kv kernels (dK, dV) on wgmma/TMA, configurations KvD128Br64St2OTS2R and
// KvD128Br64St2ATS2R (attention_wgmma_bwd.h: rs1 at d = 128, ordered and atomic in one unit).
// Built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2OTS2R)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2ATS2R)

}  // namespace detfuse::attention::wg
