// CPU tests of the FLCE driver's workspace plan (host code of driver.cuh):
// chunk sizing by the memory budget, the shape-fixed dX split, and a layout
// whose regions are aligned and disjoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_cublaslt.h"
#include "reference/emulate_detail.h"
#include "tests/flce_shape.h"

namespace detfuse::flce {
namespace {

TEST(FlcePlan, ChunkRowsFollowTheBudget) {
  FlceProblem p = flce_shape(16384, 4096, 128256);
  Plan pl = make_plan(p, FlceMode::forward_backward, {Strategy::owning, 1920, 1, 0}, 128, 128);
  EXPECT_EQ(pl.Vp, 128256);
  // The budget's max rows: the largest multiple of BM that fits (3840 here) ...
  const int64_t max_rows = plan_max_chunk_rows(p.N, pl.Vp, 1920, 128, 4);
  EXPECT_EQ(max_rows % 128, 0);
  EXPECT_LE(max_rows * pl.Vp * 4, int64_t(1920) << 20);
  EXPECT_GT((max_rows + 128) * pl.Vp * 4, int64_t(1920) << 20);
  // ... and the chunks even: ceil(16384 / 3840) = 5 chunks of 3328 rows (the
  // last 3072), not four of 3840 and a 1024-row tail.
  EXPECT_EQ(max_rows, 3840);
  EXPECT_EQ(pl.chunk_rows, 3328);
  // Never fewer than one block of rows, never more than N.
  Plan tiny = make_plan(p, FlceMode::forward_backward, {Strategy::owning, 1, 1, 0}, 128, 128);
  EXPECT_EQ(tiny.chunk_rows, 128);
  Plan few = make_plan(flce_shape(5, 64, 1000), FlceMode::forward_backward, {Strategy::owning, 512, 1, 0}, 128, 128);
  EXPECT_EQ(few.chunk_rows, 5);
  EXPECT_EQ(few.Vp, 1000);
  EXPECT_EQ(make_plan(flce_shape(5, 64, 1009), FlceMode::forward, {}, 128, 128).Vp, 1016);  // padded to 8
}

// Even chunks (plan_chunk_rows): the fewest chunks the budget allows, of
// equal rows rounded up to BM, so no short tail chunk; the budget holds.
TEST(FlcePlan, ChunksAreEvenAndAsFewAsTheBudgetAllows) {
  int checked = 0;
  for (int64_t N : {1, 5, 127, 128, 129, 1000, 4095, 4096, 4097, 8192, 16384, 20000, 32768, 40000})
    for (int64_t V : {1009, 32000, 128256, 256000})
      for (int64_t mb : {1, 16, 512, 1024, 1920, 2000})
        for (int64_t bm : {64, 128})
          for (int64_t bytes : {2, 4}) {
            const int64_t Vp = (V + 7) / 8 * 8;
            const int64_t max_rows = plan_max_chunk_rows(N, Vp, mb, bm, bytes);
            const int64_t rows = plan_chunk_rows(N, Vp, mb, bm, bytes);
            SCOPED_TRACE("N " + std::to_string(N) + " V " + std::to_string(V) + " mb" + std::to_string(mb) + " bm" +
                         std::to_string(bm) + " x" + std::to_string(bytes));
            ASSERT_GT(rows, 0);
            EXPECT_LE(rows, max_rows);  // within the budget (or one block of rows, the minimum)
            const int64_t chunks = (N + rows - 1) / rows;
            EXPECT_EQ(chunks, (N + max_rows - 1) / max_rows);  // as few chunks as before: as many dW sweeps
            if (chunks > 1) {
              EXPECT_EQ(rows % bm, 0);  // boundaries on the BM grid (the owning chains need it)
              const int64_t last = N - (chunks - 1) * rows;
              EXPECT_GT(last, 0);
              EXPECT_LE(rows - last, chunks * bm);  // no tail: the last chunk within chunks x BM rows of the others
            } else {
              EXPECT_EQ(rows, N);
            }
            ++checked;
          }
  EXPECT_GT(checked, 1000);
  // The cases that motivated it: cuBLASLt mb2000 (fp32 chunk) at the Llama
  // head, 4 x 3968 + 512 rows before, 5 x 3328 (the last 3072) now; at
  // 4096 rows, 3968 + 128 before, 2 x 2048 now.
  EXPECT_EQ(plan_chunk_rows(16384, 128256, 2000, 128, 4), 3328);
  EXPECT_EQ(plan_chunk_rows(4096, 128256, 2000, 128, 4), 2048);
  EXPECT_EQ(plan_max_chunk_rows(16384, 128256, 2000, 128, 4), 3968);
}

// The CPU emulation (reference/emulate_flce.cpp) replays the plan's chunking
// and dX split: it must agree with make_plan for the fp32 tile shapes.
TEST(FlcePlan, EmulationChunkingAgreesWithThePlan) {
  const std::vector<std::string> names = {"flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb512",
                                          "flce.fp32.fma.owning.bm128_bn64_bk8_tm8_tn4_mb1920",
                                          "flce.fp32.fma.partials.bm64_bn64_bk8_tm4_tn8_mb1024_sk4_vs8192",
                                          "flce.fp32.fma.owning.bm64_bn64_bk8_tm4_tn8_mb1"};
  for (const auto& name : names) {
    const auto n = reference::emu::emulated(name);
    ASSERT_TRUE(n.has_value()) << name;
    for (auto [N, D, V] : std::vector<std::array<int64_t, 3>>{
             {1, 64, 1009}, {301, 203, 4099}, {4700, 21, 60013}, {16384, 4096, 128256}, {130, 37, 2053}, {8191, 7, 3}}) {
      const FlceProblem p = flce_shape(N, D, V);
      const int bm = int(n->params.at("bm")), bn = int(n->params.at("bn"));
      const StrategyParams sp{n->strategy, int(n->params.at("mb")), 1, 0};
      const Plan pl = make_plan(p, FlceMode::forward_backward, sp, bm, bn, false, true, 4);
      const auto ch = reference::emu::flce_chunking(p, *n);
      EXPECT_EQ(ch.chunk_rows, pl.chunk_rows) << name << " " << p.shape();
      EXPECT_EQ(ch.dx_splits, pl.dx_splits) << name << " " << p.shape();
    }
  }
}

TEST(FlcePlan, RowSplitLevelsKeepThePartialsWorkspace) {
  // The contention study's levels: partials at sk x vs = 4 x 8192 rows in all.
  const FlceProblem p = flce_shape(8192, 4096, 32768);
  const size_t budget = size_t(4 * 8192) * 4096 * 4;
  for (int sk : {1, 2, 4, 16, 64}) {
    const Plan pl = make_plan(p, FlceMode::forward_backward, {Strategy::partials, 1024, sk, 32768 / sk}, 128, 128);
    EXPECT_EQ(pl.dw_splits, sk);
    EXPECT_EQ(pl.slab_rows, std::min<int64_t>(32768 / sk, p.V));
    EXPECT_LE(size_t(pl.dw_splits) * size_t(pl.slab_rows) * 4096 * 4, budget) << sk;
  }
  // sk0: one split per bm row block of the chunk (8192 rows at mb1024 and
  // V=32768: 64 blocks of 128), slab rows from the same budget.
  Plan pl = make_plan(p, FlceMode::forward_backward, {Strategy::partials, 1024, 0, 0, 32768}, 128, 128);
  EXPECT_EQ(pl.chunk_rows, 8192);
  EXPECT_EQ(pl.dw_splits, 64);
  EXPECT_EQ(pl.slab_rows, 512);
  EXPECT_GE(pl.total, pl.partials + budget);  // the partials region holds 64 x 512 rows of D
  // Smaller chunks, fewer row blocks, wider slabs (a multiple of 8).
  pl = make_plan(flce_shape(600, 256, 4000), FlceMode::forward_backward, {Strategy::partials, 1024, 0, 0, 32768}, 64,
                 64);
  EXPECT_EQ(pl.dw_splits, 10);  // ceil(600 / 64)
  EXPECT_EQ(pl.slab_rows, 3272);  // 32768 / 10 = 3276, down to a multiple of 8
  EXPECT_EQ(dw_splits({Strategy::atomic, 1024, 0, 0}, 600, 64), 10);
  EXPECT_EQ(dw_splits({Strategy::atomic, 1024, 16, 0}, 600, 64), 16);
  // Owning has no row splits.
  EXPECT_EQ(make_plan(p, FlceMode::forward_backward, {Strategy::owning, 1024, 0, 0}, 128, 128).dw_splits, 1);
}

TEST(FlcePlan, DxSplitDependsOnTheShapeOnly) {
  // Llama head at mb1920: 31 x 32 = 992 dX tiles per chunk -> 1 split.
  Plan llama =
      make_plan(flce_shape(16384, 4096, 128256), FlceMode::forward_backward, {Strategy::owning, 1920, 1, 0}, 128, 128);
  EXPECT_EQ(llama.dx_splits, 1);
  // Gemma-2 head at mb1920: 15 x 18 = 270 tiles -> 3 ordered splits.
  Plan gemma =
      make_plan(flce_shape(8192, 2304, 256000), FlceMode::forward_backward, {Strategy::owning, 1920, 1, 0}, 128, 128);
  EXPECT_EQ(gemma.dx_splits, 3);
  // Small problems: at most 8 splits and at least 256 of K per split.
  Plan small = make_plan(flce_shape(10, 64, 700), FlceMode::forward_backward, {Strategy::owning, 512, 1, 0}, 128, 128);
  EXPECT_EQ(small.dx_splits, 3);
  Plan one = make_plan(flce_shape(1, 64, 100), FlceMode::forward_backward, {Strategy::owning, 512, 1, 0}, 128, 128);
  EXPECT_EQ(one.dx_splits, 1);
  // Forward needs no dX at all.
  EXPECT_EQ(
      make_plan(flce_shape(8192, 2304, 256000), FlceMode::forward, {Strategy::owning, 1920, 1, 0}, 128, 128).dx_splits,
      1);
}

TEST(FlcePlan, RegionsAreAlignedAndDisjoint) {
  FlceProblem p = flce_shape(3000, 200, 4099);
  p.grad_dtype = DType::bf16;
  Plan pl = make_plan(p, FlceMode::forward_backward, {Strategy::partials, 512, 4, 1024}, 64, 128);
  struct Region {
    size_t at, bytes;
  };
  std::vector<Region> r = {{pl.counts, 24},
                           {pl.loss_rows, size_t(p.N) * 4},
                           {pl.logits, size_t(pl.chunk_rows * pl.Vp) * 4},
                           {pl.dw_acc, size_t(p.V * p.D) * 4},
                           {pl.partials, size_t(4) * 1024 * size_t(p.D) * 4},
                           {pl.dx_partials, size_t(pl.dx_splits) * size_t(pl.chunk_rows * p.D) * 4}};
  std::sort(r.begin(), r.end(), [](const Region& a, const Region& b) { return a.at < b.at; });
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].at % 256, 0u);
    EXPECT_LE(r[i].at + r[i].bytes, i + 1 < r.size() ? r[i + 1].at : pl.total);
  }
  EXPECT_TRUE(pl.need_dw_acc && pl.need_partials && pl.need_loss_rows);
}

