// Attention forward on wgmma/TMA, configuration FwdD64Bc128St3Ov2RdOt (attention_wgmma.h).
// One file per configuration so the CUTLASS instantiations compile in
// parallel; built for sm_90a only (DETFUSE_ATTN_WGMMA_IMPL).
#include "kernels/attention/wgmma/attention_wgmma.cuh"

namespace detfuse::attention::wg {

DETFUSE_ATTN_WGMMA_INSTANCES(, FwdD64Bc128St3Ov2RdOt)

}  // namespace detfuse::attention::wg
