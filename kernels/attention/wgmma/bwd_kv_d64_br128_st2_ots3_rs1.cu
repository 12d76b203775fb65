// Attention backward kv kernel (dK, dV) on wgmma/TMA, configuration KvD64Br128St2OTS3R (attention_wgmma_bwd.h).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD64Br128St2OTS3R)

}  // namespace detfuse::attention::wg
