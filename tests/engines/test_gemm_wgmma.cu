// launch_gemm_wgmma (Hopper wgmma + TMA, bf16 in, fp32 accumulation): the
// operand layouts the FLCE products use, on the configs the variants register,
// over odd shapes (ragged M/N/K tiles, a single row, odd output leading
// dimensions that force element-wise stores, tiles_m and tiles_n odd under
// 2x1 and 2x2 clusters, so a cluster tile overhangs the matrix),
// split-K with ragged and empty splits (atomic and partials), owning
// accumulation, softcap logits and the fused per-tile row statistics, against
// a float64 GEMM of the same bf16-rounded inputs. Calls the launchers the
// variant files instantiate (wgmma_configs.h); skips on a device that is not
// compute capability 9.0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

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
using flce::WgPing128c22;
using flce::WgCoop256c22;
using flce::WgPing128c2t;
using flce::WgPing128c22t;
using flce::WgCoop256c2t;
using flce::WgCoop256x128c12;
using flce::WgCoop256x128c12t;

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
  // Several row tiles: tiles_m 4 (BM 128), tiles_n 5 (BN 128: in 2x2
  // clusters the CTAs of the last cluster tile's second column are past N).
  check_store({3 * 128 + 5, 520, 300, 0, 0}, AM, BM, wgmma_rules(), wgmma_launcher<Cfg, AM, BM>());
  // tiles_m 3 and tiles_n 3 (BN 128) or 2 (BN 256): in 2x1 and 2x2 clusters
  // the last cluster tile overhangs M (and N), one CTA of a 2x2 cluster past both.
  check_store({2 * 128 + 5, 2 * 128 + 7, 300, 0, 0}, AM, BM, wgmma_rules(), wgmma_launcher<Cfg, AM, BM>());
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
DETFUSE_WGMMA_CONFIG_TESTS(WgPing128c22)
DETFUSE_WGMMA_CONFIG_TESTS(WgCoop256c22)
// The EPI_TMA configurations (5-stage ring; only the logits layout is
// instantiated): the fp32 store keeps the direct stores.
DETFUSE_WGMMA_LAYOUT_TEST(WgPing128c2t, K, K)
DETFUSE_WGMMA_LAYOUT_TEST(WgPing128c22t, K, K)
// The cooperative EPI_TMA configurations (4 stages, two store passes); the
// fp32 store runs their fallbacks, WgCoop256c2 and WgCoop256x128c12 (the
// latter's only layout test: 1x2 clusters, 256-row tiles).
DETFUSE_WGMMA_LAYOUT_TEST(WgCoop256c2t, K, K)
DETFUSE_WGMMA_LAYOUT_TEST(WgCoop256x128c12t, K, K)

// The grouped raster over 2x2 cluster tiles: 641 rows (6 row tiles, 3 cluster
// rows), 771 columns (7 column tiles, 4 cluster columns, the last overhanging
// N); raster groups of 4 row tiles (2 cluster rows, the last group partial), 1
// and all, in every layout.
template <Major AM, Major BM>
void check_cluster_raster() {
  for (int group_m : {4, 1, 1 << 30}) {
    SCOPED_TRACE("group_m " + std::to_string(group_m));
    check_store({641, 771, 200, 0, 0}, AM, BM, wgmma_rules(), wgmma_launcher<WgPing128c22, AM, BM>(group_m));
  }
}
TEST(GemmWgmma, Cluster2x2Raster) {
  DETFUSE_REQUIRE_SM90();
  check_cluster_raster<Major::K, Major::K>();
  check_cluster_raster<Major::K, Major::MN>();
  check_cluster_raster<Major::MN, Major::MN>();
}

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
  // 2x2 clusters: the CTAs of a cluster take one split together, empty and
  // ragged splits included, over cluster tiles that overhang M and N.
  check_split_partial(Major::MN, Major::MN, 261, 70, 200, 3, 128, r, wgmma_launcher<WgPing128c22, Major::MN, Major::MN>());
  check_split_atomic(Major::MN, Major::MN, 520, 300, 1000, 5, 256, r, wgmma_launcher<WgPing128c22, Major::MN, Major::MN>());
  check_split_partial(Major::K, Major::MN, 61, 131, 200, 4, 64, r, wgmma_launcher<WgPing128c22, Major::K, Major::MN>());
}

