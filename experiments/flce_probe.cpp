// Development probe (llm.c habit): times FLCE variants at one shape against
// three cuBLAS GEMMs in the same process. The supported benchmark is
// `detfuse bench flce`; this stays as the quick tool used while developing.
//   flce_probe N D V [bf16|fp32] [variant-substring] [reps]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/baseline/three_gemms.h"
#include "kernels/common/buffer.h"
#include "kernels/common/timer.h"
#include "kernels/flce/device_case.h"
#include "kernels/flce/flce.h"
#include "reference/inputs.h"

using namespace detfuse;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: flce_probe N D V [bf16|fp32] [variant-substring] [reps]\n");
    return 2;
  }
  FlceProblem p;
  p.N = std::atoll(argv[1]);
  p.D = std::atoll(argv[2]);
  p.V = std::atoll(argv[3]);
  p.dtype = argc > 4 ? parse_dtype(argv[4]) : DType::bf16;
  std::string filter = argc > 5 ? argv[5] : "";
  int reps = argc > 6 ? std::atoi(argv[6]) : 3;
  auto in = reference::make_flce_inputs(p, 1);
  flce::DeviceCase dc(p, in.X, in.W, in.y, in.dloss);
  auto base = baseline::time_three_gemms(p, 2, reps);
  std::printf("shape %s %s: cuBLAS three GEMMs %.2f ms (logits %.2f, dX %.2f, dW %.2f)\n", p.shape().c_str(),
              to_string(p.dtype), base.total_ms(), base.logits_ms, base.dx_ms, base.dw_ms);
  int dev = 0;
  DeviceInfo info = query_device(dev);
  for (const auto& v : builtin_registry().flce()) {
    if (v.desc.dtype != p.dtype || v.desc.name.find(filter) == std::string::npos) continue;
    if (auto why = v.can_run(p, FlceMode::forward_backward, info)) {
      std::printf("%-60s cannot run: %s\n", v.desc.name.c_str(), why->c_str());
      continue;
    }
    size_t ws_bytes = v.workspace_bytes(p, FlceMode::forward_backward);
    DeviceBytes ws(ws_bytes);
    FlceArgs a = dc.args(FlceMode::forward_backward);
    a.workspace = ws.get();
    a.workspace_size = ws_bytes;
    v.launch(p, FlceMode::forward_backward, a, nullptr);  // warm-up
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> ms;
    EventTimer t;
    for (int r = 0; r < reps; ++r) {
      t.start();
      v.launch(p, FlceMode::forward_backward, a, nullptr);
      ms.push_back(t.stop_ms());
    }
    std::sort(ms.begin(), ms.end());
    float med = ms[ms.size() / 2];
    std::printf("%-60s %8.2f ms  %6.1f TFLOP/s  %.2fx cuBLAS  ws %.2f GiB\n", v.desc.name.c_str(), med,
                p.flops_forward_backward() / (med * 1e9), med / base.total_ms(), double(ws_bytes) / (1 << 30));
    std::fflush(stdout);
  }
  return 0;
}
