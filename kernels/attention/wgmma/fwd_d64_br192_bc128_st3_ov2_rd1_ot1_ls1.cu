// Attention forward on wgmma/TMA, configuration FwdD64Br192Bc128St3Ov2RdOtLs (attention_wgmma.h):
// 192 query rows, three consumer warpgroups, one CTA a tile, ov2 with the split walk (ls1).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_INSTANCES(, FwdD64Br192Bc128St3Ov2RdOtLs)

}  // namespace detfuse::attention::wg