TEST(GemmWgmma, AccumulateFirstThenAdd) {
  DETFUSE_REQUIRE_SM90();
  check_accumulate(Major::MN, Major::MN, 300, 97, 77, wgmma_rules(), wgmma_launcher<WgCoop256c2, Major::MN, Major::MN>(1));
  check_accumulate(Major::MN, Major::MN, 131, 520, 200, wgmma_rules(), wgmma_launcher<WgCoop256c1, Major::MN, Major::MN>(1));
  check_accumulate(Major::MN, Major::MN, 700, 520, 300, wgmma_rules(), wgmma_launcher<WgPing128c2, Major::MN, Major::MN>(1));
  check_accumulate(Major::MN, Major::MN, 700, 520, 300, wgmma_rules(), wgmma_launcher<WgPing128c22, Major::MN, Major::MN>(1));
}

TEST(GemmWgmma, LogitsSoftcap) {
  DETFUSE_REQUIRE_SM90();
  check_logits(Major::K, Major::K, 37, 131, 77, 5.f, wgmma_rules(), wgmma_launcher<WgCoop256c2, Major::K, Major::K>(1 << 30));
  check_logits(Major::K, Major::K, 300, 1031, 136, 0.f, wgmma_rules(), wgmma_launcher<WgCoop128c2, Major::K, Major::K>(1 << 30));
  check_logits(Major::K, Major::K, 300, 1031, 136, 7.f, wgmma_rules(), wgmma_launcher<WgPing128c1, Major::K, Major::K>(1 << 30));
  check_logits(Major::K, Major::K, 300, 1031, 136, 7.f, wgmma_rules(), wgmma_launcher<WgPing128c22, Major::K, Major::K>(1 << 30));
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
  // S has one row of guard entries past the last row: a tile past N (a 2x2
  // cluster tile overhanging the matrix) must write no statistics.
  DeviceBuffer<float> C(size_t(M) * ldc), S(size_t(M + 1) * tiles * 4);
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
  size_t guard_written = 0;
  for (size_t i = size_t(M) * tiles * 4; i < st.size(); ++i) guard_written += !std::isnan(st[i]);
  EXPECT_EQ(guard_written, 0u) << "statistics written past the last row";
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
  check_row_stats<WgPing128c22>(300, 1031, 136, 0.f);  // 9 column tiles: the last cluster tile overhangs N
  check_row_stats<WgPing128c22>(129, 700, 64, 15.f);   // 2 row tiles, 6 column tiles: exact cluster tiles
}

