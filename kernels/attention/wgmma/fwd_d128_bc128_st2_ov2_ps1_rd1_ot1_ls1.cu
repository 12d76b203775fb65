// Attention forward on wgmma/TMA, persistent configuration FwdD128Bc128St2Ov2PsRdOtLs (attention_wgmma.h):
// the d128 heuristic's forward (ov2 ps1 rd1 ot1) with the split walk (ls1).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_PS_INSTANCES(, FwdD128Bc128St2Ov2PsRdOtLs)

}  // namespace detfuse::attention::wg
