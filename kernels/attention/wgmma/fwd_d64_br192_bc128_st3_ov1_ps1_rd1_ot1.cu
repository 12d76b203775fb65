// Attention forward on wgmma/TMA, persistent configuration FwdD64Br192Bc128St3OvPsRdOt (attention_wgmma.h):
// 192 query rows per CTA, three consumer warpgroups (README "Three consumer warpgroups").
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_PS_INSTANCES(, FwdD64Br192Bc128St3OvPsRdOt)

}  // namespace detfuse::attention::wg
