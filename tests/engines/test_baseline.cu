// kernels/baseline: lt_matmul in all four layout combinations, fp32 (which
// must be exact fp32: a TF32 path would miss the 1e-5 bound by two orders)
// and bf16 inputs, fp32 and bf16 outputs, alpha/beta, the algorithm cache and
// run-to-run bits; time_three_gemms returns positive medians.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/baseline/lt_matmul.h"
#include "kernels/baseline/three_gemms.h"
#include "kernels/common/buffer.h"
#include "kernels/common/host_bf16.h"
#include "tests/engines/engine_test_util.h"
#include "tests/gpu_test.h"

namespace detfuse::engine_test {
namespace {

using baseline::LtContext;
using baseline::lt_matmul;

struct LtCase {
  DType in, out;
  Major am, bm;
};

std::string case_name(const LtCase& c) {
  return std::string("in=") + to_string(c.in) + " out=" + to_string(c.out) + " A=" + major_name(c.am) +
         " B=" + major_name(c.bm);
}

// Runs C = alpha A B^T + beta C0 and returns C as floats (row-major, ldc).
std::vector<float> run_lt(LtContext& ctx, const LtCase& c, int M, int N, int K, const HostOperand& A,
                          const HostOperand& B, int64_t ldc, float alpha, float beta, const std::vector<float>& C0) {
  const bool bf = c.in == DType::bf16;
  DeviceBuffer<float> fA, fB;
  DeviceBuffer<uint16_t> hA, hB;
  const void *pA, *pB;
  if (bf) {
    hA.upload(to_bf16_bits(A.data));
    hB.upload(to_bf16_bits(B.data));
    pA = hA.data() + A.off;
    pB = hB.data() + B.off;
  } else {
    fA.upload(A.data);
    fB.upload(B.data);
    pA = fA.data() + A.off;
    pB = fB.data() + B.off;
  }
  if (c.out == DType::bf16) {
    DeviceBuffer<uint16_t> C;
    C.upload(to_bf16_bits(C0));
    lt_matmul(ctx, c.in, c.am, c.bm, M, N, K, pA, A.ld, pB, B.ld, C.data(), c.out, ldc, alpha, beta);
    return from_bf16_bits(C.download());
  }
  DeviceBuffer<float> C;
  C.upload(C0);
  lt_matmul(ctx, c.in, c.am, c.bm, M, N, K, pA, A.ld, pB, B.ld, C.data(), c.out, ldc, alpha, beta);
  return C.download();
}

void check_lt_case(LtContext& ctx, const LtCase& c, int M, int N, int K) {
  SCOPED_TRACE(case_name(c) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
  const bool bf = c.in == DType::bf16;
  std::mt19937 rng(uint32_t(M + N * 3 + K * 7 + int(c.am) * 11 + int(c.bm) * 13 + int(c.in) * 17));
  // fp32: odd leading dimensions and NaN padding (never read); bf16: ld a
  // multiple of 8, zero padding.
  const int lm = bf ? 8 : 1;
  const float fill = bf ? 0.f : std::numeric_limits<float>::quiet_NaN();
  HostOperand A = make_operand(M, K, c.am, 3, 0, rng, 1.f, bf, lm, fill);
  HostOperand B = make_operand(N, K, c.bm, 3, 0, rng, 1.f, bf, lm, fill);
  const int64_t ldc = bf ? (N + 7) / 8 * 8 + 8 : N + 1;
  std::vector<double> ref = ref_gemm(A, B, M, N, 0, K);
  const double tol = (bf || c.out == DType::bf16) ? 1e-2 : 1e-5;

  // beta = 0 (C poisoned with NaN: beta == 0 must not read C).
  std::vector<float> C0(size_t(M) * ldc, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> out = run_lt(ctx, c, M, N, K, A, B, ldc, 1.f, 0.f, C0);
  EXPECT_EQ(count_nonfinite(out, ldc, M, N), 0);
  const double err = rel_norm_error(out, ldc, ref, M, N);
  std::printf("[lt] %s: rel err %.3g\n", case_name(c).c_str(), err);
  EXPECT_LT(err, tol);

  // Same call again: same algorithm (cached), same bits.
  const size_t plans = ctx.cached_plans();
  std::vector<float> again = run_lt(ctx, c, M, N, K, A, B, ldc, 1.f, 0.f, C0);
  EXPECT_EQ(ctx.cached_plans(), plans);
  EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * sizeof(float)), 0) << "bits changed between runs";

  // alpha = 0.5, beta = 1 onto a random C0.
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : C0) v = bf || c.out == DType::bf16 ? round_to_bf16(u(rng)) : u(rng);
  out = run_lt(ctx, c, M, N, K, A, B, ldc, 0.5f, 1.f, C0);
  std::vector<double> ref2(ref.size());
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) ref2[size_t(m) * N + n] = 0.5 * ref[size_t(m) * N + n] + C0[size_t(m) * ldc + n];
  EXPECT_LT(rel_norm_error(out, ldc, ref2, M, N), tol);
}

