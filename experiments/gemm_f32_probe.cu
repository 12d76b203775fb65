// Development probe: the exact fp32 GEMM engine (kernels/flce/gemm_fma.cuh,
// engine `fma`) against cuBLASLt SGEMM (CUBLAS_COMPUTE_32F, no TF32) at S^3,
// on the three FLCE operand layouts. Prints milliseconds and TFLOP/s of each
// config (median of 7 after a warm-up) and the relative norm difference from
// cuBLASLt (same math, different order); exits 1 if one exceeds 1e-5, 2
// without a GPU or on bad arguments. Not a test: speed has no pass mark.
//   gemm_f32_probe [S]      (default 4096)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/baseline/lt_matmul.h"
#include "kernels/common/buffer.h"
#include "kernels/common/timer.h"
#include "kernels/flce/gemm_fma.cuh"

using namespace detfuse;

namespace {

const char* major_name(Major m) { return m == Major::K ? "K" : "MN"; }

template <class Cfg, Major AM, Major BM>
bool time_config(const char* cfg, baseline::LtContext& lt, const DeviceBuffer<float>& A, const DeviceBuffer<float>& B,
                 DeviceBuffer<float>& C, DeviceBuffer<float>& Cref, int S) {
  flce::GemmParams p;
  p.M = p.N = p.K = S;
  p.A = A.data();
  p.lda = S;
  p.B = B.data();
  p.ldb = S;
  const flce::EpiStore<float> epi{C.data(), S};
  EventTimer t;
  auto run_ours = [&] { flce::launch_gemm_f32<Cfg, AM, BM>(p, epi, nullptr); };
  auto run_lt = [&] {
    baseline::lt_matmul(lt, DType::f32, AM, BM, S, S, S, A.data(), S, B.data(), S, Cref.data(), DType::f32, S);
  };
  auto median_of = [&](auto&& fn) {
    fn();
    std::vector<double> v;
    for (int i = 0; i < 7; ++i) {
      t.start();
      fn();
      v.push_back(t.stop_ms());
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double ours = median_of(run_ours), ref = median_of(run_lt);
  const double flop = 2.0 * S * double(S) * S;
  const auto c = C.download(), cr = Cref.download();
  double num = 0, den = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    num += (double(c[i]) - cr[i]) * (double(c[i]) - cr[i]);
    den += double(cr[i]) * cr[i];
  }
  const double rel = std::sqrt(num / den);
  std::printf("f32 %-18s A=%-2s B=%-2s %dx%dx%d: %.3f ms %.1f TFLOP/s | cuBLASLt SGEMM %.3f ms %.1f TFLOP/s | %.2fx"
              " | rel diff %.1e\n",
              cfg, major_name(AM), major_name(BM), S, S, S, ours, flop / ours * 1e-9, ref, flop / ref * 1e-9,
              ours / ref, rel);
  return rel < 1e-5;
}

}  // namespace

int main(int argc, char** argv) {
  const int S = argc > 1 ? std::atoi(argv[1]) : 4096;
  if (argc > 2 || S <= 0 || S % 4 != 0) {
    std::fprintf(stderr, "usage: gemm_f32_probe [S]   (S > 0, a multiple of 4; default 4096)\n");
    return 2;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "gemm_f32_probe: no CUDA device\n");
    return 2;
  }
  try {
    std::vector<float> h(size_t(S) * S);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (float& v : h) v = u(rng);
    DeviceBuffer<float> A, B, C(size_t(S) * S), Cref(size_t(S) * S);
    A.upload(h);
    for (float& v : h) v = u(rng);
    B.upload(h);
    baseline::LtContext lt;
    bool ok = true;
    ok &= time_config<flce::SimtConfig128x128, Major::K, Major::K>("128x128x8_8x8", lt, A, B, C, Cref, S);
    ok &= time_config<flce::SimtConfig128x128, Major::K, Major::MN>("128x128x8_8x8", lt, A, B, C, Cref, S);
    ok &= time_config<flce::SimtConfig128x128, Major::MN, Major::MN>("128x128x8_8x8", lt, A, B, C, Cref, S);
    ok &= time_config<flce::SimtConfig128x64, Major::K, Major::K>("128x64x8_8x4", lt, A, B, C, Cref, S);
    ok &= time_config<flce::SimtConfig64x64, Major::K, Major::K>("64x64x8_4x8", lt, A, B, C, Cref, S);
    if (!ok) std::fprintf(stderr, "gemm_f32_probe: a config differs from cuBLASLt by more than 1e-5\n");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "gemm_f32_probe: %s\n", e.what());
    return 1;
  }
}