// engine_dw_bf16_direct (cuBLASLt and wgmmalt): with bf16 gradients a call of
// ONE chunk stores its owning dW as bf16 straight into the caller's buffer, so
// the V x D fp32 accumulator leaves the workspace; with more chunks, another
// strategy, fp32 gradients or accumulate_dW the plan is unchanged.
TEST(FlcePlan, OneChunkBf16DwNeedsNoAccumulator) {
  static_assert(engine_dw_bf16_direct<CublasLtEngine>::value, "cuBLASLt stores bf16 dW directly");
  const StrategyParams own{Strategy::owning, 1024, 1, 0};
  auto plan_of = [](const FlceProblem& p, const StrategyParams& sp, bool direct) {
    return make_plan(p, FlceMode::forward_backward, sp, 128, 128, false, false, 2, false, direct);
  };
  FlceProblem one = flce_shape(4096, 4096, 128256);  // 4096 rows: one chunk at 1024 MiB of bf16 logits
  one.grad_dtype = DType::bf16;
  FlceProblem fp32 = one;
  fp32.grad_dtype = DType::f32;
  const Plan direct = plan_of(one, own, true);
  EXPECT_EQ(direct.chunk_rows, one.N);
  EXPECT_TRUE(direct.dw_direct);
  EXPECT_FALSE(direct.need_dw_acc);
  EXPECT_EQ(direct.total, plan_of(fp32, own, true).total);  // the workspace of fp32 gradients
  const Plan acc = plan_of(one, own, false);                 // an engine without it
  EXPECT_TRUE(acc.need_dw_acc);
  EXPECT_FALSE(acc.dw_direct);
  EXPECT_EQ(acc.total, direct.total + size_t(one.V) * size_t(one.D) * 4);
  FlceProblem two = one;  // 8192 rows: two chunks
  two.N = 8192;
  EXPECT_TRUE(plan_of(two, own, true).need_dw_acc);
  EXPECT_FALSE(plan_of(two, own, true).dw_direct);
  EXPECT_TRUE(plan_of(one, {Strategy::partials, 1024, 4, 1024}, true).need_dw_acc);
  FlceProblem summed = one;  // accumulate_dW: dW goes into the caller's fp32 buffer
  summed.accumulate_dW = true;
  EXPECT_FALSE(plan_of(summed, own, true).need_dw_acc);
  EXPECT_FALSE(plan_of(summed, own, true).dw_direct);
  EXPECT_FALSE(plan_of(fp32, own, true).dw_direct);
}