TEST(LtMatmul, AllLayoutsAndDtypes) {
  DETFUSE_REQUIRE_GPU();
  LtContext ctx;
  for (DType in : {DType::f32, DType::bf16})
    for (DType out : {DType::f32, DType::bf16}) {
      if (in == DType::f32 && out == DType::bf16) continue;
      for (Major am : {Major::K, Major::MN})
        for (Major bm : {Major::K, Major::MN}) {
          check_lt_case(ctx, {in, out, am, bm}, 37, 131, 77);
          check_lt_case(ctx, {in, out, am, bm}, 1, 64, 256);
        }
    }
}

// cuBLASLt is opened on first use (lt_matmul.cpp, dlopen): mapped once a
// context exists, and its GEMMs above are right through the loaded entry
// points (test_common's BuiltinRegistryDoesNotLoadCublasLt: not before).
TEST(LtMatmul, CublasLtIsOpenedByTheFirstContext) {
  DETFUSE_REQUIRE_GPU();
  LtContext ctx;
  std::ifstream maps("/proc/self/maps");
  ASSERT_TRUE(maps.good());
  std::stringstream all;
  all << maps.rdbuf();
  EXPECT_NE(all.str().find("libcublasLt.so"), std::string::npos);
  EXPECT_NE(ctx.handle(), nullptr);
}

TEST(LtMatmul, RejectsBadArguments) {
  DETFUSE_REQUIRE_GPU();
  LtContext ctx;
  DeviceBuffer<float> A(64), B(64), C(64);
  EXPECT_THROW(lt_matmul(ctx, DType::f32, baseline::Major::K, baseline::Major::K, 4, 4, 8, A.data(), 7, B.data(), 8, C.data(), DType::f32,
                         4),
               Error);  // lda < K
  EXPECT_THROW(lt_matmul(ctx, DType::f32, baseline::Major::K, baseline::Major::K, 4, 4, 8, A.data(), 8, B.data(), 8, C.data(), DType::f32,
                         3),
               Error);  // ldc < N
  EXPECT_THROW(lt_matmul(ctx, DType::f32, baseline::Major::K, baseline::Major::K, 4, 4, 8, A.data(), 8, B.data(), 8, C.data(),
                         DType::bf16, 4),
               Error);  // fp32 in, bf16 out
  // K == 0: C = 0.
  C.fill_bytes(0xFF);
  lt_matmul(ctx, DType::f32, baseline::Major::K, baseline::Major::K, 4, 4, 0, nullptr, 1, nullptr, 1, C.data(), DType::f32, 8);
  const auto c = C.download();
  for (int m = 0; m < 4; ++m)
    for (int n = 0; n < 8; ++n) {
      if (n < 4)
        EXPECT_EQ(c[m * 8 + n], 0.f);
      else
        EXPECT_TRUE(std::isnan(c[m * 8 + n]));
    }
}

TEST(ThreeGemms, PositiveMedians) {
  DETFUSE_REQUIRE_GPU();
  for (DType t : {DType::bf16, DType::f32}) {
    FlceProblem p;
    p.N = 256;
    p.D = 136;
    p.V = 1000;
    p.dtype = t;
    const baseline::ThreeGemmTiming tm = baseline::time_three_gemms(p, 1, 5);
    std::printf("[three_gemms] %s %s: logits %.4f ms, dX %.4f ms, dW %.4f ms, total %.4f ms %s\n", to_string(t),
                p.shape().c_str(), tm.logits_ms, tm.dx_ms, tm.dw_ms, tm.total_ms(), tm.note.c_str());
    EXPECT_GT(tm.logits_ms, 0.0);
    EXPECT_GT(tm.dx_ms, 0.0);
    EXPECT_GT(tm.dw_ms, 0.0);
    EXPECT_GT(tm.total_ms(), 0.0);
    EXPECT_EQ(tm.total_samples_ms.size(), 5u);
    EXPECT_EQ(tm.logits_dtype, DType::f32);
    EXPECT_TRUE(tm.note.empty());
  }
}

}  // namespace
}  // namespace detfuse::engine_test
