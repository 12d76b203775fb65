// Development probe for the Hopper attention (kernels/attention/wgmma/): times
// every registered wgmma variant that can run each shape (the forward-only
// configurations and the forward+backward ones), with random bf16 inputs (N(0,1)),
// 3 warm-up runs, then the median of 20 timed runs by CUDA events (L2 flushed
// before each). TFLOP/s by the DESIGN.md conventions: forward
// AttentionProblem::flops_forward() (4 B H Sq Sk d, half if causal), backward
// 2.5 times that, forward+backward 3.5 times, whatever a variant recomputes.
// For the forward+backward variants: `fwd` the forward alone, `bwd` the
// backward alone (D preprocessing, kernels, convert; from the forward's O and
// LSE), `fwd+bwd` both back to back in one timed interval.
//   attention_wgmma_probe [B H Hkv Sq Sk d causal(0/1)]
// Without arguments: B=4 H=32 Sq=Sk=4096 at d=128 non-causal and causal, and
// d=64 non-causal and causal (the issue-8 bar shapes).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>
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

// Median milliseconds of `fn` over 20 runs after 3 warm-ups, L2 flushed before each.
template <class Fn>
std::pair<double, double> time_ms(DeviceBytes& flush, Fn&& fn) {
  for (int w = 0; w < 3; ++w) fn();
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  EventTimer t;
  for (int r = 0; r < 20; ++r) {
    DETFUSE_CUDA_CHECK(cudaMemsetAsync(flush.get(), r, flush.bytes()));
    t.start();
    fn();
    ms.push_back(t.stop_ms());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

void probe(const AttentionProblem& p, const DeviceInfo& dev) {
  const size_t nq = size_t(p.B * p.H * p.Sq * p.d), nk = size_t(p.B * p.Hkv * p.Sk * p.d);
  DeviceBuffer<uint16_t> Q(nq), K(nk), V(nk), O(nq), dO(nq), dQ(nq), dK(nk), dV(nk);
  DeviceBuffer<float> L(size_t(p.B * p.H * p.Sq));
  DeviceBytes flush(size_t(256) << 20);
  Q.upload(random_bf16(nq, 1));
  K.upload(random_bf16(nk, 2));
  V.upload(random_bf16(nk, 3));
  dO.upload(random_bf16(nq, 4));
  AttentionArgs a;
  a.Q = Q.data(), a.K = K.data(), a.V = V.data(), a.O = O.data(), a.lse = L.data();
  const double ff = p.flops_forward(), fb = p.flops_backward();
  std::printf("%s\n", p.key().c_str());
  {
    for (const auto& v : builtin_registry().attention()) {
      if (v.desc.engine != "wgmma") continue;
      if (auto why = v.can_run(p, AttentionMode::forward, dev)) continue;
      auto [med, mn] = time_ms(flush, [&] { v.launch(p, AttentionMode::forward, a, nullptr); });
      std::printf("  %-58s fwd     %8.3f ms  %6.1f TFLOP/s  (min %.3f ms)\n", v.desc.name.c_str(), med,
                  ff / (med * 1e-3) / 1e12, mn);
      if (v.can_run(p, AttentionMode::backward, dev)) continue;
      DeviceBytes ws(v.workspace_bytes(p, AttentionMode::backward));
      AttentionArgs b;
      b.Q = Q.data(), b.K = K.data(), b.V = V.data(), b.dO = dO.data(), b.O_in = O.data(), b.lse_in = L.data();
      b.dQ = dQ.data(), b.dK = dK.data(), b.dV = dV.data(), b.workspace = ws.get(), b.workspace_size = ws.bytes();
      auto [bmed, bmn] = time_ms(flush, [&] { v.launch(p, AttentionMode::backward, b, nullptr); });
      std::printf("  %-58s bwd     %8.3f ms  %6.1f TFLOP/s  (min %.3f ms, workspace %.1f MiB)\n", v.desc.name.c_str(),
                  bmed, fb / (bmed * 1e-3) / 1e12, bmn, double(ws.bytes()) / (1 << 20));
      auto [tmed, tmn] = time_ms(flush, [&] {
        v.launch(p, AttentionMode::forward, a, nullptr);
        v.launch(p, AttentionMode::backward, b, nullptr);
      });
      std::printf("  %-58s fwd+bwd %8.3f ms  %6.1f TFLOP/s  (min %.3f ms)\n", v.desc.name.c_str(), tmed,
                  (ff + fb) / (tmed * 1e-3) / 1e12, tmn);
    }
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
