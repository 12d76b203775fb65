// launch_gemm_f32: every config x every operand layout on odd shapes (M = 1,
// prime N, K = 1, K = 77, ld > extent, odd ld, misaligned bases, K = 0),
// against a float64 GEMM; relative norm error < 1e-5, outputs poisoned first.
#include <gtest/gtest.h>

#include "kernels/flce/gemm_fma.cuh"
#include "tests/engines/gemm_check.h"
#include "tests/gpu_test.h"

namespace detfuse::engine_test {
namespace {

using flce::SimtConfig128x128;
using flce::SimtConfig128x64;
using flce::SimtConfig64x64;

template <class Cfg, Major AM, Major BM>
void run_layout_cases() {
  const OperandRules rules;  // fp32, NaN padding, any ld, tol 1e-5
  for (const Shape& s : odd_shapes())
    check_store(s, AM, BM, rules, [](const flce::GemmParams& p, const auto& epi) {
      flce::launch_gemm_f32<Cfg, AM, BM>(p, epi, nullptr);
    });
}

#define DETFUSE_F32_LAYOUT_TEST(CFG, AM, BM)                    \
  TEST(GemmF32, CFG##_A##AM##_B##BM) {                          \
    DETFUSE_REQUIRE_GPU();                                      \
    run_layout_cases<flce::CFG, Major::AM, Major::BM>();        \
  }

// (K, K): logits; (K, MN): dX; (MN, MN): dW; (MN, K): for completeness.
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x128, K, K)
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x128, K, MN)
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x128, MN, MN)
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x128, MN, K)
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x64, K, K)
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x64, K, MN)
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x64, MN, MN)
DETFUSE_F32_LAYOUT_TEST(SimtConfig128x64, MN, K)
DETFUSE_F32_LAYOUT_TEST(SimtConfig64x64, K, K)
DETFUSE_F32_LAYOUT_TEST(SimtConfig64x64, K, MN)
DETFUSE_F32_LAYOUT_TEST(SimtConfig64x64, MN, MN)
DETFUSE_F32_LAYOUT_TEST(SimtConfig64x64, MN, K)

}  // namespace
}  // namespace detfuse::engine_test
