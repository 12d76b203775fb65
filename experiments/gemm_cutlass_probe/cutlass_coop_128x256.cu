// CUTLASS cooperative 128x256x64 in 2x1 and 1x2 clusters (cutlass_gemm_impl.cuh).
#include "experiments/gemm_cutlass_probe/cutlass_gemm_impl.cuh"

namespace detfuse::probe {
using namespace cute;
void add_cutlass_coop_128x256(std::vector<CutlassConfig>& out) {
  out.push_back(cutlass_config<Cooperative, Shape<_128, _256, _64>, Shape<_2, _1, _1>>("cutlass coop 128x256x64 c2x1"));
  out.push_back(cutlass_config<Cooperative, Shape<_128, _256, _64>, Shape<_1, _2, _1>>("cutlass coop 128x256x64 c1x2"));
}
}  // namespace detfuse::probe
