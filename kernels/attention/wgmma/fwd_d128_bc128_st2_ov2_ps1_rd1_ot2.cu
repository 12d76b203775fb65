// Attention forward on wgmma/TMA, persistent configuration FwdD128Bc128St2Ov2PsRdOt2 (attention_wgmma.h):
// the d128 heuristic's forward with its O tile written by stmatrix (ot2).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_PS_INSTANCES(, FwdD128Bc128St2Ov2PsRdOt2)

}  // namespace detfuse::attention::wg
