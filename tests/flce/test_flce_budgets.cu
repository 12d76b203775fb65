// CPU tests of what makes the owning FLCE variants of one tile configuration
// give the same bits at every chunk budget (driver.cuh): chunk boundaries on
// the dW GEMM's k-tile grid, a dX split that does not follow the chunk, and
// the engines that carry dW's running sum in their accumulators. The GPU side
// (identical digests across budgets) is tests/flce/test_flce_owning_gpu.cu.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kernels/flce/driver.cuh"
#include "kernels/flce/engine_mma.cuh"
#include "kernels/flce/engine_cublaslt.h"
#include "kernels/flce/engine_fma.cuh"
#include "kernels/flce/engine_wgmma.cuh"
#include "kernels/flce/variants.h"
#include "kernels/flce/wgmma_configs.h"
#include "tests/flce_shape.h"

namespace detfuse::flce {
namespace {

struct Tile {
  int bm, bn, bk;
};
// The registered tile shapes: wgmma 128x256 and 128x128 (BK 64), mma.sync
// 128x128, 128x256, 64x128 (BK 32).
const std::vector<Tile> kTiles = {{128, 256, 64}, {128, 128, 64}, {128, 128, 32}, {128, 256, 32}, {64, 128, 32}};

std::vector<FlceProblem> shapes() {
  return {flce_shape(16384, 4096, 128256), flce_shape(8192, 2304, 256000), flce_shape(4096, 4096, 128256),
          flce_shape(20000, 256, 50000),   flce_shape(2600, 64, 200003),   flce_shape(3000, 128, 250007),
          flce_shape(2000, 136, 4099),     flce_shape(301, 200, 4099),     flce_shape(1, 64, 1009)};
}

std::vector<int> budgets() {
  std::vector<int> b = {1, 4, 8, 16, 64, 256};
  for (int mb : kOwningChunkMiB) b.push_back(mb);
  for (int mb : kLtOwningChunkMiB) b.push_back(mb);
  return b;
}

TEST(FlceBudgets, ChunkBoundariesFallOnTheDwKTileGrid) {
  for (const FlceProblem& p : shapes())
    for (const Tile& t : kTiles)
      for (int mb : budgets()) {
        const Plan pl = make_plan(p, FlceMode::forward_backward, {Strategy::owning, mb, 1, 0}, t.bm, t.bn, true);
        SCOPED_TRACE(p.shape() + " bm" + std::to_string(t.bm) + " mb" + std::to_string(mb));
        ASSERT_GT(pl.chunk_rows, 0);
        if (pl.chunk_rows < p.N) {
          // Every boundary (a multiple of chunk_rows) is on the 16-row grid of
          // one tensor-core instruction and on the engine's k-tile grid.
          EXPECT_EQ(pl.chunk_rows % t.bk, 0);
          EXPECT_EQ(pl.chunk_rows % 16, 0);
        } else {
          EXPECT_EQ(pl.chunk_rows, p.N);  // one chunk: no boundary at all
        }
      }
}

TEST(FlceBudgets, DxSplitIsTheSameAtEveryBudget) {
  for (const FlceProblem& p : shapes())
    for (const Tile& t : kTiles) {
      std::set<int> splits;
      for (int mb : budgets())
        splits.insert(make_plan(p, FlceMode::forward_backward, {Strategy::owning, mb, 1, 0}, t.bm, t.bn, true).dx_splits);
      EXPECT_EQ(splits.size(), 1u) << p.shape() << " bm" << t.bm << " bn" << t.bn;
    }
  // The count still follows the shape: the Gemma-2 head needs the split, the
  // Llama head with 128x128 tiles does not, a tiny problem is capped by K.
  const StrategyParams sp{Strategy::owning, 512, 1, 0};
  EXPECT_EQ(make_plan(flce_shape(8192, 2304, 256000), FlceMode::forward_backward, sp, 128, 128).dx_splits, 3);
  EXPECT_EQ(make_plan(flce_shape(8192, 2304, 256000), FlceMode::forward_backward, sp, 128, 256).dx_splits, 7);
  EXPECT_EQ(make_plan(flce_shape(16384, 4096, 128256), FlceMode::forward_backward, sp, 128, 128).dx_splits, 1);
  EXPECT_EQ(make_plan(flce_shape(16384, 4096, 128256), FlceMode::forward_backward, sp, 128, 256).dx_splits, 2);
  EXPECT_EQ(make_plan(flce_shape(10, 64, 700), FlceMode::forward_backward, sp, 128, 128).dx_splits, 3);
}

TEST(FlceBudgets, DxPartialsFitTheSplitOfEveryChunk) {
  // The partials region holds dx_splits slices of a full chunk at every budget.
  for (const FlceProblem& p : shapes())
    for (int mb : budgets()) {
      const Plan pl = make_plan(p, FlceMode::forward_backward, {Strategy::owning, mb, 1, 0}, 128, 256, true);
      if (pl.dx_splits > 1)
        EXPECT_GE(pl.total - pl.dx_partials, size_t(pl.dx_splits) * size_t(pl.chunk_rows) * size_t(p.D) * 4);
    }
}

TEST(FlceBudgets, TheTestShapesCutRowsDifferentlyAtTheRegisteredBudgets) {
  // The GPU test's premise: at its shapes the registered owning budgets give
  // chunks of different row counts, several chunks each, so a dW that
  // depended on the chunk boundaries would show different digests.
  for (const FlceProblem& p : {flce_shape(2600, 64, 200003), flce_shape(3000, 128, 250007)})
    for (int bm : {64, 128}) {
      std::set<int64_t> rows;
      for (int mb : kOwningChunkMiB) {
        const Plan pl = make_plan(p, FlceMode::forward_backward, {Strategy::owning, mb, 1, 0}, bm, 128, true);
        EXPECT_LT(pl.chunk_rows, p.N) << p.shape() << " mb" << mb;
        rows.insert(pl.chunk_rows);
      }
      EXPECT_EQ(rows.size(), kOwningChunkMiB.size()) << p.shape();
    }
}

TEST(FlceBudgets, EnginesThatCarryTheOwningSumInTheirAccumulators) {
  static_assert(engine_owning_acc_in<WgmmaEngine>::value, "wgmma: the running dW sum enters the k-loop");
  static_assert(engine_owning_acc_in<Bf16Engine>::value, "mma.sync: the running dW sum enters the k-loop");
  // The fma engine (a read-modify-write per chunk) and cuBLASLt (beta = 1)
  // keep their own ways; the cuBLASLt variants agree across budgets already.
  static_assert(!engine_owning_acc_in<F32Engine>::value && !engine_owning_acc_in<CublasLtEngine>::value,
                "only the tensor-core engines of our own");
  // And the tile configurations they register put BM on their k-tile grid
  // (the driver asserts it too, where it instantiates them).
#if defined(DETFUSE_HAVE_WGMMA)
  static_assert(WgCoop256c2::BM % WgCoop256c2::BK == 0 && WgCoop256c1::BM % WgCoop256c1::BK == 0 &&
                    WgCoop128c2::BM % WgCoop128c2::BK == 0 && WgPing128c2::BM % WgPing128c2::BK == 0 &&
                    WgPing128c1::BM % WgPing128c1::BK == 0,
                "wgmma: BM a multiple of BK");
#endif
  static_assert(TcConfig<128, 128, 32, 2, 4, 4>::BM % 32 == 0 && TcConfig<64, 128, 32, 2, 2, 4>::BM % 32 == 0,
                "mma.sync: BM a multiple of BK");
  SUCCEED();
}

}  // namespace
}  // namespace detfuse::flce
