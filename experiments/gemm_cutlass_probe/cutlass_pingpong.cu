// CUTLASS ping-pong 128x128x64 in 2x1 and 1x2 clusters (cutlass_gemm_impl.cuh).
#include "experiments/gemm_cutlass_probe/cutlass_gemm_impl.cuh"

namespace detfuse::probe {
using namespace cute;
void add_cutlass_pingpong(std::vector<CutlassConfig>& out) {
  out.push_back(cutlass_config<PingPong, Shape<_128, _128, _64>, Shape<_2, _1, _1>>("cutlass ping 128x128x64 c2x1"));
  out.push_back(cutlass_config<PingPong, Shape<_128, _128, _64>, Shape<_1, _2, _1>>("cutlass ping 128x128x64 c1x2"));
}
}  // namespace detfuse::probe