// A 2x2 cluster changes where a tile's operands come from (multicast), not
// what a consumer computes: the same tile, k-tiles and wgmma sequence as the
// 2x1 configuration of the same tile, so the same bits, for the plain store in
// every layout (with a split-K partial) and for the ex16 logits epilogue
// (bf16 exp(z - m_tile), per-tile statistics with the target logit) on a shape
// whose cluster tiles overhang M and N. The output buffers are poisoned and
// have a guard row, so a write past the matrix shows too.
template <class C1, class C2, Major AM, Major BM>
void check_same_bits_store(int M, int N, int K, int splits, int kps) {
  SCOPED_TRACE(std::string("store A=") + major_name(AM) + " B=" + major_name(BM) + " splits=" + std::to_string(splits));
  const OperandRules r = wgmma_rules();
  std::mt19937 rng(uint32_t(M * 7 + N * 11 + K + splits));
  HostOperand A = make_operand(M, K, AM, 0, 0, rng, 1.f, true, r.ld_multiple, r.fill);
  HostOperand B = make_operand(N, K, BM, 0, 0, rng, 1.f, true, r.ld_multiple, r.fill);
  DeviceOperand dA = upload_operand(A, true), dB = upload_operand(B, true);
  const int64_t ldc = N + 1, stride = int64_t(M + 1) * ldc;
  auto run = [&](auto launch) {
    DeviceBuffer<float> C(size_t(stride) * splits);
    C.fill_bytes(0xFF);
    if (splits == 1)
      launch(params_for(M, N, K, A, dA, B, dB), flce::EpiStore<float>{C.data(), ldc});
    else
      launch(params_for(M, N, K, A, dA, B, dB, splits, kps), flce::EpiPartial{C.data(), ldc, stride});
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    return C.download();
  };
  const std::vector<float> c2 = run(wgmma_launcher<C1, AM, BM>(4));
  const std::vector<float> c22 = run(wgmma_launcher<C2, AM, BM>(4));
  ASSERT_EQ(c2.size(), c22.size());
  size_t differ = 0;
  for (size_t i = 0; i < c2.size(); ++i) differ += std::memcmp(&c2[i], &c22[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "of " << c2.size() << " elements (poisoned padding and guard row included)";
}

TEST(GemmWgmma, Cluster2x2SameBitsAs2x1) {
  DETFUSE_REQUIRE_SM90();
  // Ping-pong 128x128: 4 x 6 tiles (the last cluster column past N), 3 x 5
  // (past M and N), 5 splits (the fifth empty).
  check_same_bits_store<WgPing128c2, WgPing128c22, Major::K, Major::K>(389, 643, 300, 1, 0);
  check_same_bits_store<WgPing128c2, WgPing128c22, Major::K, Major::MN>(261, 520, 200, 1, 0);
  check_same_bits_store<WgPing128c2, WgPing128c22, Major::MN, Major::MN>(261, 263, 1000, 5, 256);
  // Cooperative 128x256: 389 x 643 is 4 x 3 tiles, 261 x 520 3 x 3.
  check_same_bits_store<WgCoop256c2, WgCoop256c22, Major::K, Major::K>(389, 643, 300, 1, 0);
  check_same_bits_store<WgCoop256c2, WgCoop256c22, Major::K, Major::MN>(261, 520, 200, 1, 0);
  check_same_bits_store<WgCoop256c2, WgCoop256c22, Major::MN, Major::MN>(261, 263, 1000, 5, 256);
}

TEST(GemmWgmma, Cluster2x2Exp16SameBitsAs2x1) {
  DETFUSE_REQUIRE_SM90();
  const int M = 261, N = 1031, K = 136;  // 3 row tiles, 9 column tiles: one CTA of the last cluster past both
  const OperandRules r = wgmma_rules();
  std::mt19937 rng(5u);
  HostOperand A = make_operand(M, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  HostOperand B = make_operand(N, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  DeviceOperand dA = upload_operand(A, true), dB = upload_operand(B, true);
  std::vector<int64_t> y(M);
  for (int m = 0; m < M; ++m) y[m] = m % 3 == 0 ? -100 : int64_t(rng() % uint32_t(N));  // some ignored rows
  DeviceBuffer<int64_t> dy{size_t(M)};
  dy.upload(y);
  const int64_t ldc = (N + 7) / 8 * 8, tiles = (N + 127) / 128;
  for (float cap : {0.f, 15.f}) {
    SCOPED_TRACE("softcap " + std::to_string(cap));
    auto run = [&](auto launch) {
      DeviceBuffer<__nv_bfloat16> E(size_t(M + 1) * ldc);
      DeviceBuffer<float> S(size_t(M + 1) * tiles * 4);
      E.fill_bytes(0xFF);
      S.fill_bytes(0xFF);
      launch(params_for(M, N, K, A, dA, B, dB), flce::EpiLogitsExp16{E.data(), ldc, cap, S.data(), tiles, dy.data()});
      DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
      return std::make_pair(E.download(), S.download());
    };
    const auto [e2, s2] = run(wgmma_launcher<WgPing128c2, Major::K, Major::K>(1 << 30));
    const auto [e22, s22] = run(wgmma_launcher<WgPing128c22, Major::K, Major::K>(1 << 30));
    EXPECT_EQ(std::memcmp(e2.data(), e22.data(), e2.size() * sizeof(e2[0])), 0) << "bf16 exp(z - m_tile)";
    EXPECT_EQ(std::memcmp(s2.data(), s22.data(), s2.size() * sizeof(s2[0])), 0) << "per-tile statistics";
    // Not only equal: written where they should be (max finite in every row
    // and tile in range), nothing in the guard row.
    size_t unwritten = 0, guard = 0;
    for (int m = 0; m < M; ++m)
      for (int t = 0; t < tiles; ++t) unwritten += !std::isfinite(s22[(size_t(m) * tiles + t) * 4]);
    for (size_t i = size_t(M) * tiles * 4; i < s22.size(); ++i) guard += !std::isnan(s22[i]);
    EXPECT_EQ(unwritten, 0u) << "row statistics not written";
    EXPECT_EQ(guard, 0u) << "statistics written past the last row";
  }
}

// The TMA epilogue (EPI_TMA, ot1): the same math as the register epilogue of
// the same tile, only the store path differs (the ring's depth changes no
// wgmma), so the same bits: the ex16 chunk (bf16 exp(z - m_tile)) and the
// per-tile statistics, and the plain bf16 store. The launch's C sits in a
// buffer with G guard rows before and after and columns [N, ldc) past N, all
// poisoned (0xFFFF, a bf16 NaN): the tensor map must clip the tiles that
// overhang M and N, so none of it may change, and every element of the
// M x N matrix must be written (N % 8 != 0 included: the tensor map has the
// exact extent N). ldc % 8 == 0 takes the TMA path; an odd ldc cannot be a TMA
// tensor, and the launcher runs the register-epilogue configuration instead
// (WgTmaFallback: the same bits by construction).
template <class Ref, class Tma>
void check_tma_epilogue_bits(int M, int N, int K, int64_t ldc, bool ex16, float cap, int group_m) {
  SCOPED_TRACE(std::string(ex16 ? "ex16" : "store_bf16") + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
               " K=" + std::to_string(K) + " ldc=" + std::to_string(ldc) + " cap=" + std::to_string(cap) +
               " group_m=" + std::to_string(group_m));
  const OperandRules r = wgmma_rules();
  std::mt19937 rng(uint32_t(M * 3 + N * 5 + K));
  HostOperand A = make_operand(M, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  HostOperand B = make_operand(N, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  DeviceOperand dA = upload_operand(A, true), dB = upload_operand(B, true);
  std::vector<int64_t> y(M);
  for (int m = 0; m < M; ++m) y[m] = m % 5 == 0 ? -100 : int64_t(rng() % uint32_t(N));  // some ignored rows
  DeviceBuffer<int64_t> dy{size_t(M)};
  dy.upload(y);
  constexpr int G = 3;  // guard rows on either side
  const int64_t tiles = (N + Ref::BN - 1) / Ref::BN;
  auto run = [&](auto launch) {
    DeviceBuffer<__nv_bfloat16> E(size_t(M + 2 * G) * ldc);
    DeviceBuffer<float> S(size_t(M + 1) * tiles * 4);
    E.fill_bytes(0xFF);
    S.fill_bytes(0xFF);
    __nv_bfloat16* C = E.data() + G * ldc;
    if (ex16)
      launch(params_for(M, N, K, A, dA, B, dB), flce::EpiLogitsExp16{C, ldc, cap, S.data(), tiles, dy.data()});
    else
      launch(params_for(M, N, K, A, dA, B, dB), flce::EpiStore<__nv_bfloat16>{C, ldc});
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    return std::make_pair(E.download(), S.download());
  };
  const auto [e_ref, s_ref] = run(wgmma_launcher<Ref, Major::K, Major::K>(group_m));
  const auto [e_tma, s_tma] = run(wgmma_launcher<Tma, Major::K, Major::K>(group_m));
  ASSERT_EQ(e_ref.size(), e_tma.size());
  size_t differ = 0, first = e_ref.size();
  for (size_t i = 0; i < e_ref.size(); ++i)
    if (std::memcmp(&e_ref[i], &e_tma[i], 2) != 0) {
      ++differ;
      first = std::min(first, i);
    }
  EXPECT_EQ(differ, 0u) << "bf16 elements differ from the register epilogue's, the first at row "
                        << (first < e_ref.size() ? int64_t(first) / ldc - G : -1) << " column "
                        << (first < e_ref.size() ? int64_t(first) % ldc : -1);
  if (ex16) EXPECT_EQ(std::memcmp(s_ref.data(), s_tma.data(), s_ref.size() * sizeof(float)), 0) << "per-tile statistics";
  // Not only equal: the guard untouched, the matrix written.
  size_t guard = 0, unwritten = 0;
  for (int64_t row = -G; row < M + G; ++row)
    for (int64_t col = 0; col < ldc; ++col) {
      uint16_t bits;
      std::memcpy(&bits, &e_tma[size_t((row + G) * ldc + col)], 2);
      const bool inside = row >= 0 && row < M && col < N;
      if (inside)
        unwritten += bits == 0xFFFF;
      else
        guard += bits != 0xFFFF;
    }
  EXPECT_EQ(guard, 0u) << "elements written past the launch's rows or past N";
  EXPECT_EQ(unwritten, 0u) << "elements of the matrix not written";
}

template <class Ref, class Tma>
void tma_epilogue_cases() {
  for (bool ex16 : {true, false}) {
    // 3 row tiles (the 2x1 cluster tile past M), 9 column tiles (the last
    // ragged, a 2x2 cluster's CTA past N), 17 guard columns; softcap.
    check_tma_epilogue_bits<Ref, Tma>(261, 1031, 136, 1048, ex16, 15.f, 1 << 30);
    // Many tiles per warpgroup (16 x 125 tiles, one k-tile each): each
    // warpgroup reuses its shared tile after waiting for its last TMA store.
    check_tma_epilogue_bits<Ref, Tma>(2000, 16000, 64, 16008, ex16, 0.f, 1 << 30);
    check_tma_epilogue_bits<Ref, Tma>(2000, 16000, 64, 16008, ex16, 0.f, 4);
    // Exact tiles, ldc = N: no column past N.
    check_tma_epilogue_bits<Ref, Tma>(1024, 8192, 256, 8192, ex16, 0.f, 1 << 30);
    // One row.
    check_tma_epilogue_bits<Ref, Tma>(1, 300, 72, 304, ex16, 0.f, 1 << 30);
    // An odd ldc: not a TMA tensor, the register-epilogue configuration.
    check_tma_epilogue_bits<Ref, Tma>(261, 1031, 136, 1033, ex16, 0.f, 1 << 30);
    // The last column tile's first 64-column box whole, its second ragged
    // (1000 = 7 x 128 + 64 + 40), ldc = N, softcap on: the ragged path's masks.
    check_tma_epilogue_bits<Ref, Tma>(130, 1000, 64, 1000, ex16, 30.f, 1 << 30);
    // Full tiles only, softcap on: the path without masks, with the tanh pass.
    check_tma_epilogue_bits<Ref, Tma>(256, 1024, 128, 1024, ex16, 30.f, 1 << 30);
  }
}

TEST(GemmWgmma, TmaEpilogueSameBitsAsRegisters) {
  DETFUSE_REQUIRE_SM90();
  tma_epilogue_cases<WgPing128c2, WgPing128c2t>();
}

// For compute-sanitizer (memcheck, racecheck): a ragged case (N) and one
// where each CTA stores several tiles (ping 128x128: 8 x 50 tiles, 200
// cluster units, every CTA of the H200's 66 clusters takes 3 or more), both
// epilogues.
template <class Ref, class Tma>
void sanitizer_cases(int ragged_n, int64_t ragged_ldc) {
  for (bool ex16 : {true, false}) {
    check_tma_epilogue_bits<Ref, Tma>(261, ragged_n, 136, ragged_ldc, ex16, 0.f, 1 << 30);
    check_tma_epilogue_bits<Ref, Tma>(1024, 6400, 64, 6408, ex16, 0.f, 1 << 30);
  }
}
TEST(GemmWgmma, TmaEpilogueSanitizerSized) {
  DETFUSE_REQUIRE_SM90();
  sanitizer_cases<WgPing128c2, WgPing128c2t>(1031, 1048);
}

// ex16 in forward mode (no chunk: C null, the statistics alone): an ot1
// launch has nothing to store by TMA, so the launcher runs the fallback
// configuration; the statistics must equal the register epilogue's, rows and
// tiles all written, nothing past the last row.
TEST(GemmWgmma, TmaEpilogueForwardStatisticsOnly) {
  DETFUSE_REQUIRE_SM90();
  const int M = 261, N = 1031, K = 136;
  const OperandRules r = wgmma_rules();
  std::mt19937 rng(7u);
  HostOperand A = make_operand(M, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  HostOperand B = make_operand(N, K, Major::K, 0, 0, rng, 2.f, true, 8, r.fill);
  DeviceOperand dA = upload_operand(A, true), dB = upload_operand(B, true);
  std::vector<int64_t> y(M);
  for (int m = 0; m < M; ++m) y[m] = m % 5 == 0 ? -100 : int64_t(rng() % uint32_t(N));
  DeviceBuffer<int64_t> dy{size_t(M)};
  dy.upload(y);
  const int64_t tiles = (N + WgPing128c2::BN - 1) / WgPing128c2::BN;
  auto run = [&](auto launch) {
    DeviceBuffer<float> S(size_t(M + 1) * tiles * 4);
    S.fill_bytes(0xFF);
    launch(params_for(M, N, K, A, dA, B, dB), flce::EpiLogitsExp16{nullptr, N, 0.f, S.data(), tiles, dy.data()});
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    return S.download();
  };
  const auto s_ref = run(wgmma_launcher<WgPing128c2, Major::K, Major::K>(1 << 30));
  const auto s_tma = run(wgmma_launcher<WgPing128c2t, Major::K, Major::K>(1 << 30));
  ASSERT_EQ(s_ref.size(), s_tma.size());
  EXPECT_EQ(std::memcmp(s_ref.data(), s_tma.data(), s_ref.size() * sizeof(float)), 0) << "per-tile statistics";
  size_t unwritten = 0, past = 0;
  for (size_t i = 0; i < size_t(M) * tiles; ++i) unwritten += !std::isfinite(s_tma[i * 4]);
  for (size_t i = size_t(M) * tiles * 4; i < s_tma.size(); ++i) past += !std::isnan(s_tma[i]);
  EXPECT_EQ(unwritten, 0u) << "row statistics not written";
  EXPECT_EQ(past, 0u) << "statistics written past the last row";
}

TEST(GemmWgmma, TmaEpilogueSameBitsAsRegisters2x2) {
  DETFUSE_REQUIRE_SM90();
  tma_epilogue_cases<WgPing128c22, WgPing128c22t>();
}

// The cooperative tiles with the TMA store, against the register epilogue of
// the same tile (the statistics are per BN-column tile): 128x256 in 2x1
// clusters (two 128-column passes; N = 16000 leaves the last tile's second
// pass wholly past N) and 256x128 in 1x2 clusters (two 64-column passes; 2000
// rows: the last row tile ragged, 1000 columns: its second pass ragged).
TEST(GemmWgmma, TmaEpilogueSameBitsAsRegistersCoop256) {
  DETFUSE_REQUIRE_SM90();
  tma_epilogue_cases<WgCoop256c2, WgCoop256c2t>();
}
TEST(GemmWgmma, TmaEpilogueSameBitsAsRegistersCoop256x128) {
  DETFUSE_REQUIRE_SM90();
  tma_epilogue_cases<WgCoop256x128c12, WgCoop256x128c12t>();
}

// For compute-sanitizer: the cooperative tiles, the ragged case on the TMA
// path (N = 1000, N % 8 == 0: the last column tile's second pass ragged) and
// one with several tiles per CTA.
TEST(GemmWgmma, TmaEpilogueSanitizerSizedCoop) {
  DETFUSE_REQUIRE_SM90();
  sanitizer_cases<WgCoop256c2, WgCoop256c2t>(1000, 1008);
  sanitizer_cases<WgCoop256x128c12, WgCoop256x128c12t>(1000, 1008);
}

}  // namespace
}  // namespace detfuse::engine_test
