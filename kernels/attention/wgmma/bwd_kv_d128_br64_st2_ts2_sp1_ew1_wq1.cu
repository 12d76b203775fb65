// Attention backward kv kernels (dK, dV) on wgmma/TMA, configurations KvD128Br64St2OTS2PE1W and
// KvD128Br64St2ATS2PE1W (attention_wgmma_bwd.h: ordered and atomic sp1 d128 ew1 with the
// per-warpgroup dQ hand-off, wq1). One file for both so the CUTLASS instantiations compile in
// parallel with the others; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2OTS2PE1W)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD128Br64St2ATS2PE1W)

}  // namespace detfuse::attention::wg
