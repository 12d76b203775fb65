// Attention forward on wgmma/TMA, configuration FwdD64Br192Bc128St3OvPpRdOt (attention_wgmma.h):
// 192 query rows per CTA, three consumer warpgroups taking turns on the tensor cores in a ring,
// one CTA a tile (FlashAttention-4's d64 forward).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_INSTANCES(, FwdD64Br192Bc128St3OvPpRdOt)

}  // namespace detfuse::attention::wg
