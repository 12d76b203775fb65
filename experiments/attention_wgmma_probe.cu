// Development probe for the Hopper attention forward (kernels/attention/wgmma/):
// times every registered wgmma variant that can run each shape, with random
// bf16 inputs (N(0,1)), 3 warm-up launches, then the median of 20 timed
// launches by CUDA events (L2 flushed before each). TFLOP/s by the DESIGN.md
// convention AttentionProblem::flops_forward() (4 B H Sq Sk d, half if causal).
//   attention_wgmma_probe [B H Hkv Sq Sk d causal(0/1)]
// Without arguments: B=4 H=32 Sq=Sk=4096 at d=128 non-causal and causal, and
// d=64 non-causal and causal (the issue-8 bar shapes).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/device_info.h"
#include "kernels/common/host_bf16.h"
#include "kernels/common/timer.h"
#include "kernels/registry.h"

using namespace detfuse;

namespace {

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16_bits(dist(gen));
  return v;
}

void probe(const AttentionProblem& p, const DeviceInfo& dev) {
  const size_t nq = size_t(p.B * p.H * p.Sq * p.d), nk = size_t(p.B * p.Hkv * p.Sk * p.d);
  DeviceBuffer<uint16_t> Q(nq), K(nk), V(nk), O(nq);
  DeviceBuffer<float> L(size_t(p.B * p.H * p.Sq));
  DeviceBytes flush(size_t(256) << 20);
  Q.upload(random_bf16(nq, 1));
  K.upload(random_bf16(nk, 2));
  V.upload(random_bf16(nk, 3));
  AttentionArgs a;
  a.Q = Q.data(), a.K = K.data(), a.V = V.data(), a.O = O.data(), a.lse = L.data();
  std::printf("%s\n", p.key().c_str());
  for (const auto& v : builtin_registry().attention()) {
    if (v.desc.engine != "wgmma") continue;
    if (auto why = v.can_run(p, AttentionMode::forward, dev)) continue;
    for (int w = 0; w < 3; ++w) v.launch(p, AttentionMode::forward, a, nullptr);
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> ms;
    EventTimer t;
    for (int r = 0; r < 20; ++r) {
      DETFUSE_CUDA_CHECK(cudaMemsetAsync(flush.get(), r, flush.bytes()));
      t.start();
      v.launch(p, AttentionMode::forward, a, nullptr);
      ms.push_back(t.stop_ms());
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("  %-50s %8.3f ms  %6.1f TFLOP/s  (min %.3f ms)\n", v.desc.name.c_str(), med,
                p.flops_forward() / (med * 1e-3) / 1e12, ms.front());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "attention_wgmma_probe: no CUDA device\n");
    return 1;
  }
  const DeviceInfo& dev = cached_device(0);
  std::printf("device: %s (cc %s, %d SMs)\n", dev.name.c_str(), dev.cc_string().c_str(), dev.sm_count);
  std::vector<AttentionProblem> shapes;
  if (argc == 8) {
    AttentionProblem p;
    p.B = std::atoll(argv[1]), p.H = std::atoll(argv[2]), p.Hkv = std::atoll(argv[3]);
    p.Sq = std::atoll(argv[4]), p.Sk = std::atoll(argv[5]), p.d = std::atoll(argv[6]);
    p.causal = std::atoi(argv[7]) != 0;
    shapes.push_back(p);
  } else if (argc == 1) {
    for (int64_t d : {128, 64})
      for (bool causal : {false, true}) {
        AttentionProblem p;
        p.B = 4, p.H = 32, p.Hkv = 32, p.Sq = 4096, p.Sk = 4096, p.d = d, p.causal = causal;
        shapes.push_back(p);
      }
  } else {
    std::fprintf(stderr, "usage: attention_wgmma_probe [B H Hkv Sq Sk d causal]\n");
    return 2;
  }
  for (auto& p : shapes) {
    p.dtype = DType::bf16;
    p.validate();
    probe(p, dev);
  }
  return 0;
}
