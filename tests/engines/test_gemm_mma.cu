// launch_gemm_bf16 (tensor cores, bf16 in, fp32 accumulation): every config x
// every operand layout, split-K, owning accumulation and logits with softcap,
// against a float64 GEMM of the SAME bf16-rounded inputs (relative norm error
// < 1e-2, the bf16 bound of the engine tests; the printed errors are typically
// ~1e-7).
//
// The engine's documented requirements shape the inputs: lda and ldb multiples
// of 8 elements, 16-byte aligned bases, and zeros between K and the next
// multiple of 8 in a K-contiguous operand (padding is filled with zeros here,
// not NaN as in the fp32 tests).
#include <gtest/gtest.h>

#include "kernels/flce/gemm_mma.cuh"
#include "tests/engines/gemm_check.h"
#include "tests/gpu_test.h"

namespace detfuse::engine_test {
namespace {

using flce::GemmParams;
// The configs the FLCE bf16 variants use (kernels/flce/flce_bf16_*.cu).
using Tc128x128 = flce::TcConfig<128, 128, 32, 2, 4, 4>;
using Tc128x256 = flce::TcConfig<128, 256, 32, 2, 4, 3>;
using Tc64x128 = flce::TcConfig<64, 128, 32, 2, 2, 4>;

OperandRules bf16_rules() {
  OperandRules r;
  r.bf16 = true;
  r.ld_multiple = 8;
  r.fill = 0.f;
  r.off_unit = 8;
  r.tol = 1e-2;
  return r;
}

template <class Cfg, Major AM, Major BM>
auto bf16_launcher() {
  return [](const GemmParams& p, const auto& epi) { flce::launch_gemm_bf16<Cfg, AM, BM>(p, epi, nullptr); };
}

template <class Cfg, Major AM, Major BM>
void run_layout_cases() {
  for (const Shape& s : odd_shapes()) check_store(s, AM, BM, bf16_rules(), bf16_launcher<Cfg, AM, BM>());
}

#define DETFUSE_BF16_LAYOUT_TEST(CFG, AM, BM)             \
  TEST(GemmBf16, CFG##_A##AM##_B##BM) {                   \
    DETFUSE_REQUIRE_GPU();                                \
    run_layout_cases<CFG, Major::AM, Major::BM>();        \
  }

DETFUSE_BF16_LAYOUT_TEST(Tc128x128, K, K)
DETFUSE_BF16_LAYOUT_TEST(Tc128x128, K, MN)
DETFUSE_BF16_LAYOUT_TEST(Tc128x128, MN, MN)
DETFUSE_BF16_LAYOUT_TEST(Tc128x128, MN, K)
DETFUSE_BF16_LAYOUT_TEST(Tc128x256, K, K)
DETFUSE_BF16_LAYOUT_TEST(Tc128x256, K, MN)
DETFUSE_BF16_LAYOUT_TEST(Tc128x256, MN, MN)
DETFUSE_BF16_LAYOUT_TEST(Tc128x256, MN, K)
DETFUSE_BF16_LAYOUT_TEST(Tc64x128, K, K)
DETFUSE_BF16_LAYOUT_TEST(Tc64x128, K, MN)
DETFUSE_BF16_LAYOUT_TEST(Tc64x128, MN, MN)
DETFUSE_BF16_LAYOUT_TEST(Tc64x128, MN, K)

// Split sizes are multiples of BK (32). 77 = 64 + 13; with kps 64 the second
// split is ragged; with 3 splits of 32 the third is ragged; with 3 of 64 the
// third is empty and must write zeros.
TEST(GemmBf16, SplitK) {
  DETFUSE_REQUIRE_GPU();
  const OperandRules r = bf16_rules();
  check_split_atomic(Major::MN, Major::MN, 133, 70, 77, 3, 32, r, bf16_launcher<Tc128x128, Major::MN, Major::MN>());
  check_split_atomic(Major::K, Major::K, 61, 131, 77, 3, 32, r, bf16_launcher<Tc128x128, Major::K, Major::K>());
  check_split_partial(Major::MN, Major::MN, 133, 70, 77, 3, 64, r, bf16_launcher<Tc128x128, Major::MN, Major::MN>());
  check_split_partial(Major::K, Major::K, 61, 131, 77, 3, 64, r, bf16_launcher<Tc128x128, Major::K, Major::K>());
}

TEST(GemmBf16, AccumulateFirstThenAdd) {
  DETFUSE_REQUIRE_GPU();
  check_accumulate(Major::MN, Major::MN, 131, 97, 77, bf16_rules(), bf16_launcher<Tc64x128, Major::MN, Major::MN>());
}

TEST(GemmBf16, LogitsSoftcap) {
  DETFUSE_REQUIRE_GPU();
  check_logits(Major::K, Major::K, 37, 131, 77, 5.f, bf16_rules(), bf16_launcher<Tc128x128, Major::K, Major::K>());
}

}  // namespace
}  // namespace detfuse::engine_test
