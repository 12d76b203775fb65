// Attention backward kv kernels (dK, dV) on wgmma/TMA, configurations KvD128Br80St2OTS4E2B5 and
// KvD128Br80St2ATS4E2B5 (attention_wgmma_bwd.h: ordered and atomic pds4 ew2 with pb5, d = 128, 80 queries a step).
// Built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br80St2OTS4E2B5)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br80St2ATS4E2B5)

}  // namespace detfuse::attention::wg
