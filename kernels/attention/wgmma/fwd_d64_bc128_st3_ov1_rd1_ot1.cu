// Attention forward on wgmma/TMA, configuration FwdD64Bc128St3OvRdOt (attention_wgmma.h):
// 128 query rows per CTA, two consumer warpgroups, one CTA a tile.
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_INSTANCES(, FwdD64Bc128St3OvRdOt)

}  // namespace detfuse::attention::wg
