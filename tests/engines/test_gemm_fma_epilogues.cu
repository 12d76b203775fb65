// launch_gemm_f32: split-K (atomic and partials, with an empty split), owning
// accumulation, logits with softcap, zero sizes, argument errors, run-to-run
// bitwise determinism. The timing against cuBLASLt SGEMM is a probe:
// experiments/gemm_f32_probe.cu.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/flce/gemm_fma.cuh"
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

}  // namespace
}  // namespace detfuse::engine_test
