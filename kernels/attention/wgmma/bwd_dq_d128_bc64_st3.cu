// Attention backward dq kernel (owning dQ) on wgmma/TMA, configuration DqD128Bc64St3 (attention_wgmma_bwd.h).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_DQ_INSTANCES(, DqD128Bc64St3)

}  // namespace detfuse::attention::wg
