// Attention backward kv kernels (dK, dV) on wgmma/TMA, configurations KvD128Br64St2OTS2E2B8 and
// KvD128Br64St2ATS2E2B8 (attention_wgmma_bwd.h: ordered and atomic pds2 ew2 with pb8).
// Built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2OTS2E2B8)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2ATS2E2B8)

}  // namespace detfuse::attention::wg
