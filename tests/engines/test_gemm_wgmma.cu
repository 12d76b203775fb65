// launch_gemm_wgmma (Hopper wgmma + TMA, bf16 in, fp32 accumulation): the
// operand layouts the FLCE products use, on the configs the variants register,
// over odd shapes (ragged M/N/K tiles, a single row, odd output leading
// dimensions that force element-wise stores, tiles_m odd under 2x1 clusters),
// split-K with ragged and empty splits (atomic and partials), owning
// accumulation, softcap logits and the fused per-tile row statistics, against
// a float64 GEMM of the same bf16-rounded inputs. Calls the launchers the
// variant files instantiate (wgmma_configs.h); skips on a device that is not
// compute capability 9.0.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/common/device_info.h"
#include "kernels/flce/wgmma_configs.h"
#include "tests/engines/gemm_check.h"
#include "tests/gpu_test.h"

namespace detfuse::engine_test {
namespace {

using flce::GemmParams;
using flce::WgCoop128c2;
using flce::WgCoop256c1;
using flce::WgCoop256c2;
using flce::WgPing128c1;
using flce::WgPing128c2;

#define DETFUSE_REQUIRE_SM90()                                                            \
  do {                                                                                    \
    DETFUSE_REQUIRE_GPU();                                                                \
    const int cc_ = ::detfuse::query_device(0).compute_capability();                      \
    if (cc_ != 90) GTEST_SKIP() << "sm_90a code needs compute capability 9.0, got " << cc_; \
  } while (0)

OperandRules wgmma_rules() {
  OperandRules r;
  r.bf16 = true;
  r.ld_multiple = 8;  // TMA: 16-byte leading dimensions
  r.fill = std::numeric_limits<float>::quiet_NaN();  // nothing past K or M/N may be read
  r.off_unit = 8;     // TMA: 16-byte aligned bases
  r.tol = 1e-2;
  return r;
}

template <class Cfg, Major AM, Major BM>
auto wgmma_launcher(int group_m = 8) {
  return [group_m](const GemmParams& p, const auto& epi) {
    flce::launch_gemm_wgmma<Cfg, AM, BM>(p, flce::to_wg_epilogue(epi), group_m, nullptr);
  };
}

template <class Cfg, Major AM, Major BM>
void run_layout_cases() {
  for (const Shape& s : odd_shapes()) {
    if (s.K == 0) continue;  // refused by the engine (a TMA tensor cannot be empty); FLCE never has K = 0
    check_store(s, AM, BM, wgmma_rules(), wgmma_launcher<Cfg, AM, BM>());
  }
  // Several row tiles, tiles_m odd (the second CTA of the last cluster is past M).
  check_store({3 * 128 + 5, 520, 300, 0, 0}, AM, BM, wgmma_rules(), wgmma_launcher<Cfg, AM, BM>());
}

#define DETFUSE_WGMMA_LAYOUT_TEST(CFG, AM, BM) \
  TEST(GemmWgmma, CFG##_A##AM##_B##BM) {       \
    DETFUSE_REQUIRE_SM90();                    \
    run_layout_cases<CFG, Major::AM, Major::BM>(); \
  }

// logits (A K, B K), dX (A K, B MN), dW (A MN, B MN), every configuration.
#define DETFUSE_WGMMA_CONFIG_TESTS(CFG)   \
  DETFUSE_WGMMA_LAYOUT_TEST(CFG, K, K)    \
  DETFUSE_WGMMA_LAYOUT_TEST(CFG, K, MN)   \
  DETFUSE_WGMMA_LAYOUT_TEST(CFG, MN, MN)
DETFUSE_WGMMA_CONFIG_TESTS(WgCoop256c2)
DETFUSE_WGMMA_CONFIG_TESTS(WgCoop256c1)
DETFUSE_WGMMA_CONFIG_TESTS(WgCoop128c2)
DETFUSE_WGMMA_CONFIG_TESTS(WgPing128c2)
DETFUSE_WGMMA_CONFIG_TESTS(WgPing128c1)

// Split sizes are multiples of BK (64). K = 200: with kps 128 the second split
// is ragged; with 4 splits of 64 the fourth is ragged; with 3 of 128 the third
// is empty and must write zeros.
TEST(GemmWgmma, SplitK) {
  DETFUSE_REQUIRE_SM90();
  const OperandRules r = wgmma_rules();
  check_split_atomic(Major::MN, Major::MN, 261, 70, 200, 4, 64, r, wgmma_launcher<WgCoop256c1, Major::MN, Major::MN>());
  check_split_atomic(Major::MN, Major::MN, 133, 300, 200, 2, 128, r, wgmma_launcher<WgCoop256c2, Major::MN, Major::MN>());
  check_split_partial(Major::MN, Major::MN, 261, 70, 200, 3, 128, r, wgmma_launcher<WgCoop256c2, Major::MN, Major::MN>());
  check_split_partial(Major::K, Major::MN, 61, 131, 200, 4, 64, r, wgmma_launcher<WgCoop256c2, Major::K, Major::MN>());
  // Ping-pong: empty and ragged splits keep the two warpgroups' turns in step.
  check_split_partial(Major::MN, Major::MN, 261, 70, 200, 3, 128, r, wgmma_launcher<WgPing128c2, Major::MN, Major::MN>());
  // 5 splits of 256 over K = 1000: the fifth is empty.
  check_split_atomic(Major::MN, Major::MN, 520, 300, 1000, 5, 256, r, wgmma_launcher<WgPing128c1, Major::MN, Major::MN>());
  check_split_partial(Major::K, Major::MN, 61, 131, 200, 4, 64, r, wgmma_launcher<WgPing128c1, Major::K, Major::MN>());
}

TEST(GemmWgmma, AccumulateFirstThenAdd) {
  DETFUSE_REQUIRE_SM90();
  check_accumulate(Major::MN, Major::MN, 300, 97, 77, wgmma_rules(), wgmma_launcher<WgCoop256c2, Major::MN, Major::MN>(1));
  check_accumulate(Major::MN, Major::MN, 131, 520, 200, wgmma_rules(), wgmma_launcher<WgCoop256c1, Major::MN, Major::MN>(1));
  check_accumulate(Major::MN, Major::MN, 700, 520, 300, wgmma_rules(), wgmma_launcher<WgPing128c2, Major::MN, Major::MN>(1));
}

TEST(GemmWgmma, LogitsSoftcap) {
  DETFUSE_REQUIRE_SM90();
  check_logits(Major::K, Major::K, 37, 131, 77, 5.f, wgmma_rules(), wgmma_launcher<WgCoop256c2, Major::K, Major::K>(1 << 30));
  check_logits(Major::K, Major::K, 300, 1031, 136, 0.f, wgmma_rules(), wgmma_launcher<WgCoop128c2, Major::K, Major::K>(1 << 30));
  check_logits(Major::K, Major::K, 300, 1031, 136, 7.f, wgmma_rules(), wgmma_launcher<WgPing128c1, Major::K, Major::K>(1 << 30));
}

// The fused row statistics: for every row and column tile, {max, sum exp(z -
// max), sum z} over the tile's in-range columns, against float64 on the same
// inputs; and the logits themselves.
template <class Cfg>
void check_row_stats(int M, int N, int K, float softcap) {
  SCOPED_TRACE("row stats M=" + std::to_string(M) + " N=" + std::to_string(N) + " cap=" + std::to_string(softcap) +
               " BN=" + std::to_string(Cfg::BN));
  const OperandRules r = wgmma_rules();
  std::mt19937 rng(uint32_t(M * 3 + N * 5 + K));
  HostOperand A = make_operand(M, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  HostOperand B = make_operand(N, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  DeviceOperand dA = upload_operand(A, true), dB = upload_operand(B, true);
  const int64_t ldc = (N + 7) / 8 * 8, tiles = (N + Cfg::BN - 1) / Cfg::BN;
  DeviceBuffer<float> C(size_t(M) * ldc), S(size_t(M) * tiles * 4);
  C.fill_bytes(0xFF);
  S.fill_bytes(0xFF);
  flce::launch_gemm_wgmma<Cfg, Major::K, Major::K>(params_for(M, N, K, A, dA, B, dB),
                                                    flce::to_wg_epilogue(flce::EpiLogitsStats{C.data(), ldc, softcap,
                                                                                              S.data(), tiles}),
                                                    1 << 30, nullptr);
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = C.download(), st = S.download();
  std::vector<double> ref = ref_gemm(A, B, M, N, 0, K);
  if (softcap > 0)
    for (double& v : ref) v = double(softcap) * std::tanh(v / double(softcap));
  EXPECT_LT(rel_norm_error(out, ldc, ref, M, N), r.tol);
  double worst_max = 0, worst_sum = 0, worst_z = 0;
  for (int m = 0; m < M; ++m)
    for (int t = 0; t < tiles; ++t) {
      // Reference statistics from the kernel's own logits (so only the
      // reduction is checked here, not the GEMM a second time).
      double mx = -INFINITY, se = 0, sz = 0;
      for (int n = t * Cfg::BN; n < std::min<int>(N, (t + 1) * Cfg::BN); ++n) mx = std::max(mx, double(out[m * ldc + n]));
      for (int n = t * Cfg::BN; n < std::min<int>(N, (t + 1) * Cfg::BN); ++n) {
        se += std::exp(double(out[m * ldc + n]) - mx);
        sz += out[m * ldc + n];
      }
      const float* g = &st[(size_t(m) * tiles + t) * 4];
      worst_max = std::max(worst_max, std::abs(g[0] - mx));
      worst_sum = std::max(worst_sum, std::abs(g[1] - se) / se);
      worst_z = std::max(worst_z, std::abs(g[2] - sz) / (1.0 + std::abs(sz)));
    }
  EXPECT_EQ(worst_max, 0.0) << "the tile max is an exact float max";
  EXPECT_LT(worst_sum, 1e-5) << "sum exp(z - max), relative";
  EXPECT_LT(worst_z, 1e-4) << "sum z, relative to 1 + |sum z|";
}

TEST(GemmWgmma, LogitsRowStatistics) {
  DETFUSE_REQUIRE_SM90();
  check_row_stats<WgCoop256c2>(300, 1031, 136, 0.f);  // ragged last column tile (1031 = 4*256 + 7)
  check_row_stats<WgCoop256c2>(129, 512, 64, 15.f);   // softcap; 129 rows: a row tile of one row
  check_row_stats<WgPing128c2>(300, 1031, 136, 0.f);
  check_row_stats<WgPing128c1>(129, 700, 64, 15.f);
}

}  // namespace
}  // namespace detfuse::engine_test
