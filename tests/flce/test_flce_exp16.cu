// CPU tests of the `ex16` wgmma variants' plan and registration (the chunk
// kept as bf16 exp(z - m_tile), kernels/flce/README.md): twice the rows of
// the fp32-logits chunk at a budget, statistics in every mode (the row pass
// needs each tile's max also when it is given the LSE), the workspace within
// issue 17's 1.2 GiB at the Llama heads. GPU tests: the registry-walking
// suites (test_flce_gpu, test_flce_owning_gpu) run every ex16 variant.
#include <gtest/gtest.h>

#include "kernels/flce/driver.cuh"
#include "kernels/flce/flce.h"
#include "kernels/registry.h"

#if defined(DETFUSE_HAVE_WGMMA)
#include "kernels/flce/engine_wgmma.cuh"
#include "kernels/flce/wgmma_configs.h"
#endif

namespace detfuse::flce {
namespace {

FlceProblem shape(int64_t N, int64_t D, int64_t V) {
  FlceProblem p;
  p.N = N;
  p.D = D;
  p.V = V;
  p.dtype = DType::bf16;
  return p;
}

TEST(FlceExp16, PlanHoldsTwiceTheRowsAndStatisticsInEveryMode) {
  const StrategyParams sp{Strategy::owning, 1024, 1, 0};
  const FlceProblem llama = shape(16384, 4096, 128256);
  const Plan f32 = make_plan(llama, FlceMode::forward_backward, sp, 128, 256, true);
  const Plan e16 = make_plan(llama, FlceMode::forward_backward, sp, 128, 256, true, true, 2, true);
  EXPECT_EQ(f32.chunk_rows, 2048);
  EXPECT_EQ(e16.chunk_rows, 4096);
  EXPECT_EQ(e16.stats_cols, (128256 + 255) / 256);
  // Backward mode: the fp32-logits wgmma variants need no statistics (the LSE
  // is given); ex16 needs each tile's max to scale its e.
  EXPECT_EQ(make_plan(llama, FlceMode::backward, sp, 128, 256, true).stats_cols, 0);
  EXPECT_EQ(make_plan(llama, FlceMode::backward, sp, 128, 256, true, true, 2, true).stats_cols, e16.stats_cols);
}

#if defined(DETFUSE_HAVE_WGMMA)
static_assert(engine_logits_exp16<WgmmaExpEngine>::value && !engine_logits_exp16<WgmmaEngine>::value,
              "only the ex16 engine keeps exp(z - m_tile)");
static_assert(engine_owning_acc_in<WgmmaExpEngine>::value, "ex16 keeps the budget-invariant owning dW");

TEST(FlceExp16, DriverPlanAndWorkspaceWithinTheIssueBound) {
  // Issue 17: at most 1.2 GiB of extra memory at the Llama heads (inputs and
  // outputs excluded; with fp32 gradients the dW accumulator is dW itself).
  for (const FlceProblem& p : {shape(16384, 4096, 128256), shape(4096, 4096, 128256), shape(8192, 2304, 256000)}) {
    const StrategyParams sp{Strategy::owning, 1024, 1, 0};
    const size_t c2 = FlceDriver<WgmmaExpEngine, WgCoop256c2>::workspace_bytes(p, FlceMode::forward_backward, sp);
    const size_t p2 = FlceDriver<WgmmaExpEngine, WgPing128c2>::workspace_bytes(p, FlceMode::forward_backward, sp);
    EXPECT_LE(c2, size_t(1.2 * 1024 * 1024 * 1024)) << p.shape();
    EXPECT_LE(p2, size_t(1.2 * 1024 * 1024 * 1024)) << p.shape();
    const Plan pl = FlceDriver<WgmmaExpEngine, WgCoop256c2>::plan(p, FlceMode::forward_backward, sp);
    const Plan old = FlceDriver<WgmmaEngine, WgCoop256c2>::plan(p, FlceMode::forward_backward, sp);
    EXPECT_EQ(pl.chunk_rows, std::min<int64_t>(p.N, 2 * old.chunk_rows)) << p.shape();
    EXPECT_EQ(pl.dx_splits, old.dx_splits) << "the dX split follows the shape, not the chunk";
  }
}

TEST(FlceExp16, RegisteredOwningAtEveryBudgetOfTwoTiles) {
  int n = 0;
  for (const auto& v : builtin_registry().flce()) {
    if (v.desc.name.find("_ex16_") == std::string::npos) continue;
    ++n;
    EXPECT_EQ(v.desc.engine, "wgmma") << v.desc.name;
    EXPECT_EQ(v.desc.strategy, "owning") << v.desc.name;
    EXPECT_TRUE(v.desc.deterministic) << v.desc.name;
    EXPECT_FALSE(v.desc.study_only) << v.desc.name;  // tuned by default
  }
  EXPECT_EQ(n, 6);  // coop 128x256 c2 and ping-pong 128x128 c2, at 512 / 1024 / 1920 MiB
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmma.owning.bm128_bn256_bk64_c2_st4_pp0_ex16_mb1024"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmma.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb512"), nullptr);
}
#endif

}  // namespace
}  // namespace detfuse::flce
