// launch_gemm_f32: split-K (atomic and partials, with an empty split), owning
// accumulation, logits with softcap, zero sizes, argument errors, run-to-run
// bitwise determinism, and a timing report against cuBLASLt SGEMM (no TF32).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/baseline/lt_matmul.h"
#include "kernels/common/timer.h"
#include "kernels/flce/gemm_f32.cuh"
#include "tests/engines/gemm_check.h"
#include "tests/gpu_test.h"

namespace detfuse::engine_test {
namespace {

using flce::GemmParams;
using flce::SimtConfig128x128;
using flce::SimtConfig128x64;
using flce::SimtConfig64x64;

template <class Cfg, Major AM, Major BM>
auto f32_launcher() {
  return [](const GemmParams& p, const auto& epi) { flce::launch_gemm_f32<Cfg, AM, BM>(p, epi, nullptr); };
}

template <class Cfg>
void run_split_cases() {
  const OperandRules r;
  // dW-like (MN, MN) and logits-like (K, K); K = 77 over 3 splits of 32.
  check_split_atomic(Major::MN, Major::MN, 133, 70, 77, 3, 32, r, f32_launcher<Cfg, Major::MN, Major::MN>());
  check_split_atomic(Major::K, Major::K, 61, 131, 77, 3, 32, r, f32_launcher<Cfg, Major::K, Major::K>());
  // Splits of 40: the third split starts at 80 > K and must write zeros.
  check_split_partial(Major::MN, Major::MN, 133, 70, 77, 3, 40, r, f32_launcher<Cfg, Major::MN, Major::MN>());
  check_split_partial(Major::K, Major::K, 61, 131, 77, 3, 40, r, f32_launcher<Cfg, Major::K, Major::K>());
}

TEST(GemmF32, SplitK_SimtConfig128x128) {
  DETFUSE_REQUIRE_GPU();
  run_split_cases<SimtConfig128x128>();
}
TEST(GemmF32, SplitK_SimtConfig128x64) {
  DETFUSE_REQUIRE_GPU();
  run_split_cases<SimtConfig128x64>();
}
TEST(GemmF32, SplitK_SimtConfig64x64) {
  DETFUSE_REQUIRE_GPU();
  run_split_cases<SimtConfig64x64>();
}

TEST(GemmF32, AccumulateFirstThenAdd) {
  DETFUSE_REQUIRE_GPU();
  const OperandRules r;
  check_accumulate(Major::MN, Major::MN, 131, 97, 77, r, f32_launcher<SimtConfig128x64, Major::MN, Major::MN>());
}

TEST(GemmF32, LogitsSoftcap) {
  DETFUSE_REQUIRE_GPU();
  const OperandRules r;
  check_logits(Major::K, Major::K, 37, 131, 77, 5.f, r, f32_launcher<SimtConfig128x128, Major::K, Major::K>());
  check_logits(Major::K, Major::K, 37, 131, 77, 0.f, r, f32_launcher<SimtConfig128x128, Major::K, Major::K>());
}

TEST(GemmF32, ZeroSizesLaunchNothing) {
  DETFUSE_REQUIRE_GPU();
  DeviceBuffer<float> C(16);
  C.fill_bytes(0xFF);
  for (auto [M, N] : {std::pair{0, 5}, std::pair{5, 0}, std::pair{0, 0}}) {
    GemmParams p;
    p.M = M;
    p.N = N;
    p.K = 3;
    EXPECT_NO_THROW((flce::launch_gemm_f32<SimtConfig64x64, Major::K, Major::K>(p, flce::EpiStore<float>{C.data(), 4},
                                                                                 nullptr)));
  }
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  for (float v : C.download()) EXPECT_TRUE(std::isnan(v));
}

TEST(GemmF32, BadArgumentsThrow) {
  DETFUSE_REQUIRE_GPU();
  DeviceBuffer<float> A(64), B(64), C(64);
  auto launch = [&](GemmParams p) {
    flce::launch_gemm_f32<SimtConfig64x64, Major::K, Major::K>(p, flce::EpiStore<float>{C.data(), 8}, nullptr);
  };
  GemmParams good;
  good.M = 4;
  good.N = 4;
  good.K = 8;
  good.A = A.data();
  good.lda = 8;
  good.B = B.data();
  good.ldb = 8;
  EXPECT_NO_THROW(launch(good));
  GemmParams p = good;
  p.lda = 7;  // < K for a Major::K operand
  EXPECT_THROW(launch(p), Error);
  p = good;
  p.B = nullptr;
  EXPECT_THROW(launch(p), Error);
  p = good;
  p.splits = 2;
  p.k_per_split = 0;  // splits > 1 needs a split size
  EXPECT_THROW(launch(p), Error);
  p = good;
  p.splits = 2;
  p.k_per_split = 2;  // 2 * 2 < K
  EXPECT_THROW(launch(p), Error);
  p = good;
  p.M = -1;
  EXPECT_THROW(launch(p), Error);
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
}

// Same inputs, same config: identical bits (each output summed by one thread in k order).
TEST(GemmF32, RunToRunBitwise) {
  DETFUSE_REQUIRE_GPU();
  std::mt19937 rng(7);
  const int M = 300, N = 200, K = 1000;
  HostOperand A = make_operand(M, K, Major::K, 0, 0, rng);
  HostOperand B = make_operand(N, K, Major::MN, 0, 0, rng);
  DeviceOperand dA = upload_operand(A, false), dB = upload_operand(B, false);
  DeviceBuffer<float> C1(size_t(M) * N), C2(size_t(M) * N);
  C1.fill_bytes(0xFF);
  C2.fill_bytes(0xFF);
  const GemmParams p = params_for(M, N, K, A, dA, B, dB);
  flce::launch_gemm_f32<SimtConfig128x128, Major::K, Major::MN>(p, flce::EpiStore<float>{C1.data(), N}, nullptr);
  flce::launch_gemm_f32<SimtConfig128x128, Major::K, Major::MN>(p, flce::EpiStore<float>{C2.data(), N}, nullptr);
  const auto a = C1.download(), b = C2.download();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// Every config sums each output in the same order: identical bits across configs.
TEST(GemmF32, ConfigInvariantBits) {
  DETFUSE_REQUIRE_GPU();
  std::mt19937 rng(11);
  const int M = 259, N = 133, K = 517;
  HostOperand A = make_operand(M, K, Major::MN, 0, 0, rng);
  HostOperand B = make_operand(N, K, Major::MN, 0, 0, rng);
  DeviceOperand dA = upload_operand(A, false), dB = upload_operand(B, false);
  const GemmParams p = params_for(M, N, K, A, dA, B, dB);
  DeviceBuffer<float> C1(size_t(M) * N), C2(size_t(M) * N), C3(size_t(M) * N);
  flce::launch_gemm_f32<SimtConfig128x128, Major::MN, Major::MN>(p, flce::EpiStore<float>{C1.data(), N}, nullptr);
  flce::launch_gemm_f32<SimtConfig128x64, Major::MN, Major::MN>(p, flce::EpiStore<float>{C2.data(), N}, nullptr);
  flce::launch_gemm_f32<SimtConfig64x64, Major::MN, Major::MN>(p, flce::EpiStore<float>{C3.data(), N}, nullptr);
  const auto a = C1.download(), b = C2.download(), c = C3.download();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
}

// Not a pass/fail test of speed: prints TFLOP/s of each config on the three
// FLCE layouts at 4096^3 next to cuBLASLt SGEMM (CUBLAS_COMPUTE_32F, no TF32),
// and checks the engine agrees with cuBLASLt (same math, different order).
template <class Cfg, Major AM, Major BM>
void time_config(const char* cfg, baseline::LtContext& lt, const DeviceBuffer<float>& A, const DeviceBuffer<float>& B,
                 DeviceBuffer<float>& C, DeviceBuffer<float>& Cref, int S) {
  GemmParams p;
  p.M = p.N = p.K = S;
  p.A = A.data();
  p.lda = S;
  p.B = B.data();
  p.ldb = S;
  const flce::EpiStore<float> epi{C.data(), S};
  EventTimer t;
  auto run_ours = [&] { flce::launch_gemm_f32<Cfg, AM, BM>(p, epi, nullptr); };
  auto run_lt = [&] {
    baseline::lt_matmul(lt, DType::f32, baseline::Major(int(AM)), baseline::Major(int(BM)), S, S, S, A.data(), S, B.data(), S, Cref.data(), DType::f32, S);
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
  std::printf("[perf] f32 %-18s A=%-2s B=%-2s %dx%dx%d: %.3f ms %.1f TFLOP/s | cuBLASLt SGEMM %.3f ms %.1f TFLOP/s | %.2fx\n",
              cfg, major_name(AM), major_name(BM), S, S, S, ours, flop / ours * 1e-9, ref, flop / ref * 1e-9,
              ours / ref);
  const auto c = C.download(), cr = Cref.download();
  double num = 0, den = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    num += (double(c[i]) - cr[i]) * (double(c[i]) - cr[i]);
    den += double(cr[i]) * cr[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5) << cfg;
}

TEST(GemmF32Perf, ReportVsCublasSgemm) {
  DETFUSE_REQUIRE_GPU();
  const int S = 4096;
  std::vector<float> h(size_t(S) * S);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : h) v = u(rng);
  DeviceBuffer<float> A, B, C(size_t(S) * S), Cref(size_t(S) * S);
  A.upload(h);
  for (float& v : h) v = u(rng);
  B.upload(h);
  baseline::LtContext lt;
  time_config<SimtConfig128x128, Major::K, Major::K>("128x128x8_8x8", lt, A, B, C, Cref, S);
  time_config<SimtConfig128x128, Major::K, Major::MN>("128x128x8_8x8", lt, A, B, C, Cref, S);
  time_config<SimtConfig128x128, Major::MN, Major::MN>("128x128x8_8x8", lt, A, B, C, Cref, S);
  time_config<SimtConfig128x64, Major::K, Major::K>("128x64x8_8x4", lt, A, B, C, Cref, S);
  time_config<SimtConfig64x64, Major::K, Major::K>("64x64x8_4x8", lt, A, B, C, Cref, S);
}

}  // namespace
}  // namespace detfuse::engine_test
