// Attention backward kv kernels (dK, dV) on wgmma/TMA, configuration KvD64Br128St2OTS3E2B5W
// (attention_wgmma_bwd.h: ordered pds3 ew2 pb5 with the per-warpgroup dQ hand-off, wq1).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD64Br128St2OTS3E2B5W)

}  // namespace detfuse::attention::wg
