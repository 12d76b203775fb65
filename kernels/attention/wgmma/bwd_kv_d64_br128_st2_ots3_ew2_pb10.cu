// Attention backward kv kernels (dK, dV) on wgmma/TMA, configuration KvD64Br128St2OTS3E2B10
// (attention_wgmma_bwd.h: ordered pds3 ew2 with pb10 (pb5 with the exp's argument formed before the dP^T wait)).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_KV_INSTANCES(, KvD64Br128St2OTS3E2B10)

}  // namespace detfuse::attention::wg
