// Timing driver for the float64 references (not a test).
//   bench_reference [N D V threads]             FLCE forward+backward
//   bench_reference attn B H Hkv S d threads     attention forward+backward (causal)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "reference/attention_ref.h"
#include "reference/flce_ref.h"
#include "reference/inputs.h"

using namespace detfuse;
using namespace detfuse::reference;

static double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "attn") == 0) {
    AttentionProblem p;
    p.B = argc > 2 ? std::atoll(argv[2]) : 1;
    p.H = argc > 3 ? std::atoll(argv[3]) : 8;
    p.Hkv = argc > 4 ? std::atoll(argv[4]) : 8;
    p.Sq = p.Sk = argc > 5 ? std::atoll(argv[5]) : 1024;
    p.d = argc > 6 ? std::atoll(argv[6]) : 128;
    p.causal = true;
    const int threads = argc > 7 ? std::atoi(argv[7]) : 0;
    auto t0 = std::chrono::steady_clock::now();
    const AttentionInputs in = make_attention_inputs(p, 1);
    const double tgen = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const AttentionResult r = attention_reference(p, in, true, threads);
    const double t = seconds_since(t0);
    const double flop = p.flops_forward() + p.flops_backward();
    std::printf("%s threads=%d gen %.2fs fwd+bwd %.2fs (%.2f GFLOP/s nominal) O[0]=%g\n", p.key().c_str(), threads,
                tgen, t, flop / t * 1e-9, r.O[0]);
    return 0;
  }
  FlceProblem p;
  p.N = argc > 1 ? std::atoll(argv[1]) : 512;
  p.D = argc > 2 ? std::atoll(argv[2]) : 1024;
  p.V = argc > 3 ? std::atoll(argv[3]) : 8192;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 0;
  auto t0 = std::chrono::steady_clock::now();
  const FlceInputs in = make_flce_inputs(p, 1);
  const double tgen = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const FlceResult f = flce_reference(p, in, false, threads);
  const double tf = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const FlceResult r = flce_reference(p, in, true, threads);
  const double tb = seconds_since(t0);
  // Work done: 2NDV forward; 8NDV forward+backward (the logits are recomputed for dW).
  const double ndv = double(p.N) * double(p.D) * double(p.V);
  std::printf("%s threads=%d gen %.2fs fwd %.2fs (%.2f GFLOP/s) fwd+bwd %.2fs (%.2f GFLOP/s executed) loss=%.6f %.6f\n",
              p.shape().c_str(), threads, tgen, tf, 2 * ndv / tf * 1e-9, tb, 8 * ndv / tb * 1e-9, f.loss, r.loss);
  return 0;
}