TEST(FlcePlan, RowStatisticsRegionAndEnginesWithoutDxSplit) {
  FlceProblem p = flce_shape(8192, 2304, 256000);
  const StrategyParams sp{Strategy::owning, 1920, 1, 0};
  Plan plain = make_plan(p, FlceMode::forward_backward, sp, 128, 256);
  Plan stats = make_plan(p, FlceMode::forward_backward, sp, 128, 256, /*row_stats=*/true);
  EXPECT_EQ(plain.stats_cols, 0);
  EXPECT_EQ(stats.stats_cols, 1000);  // 256000 / 256 column tiles
  // One {max, sum exp, sum z, pad} float4 per row and column tile, aligned, before dW's regions.
  EXPECT_EQ(stats.stats % 256, 0u);
  EXPECT_GE(stats.dw_acc, stats.stats + size_t(stats.chunk_rows) * 1000 * 16);
  EXPECT_EQ(stats.total - plain.total, size_t(round_up(stats.chunk_rows * 1000 * 16, 256)));
  // The backward mode reads the saved LSE: no statistics.
  EXPECT_EQ(make_plan(p, FlceMode::backward, sp, 128, 256, true).stats_cols, 0);
  // An engine that tiles dX itself (cuBLASLt) never splits it.
  EXPECT_GT(plain.dx_splits, 1);
  EXPECT_EQ(make_plan(p, FlceMode::forward_backward, sp, 128, 256, false, /*split_dx=*/false).dx_splits, 1);
  // 2000 MiB holds exactly 2048 rows of a 256000 vocabulary (the cuBLASLt engine's largest budget).
  EXPECT_EQ(make_plan(p, FlceMode::forward_backward, {Strategy::owning, 2000, 1, 0}, 128, 128, false, false).chunk_rows,
            2048);
}

