// CUTLASS cooperative 128x192x64 in 2x1 and 1x2 clusters (cutlass_gemm_impl.cuh):
// the nearest CUTLASS tile to cuBLAS's nvjet 192x192 (a cooperative tile needs
// BM a multiple of 128: two warpgroups of 64-row wgmma).
#include "experiments/gemm_cutlass_probe/cutlass_gemm_impl.cuh"

namespace detfuse::probe {
using namespace cute;
void add_cutlass_coop_128x192(std::vector<CutlassConfig>& out) {
  out.push_back(cutlass_config<Cooperative, Shape<_128, _192, _64>, Shape<_2, _1, _1>>("cutlass coop 128x192x64 c2x1"));
  out.push_back(cutlass_config<Cooperative, Shape<_128, _192, _64>, Shape<_1, _2, _1>>("cutlass coop 128x192x64 c1x2"));
}
}  // namespace detfuse::probe
