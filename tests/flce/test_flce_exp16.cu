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
#include "kernels/flce/engine_wgmmalt.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"
#include "tests/flce_shape.h"
#endif

namespace detfuse::flce {
namespace {

TEST(FlceExp16, PlanHoldsTwiceTheRowsAndStatisticsInEveryMode) {
  const StrategyParams sp{Strategy::owning, 1024, 1, 0};
  const FlceProblem llama = flce_shape(16384, 4096, 128256);
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
  for (const FlceProblem& p :
       {flce_shape(16384, 4096, 128256), flce_shape(4096, 4096, 128256), flce_shape(8192, 2304, 256000)}) {
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
    if (v.desc.name.find("_ex16_") == std::string::npos || v.desc.engine == "wgmmalt") continue;
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

// The hybrid engine (`wgmmalt`): ex16 logits on wgmma, dX and dW on cuBLASLt.
static_assert(engine_logits_exp16<WgmmaExpLtEngine>::value, "wgmmalt keeps the ex16 chunk");
static_assert(!engine_owning_acc_in<WgmmaExpLtEngine>::value && !WgmmaExpLtEngine::split_dx,
              "wgmmalt: dW by cuBLASLt beta = 1 per chunk, dX never split (cuBLASLt tiles it)");

TEST(FlceExp16, HybridPlanAtTheIssueShapes) {
  const StrategyParams sp{Strategy::owning, 1024, 1, 0};
  struct Want {
    FlceProblem p;
    int64_t rows;
  };
  // mb1024: the Llama head as four equal chunks of 4096 rows, the Gemma-2 head
  // as four of 2048, the small head in one; all within issue 17's 1.2 GiB.
  for (const Want& w : {Want{flce_shape(16384, 4096, 128256), 4096}, Want{flce_shape(8192, 2304, 256000), 2048},
                        Want{flce_shape(4096, 4096, 128256), 4096}, Want{flce_shape(32768, 4096, 128256), 4096}}) {
    for (const Plan& pl : {FlceDriver<WgmmaExpLtEngine, WgPing128c2>::plan(w.p, FlceMode::forward_backward, sp),
                           FlceDriver<WgmmaExpLtEngine, WgPing128c22>::plan(w.p, FlceMode::forward_backward, sp),
                           FlceDriver<WgmmaExpLtEngine, WgCoop256c22>::plan(w.p, FlceMode::forward_backward, sp),
                           FlceDriver<WgmmaExpLtEngine, WgCoop256c2>::plan(w.p, FlceMode::forward_backward, sp),
                           FlceDriver<WgmmaExpLtEngine, WgCoop256c2t>::plan(w.p, FlceMode::forward_backward, sp),
                           FlceDriver<WgmmaExpLtEngine, WgCoop256x128c12t>::plan(w.p, FlceMode::forward_backward, sp)}) {
      EXPECT_EQ(pl.chunk_rows, w.rows) << w.p.shape();
      EXPECT_EQ(w.p.N % pl.chunk_rows, 0) << w.p.shape();
      EXPECT_EQ(pl.dx_splits, 1) << w.p.shape();
      EXPECT_EQ(pl.total, pl.dx_partials) << "no dX partials region: the last one, empty";
      EXPECT_LE(pl.total, size_t(1.2 * 1024 * 1024 * 1024)) << w.p.shape();
      EXPECT_GT(pl.stats_cols, 0) << w.p.shape();
    }
  }
}

// Issue 17's "1.04 GiB extra" of the default at the Llama head with main_grad
// (dW accumulated into the caller's fp32 buffer: no accumulator of ours), region
// by region, and why no larger chunk fits the 1.2 GiB bar there: fewer than
// four chunks of 16384 rows needs 5462 rows (5632 on the 256-row grid), whose
// bf16 chunk alone is 1.35 GiB (kernels/flce/README.md, session 11).
TEST(FlceExp16, DefaultWorkspaceAtTheLlamaHeadAndNoFewerChunksWithinTheBar) {
  using D = FlceDriver<WgmmaExpLtEngine, WgCoop256x128c12t>;
  FlceProblem p = flce_shape(16384, 4096, 128256);
  p.accumulate_dW = true;
  const size_t bar = size_t(1.2 * 1024 * 1024 * 1024);
  const Plan pl = D::plan(p, FlceMode::forward_backward, StrategyParams{Strategy::owning, 1024, 1, 0});
  auto r256 = [](int64_t b) { return size_t((b + 255) / 256 * 256); };
  const int64_t tiles = (p.V + WgCoop256x128c12t::BN - 1) / WgCoop256x128c12t::BN;
  EXPECT_EQ(pl.chunk_rows, 4096);
  EXPECT_EQ(pl.stats_cols, tiles);
  EXPECT_EQ(pl.dw_acc, pl.partials) << "no dW accumulator of ours with main_grad";
  EXPECT_EQ(pl.total, r256(3 * 8) + r256(p.N * 4) + r256(pl.chunk_rows * pl.Vp * 2) + r256(pl.chunk_rows * tiles * 16))
      << "counts, loss rows, the bf16 chunk, the statistics; nothing else";
  EXPECT_LE(pl.total, bar);
  for (int mib = 1024; mib <= 2048; mib += 64) {
    const Plan q = D::plan(p, FlceMode::forward_backward, StrategyParams{Strategy::owning, mib, 1, 0});
    const int64_t chunks = (p.N + q.chunk_rows - 1) / q.chunk_rows;
    if (chunks < 4) EXPECT_GT(q.total, bar) << "mb" << mib << ": " << chunks << " chunks";
    else EXPECT_EQ(chunks, 4) << "mb" << mib;
  }
}

TEST(FlceExp16, HybridRegisteredOwningAtItsBudgets) {
  int n = 0;
  for (const auto& v : builtin_registry().flce()) {
    if (v.desc.engine != "wgmmalt") continue;
    ++n;
    EXPECT_NE(v.desc.name.find("_ex16_"), std::string::npos) << v.desc.name;
    EXPECT_EQ(v.desc.strategy, "owning") << v.desc.name;
    EXPECT_TRUE(v.desc.deterministic) << v.desc.name;
    EXPECT_FALSE(v.desc.study_only) << v.desc.name;  // tuned by default
  }
  // ping-pong 128x128 and coop 128x256, c2 and c22; ping-pong 128x128 with the
  // TMA epilogue (ot1), c2 and c22; at mb1024 alone, coop 128x256 c2 and coop
  // 256x128 c12 with the TMA epilogue
  EXPECT_EQ(n, int(6 * kHybridChunkMiB.size()) + 2);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn256_bk64_c2_st4_pp0_ex16_mb1920"), nullptr);
  // The 2x2 cluster spelled in the name (c: CM then CN when CN > 1).
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c22_st6_pp1_ex16_mb1024"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c22_st6_pp1_ex16_mb1920"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn256_bk64_c22_st4_pp0_ex16_mb1024"), nullptr);
  // The ex16 logits through shared memory and a TMA store (EPI_TMA): 5 stages, `ot1`.
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1024"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1920"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c22_st5_pp1_ot1_ex16_mb1024"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c22_st5_pp1_ot1_ex16_mb1920"), nullptr);
  // The cooperative tiles with the TMA epilogue (two passes through one 32 KiB
  // shared tile, 4 stages), at 1024 MiB only (1920 breaks the 1.2 GiB bar).
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn256_bk64_c2_st4_pp0_ot1_ex16_mb1024"), nullptr);
  EXPECT_NE(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024"), nullptr);
  EXPECT_EQ(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm128_bn256_bk64_c2_st4_pp0_ot1_ex16_mb1920"), nullptr);
  EXPECT_EQ(builtin_registry().find_flce("flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1920"), nullptr);
  // No other name carries the token.
  for (const auto& v : builtin_registry().flce())
    if (v.desc.name.find("_ot1_") != std::string::npos) EXPECT_EQ(v.desc.engine, "wgmmalt") << v.desc.name;
}
#endif

}  // namespace
}  // namespace detfuse::flce