TEST(FlcePlan, Bf16LogitsHoldTwiceTheRows) {
  // The lg16 variants: 2 bytes a logit, so the same budget holds twice the rows.
  static_assert(engine_logits_bf16<CublasLtLg16Engine>::value && !engine_logits_bf16<CublasLtEngine>::value,
                "only the lg16 engine keeps bf16 logits");
  const StrategyParams sp{Strategy::owning, 1024, 1, 0};
  FlceProblem llama = flce_shape(16384, 4096, 128256);
  Plan f32 = make_plan(llama, FlceMode::forward_backward, sp, 128, 128, false, false);
  Plan b16 = make_plan(llama, FlceMode::forward_backward, sp, 128, 128, false, false, /*logit_bytes=*/2);
  EXPECT_EQ(f32.chunk_rows, 2048);
  EXPECT_EQ(b16.chunk_rows, 4096);  // 4 chunks at N = 16384 instead of 8: half the dW sweeps
  EXPECT_LE(b16.chunk_rows * b16.Vp * 2, int64_t(1024) << 20);
  EXPECT_GT((b16.chunk_rows + 128) * b16.Vp * 2, int64_t(1024) << 20);
  // The chunk region is rows * Vp * 2 bytes (rounded to 256) and nothing else moves.
  EXPECT_GE(b16.stats, b16.logits + size_t(b16.chunk_rows * b16.Vp) * 2);
  EXPECT_LT(b16.stats, b16.logits + size_t(b16.chunk_rows * b16.Vp) * 2 + 256);
  EXPECT_EQ(b16.total, f32.total);  // same budget, same bytes (both fill it exactly here)
  // The Gemma-2 head at the 2000 MiB budget: 4096 rows, two chunks at N = 8192.
  EXPECT_EQ(make_plan(flce_shape(8192, 2304, 256000), FlceMode::forward_backward, {Strategy::owning, 2000, 1, 0}, 128,
                      128, false, false, 2)
                .chunk_rows,
            4096);
}

}  // namespace
}  // namespace detfuse::flce
