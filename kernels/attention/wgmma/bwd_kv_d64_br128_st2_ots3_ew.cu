// Attention backward kv kernels (dK, dV) on wgmma/TMA, configurations KvD64Br128St2OTS3E1 and
// KvD64Br128St2OTS3E2 (attention_wgmma_bwd.h: ordered pds3 with ew1 / ew2).
// One file per base configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD64Br128St2OTS3E1)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD64Br128St2OTS3E2)

}  // namespace detfuse::attention::wg
