// Attention backward kv kernels (dK, dV) on wgmma/TMA, configurations KvD128Br64St2OTS2PE1 and
// KvD128Br64St2ATS2PE1 (attention_wgmma_bwd.h: ordered and atomic sp1 d128 with ew1).
// One file for both so the CUTLASS instantiations compile in parallel with the
// others; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2OTS2PE1)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2ATS2PE1)

}  // namespace detfuse::attention::wg
