// Attention backward kv kernels (dK, dV) on wgmma/TMA, configurations KvD64Br128St2OTS3E2B9 and
// KvD64Br128St2ATS3E2B9 (attention_wgmma_bwd.h: ordered and atomic pds3 ew2 with pb9).
// Built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD64Br128St2OTS3E2B9)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD64Br128St2ATS3E2B9)

}  // namespace detfuse::attention::wg
