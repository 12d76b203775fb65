// Attention backward kv kernel (dK, dV) on wgmma/TMA, configuration KvD128Br80St2OTS4E2B5S (attention_wgmma_bwd.h:
// the ordered pds4 ew2 pb5 kernel at d = 128 with dK / dV staged through the K / V tiles, se1, session 35).
// Built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br80St2OTS4E2B5S)

}  // namespace detfuse::attention::wg
