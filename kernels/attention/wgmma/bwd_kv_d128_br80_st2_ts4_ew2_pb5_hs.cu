// Attention backward kv kernel (dK, dV) on wgmma/TMA, configuration KvD128Br80St2OTS4E2B5H
// (attention_wgmma_bwd.h: the ordered pds4 ew2 pb5 kernel, d = 128, 80 queries a step, with the hs
// split epilogue built in: BwdKvHsConfig). Built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br80St2OTS4E2B5H)

}  // namespace detfuse::attention::wg
