// Attention forward on wgmma/TMA, persistent configuration FwdD64Br192Bc128St3Ov2PsRdLs (attention_wgmma.h):
// 192 query rows, three consumer warpgroups, persistent, ov2 with the split walk (ls1).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_PS_INSTANCES(, FwdD64Br192Bc128St3Ov2PsRdLs)

}  // namespace detfuse::attention::wg
