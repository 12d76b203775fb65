// Attention forward on wgmma/TMA, configuration FwdD64Br192Bc128St3OvRdOt2 (attention_wgmma.h): the d64
// causal heuristic's forward (192 query rows, three consumer warpgroups, one CTA a tile) with its O tile
// written by stmatrix (ot2).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_INSTANCES(, FwdD64Br192Bc128St3OvRdOt2)

}  // namespace detfuse::attention::wg
