// Attention forward on wgmma/TMA, configuration FwdD64Br192Bc128St3OvRdOt (attention_wgmma.h):
// 192 query rows per CTA, three consumer warpgroups, one CTA a tile (FlashAttention-4's d64 launch).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_INSTANCES(, FwdD64Br192Bc128St3OvRdOt)

}  // namespace detfuse::attention::wg
