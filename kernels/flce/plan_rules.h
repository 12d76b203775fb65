// The FLCE driver's two row rules, in plain C++ so that the CPU emulation
// (reference/emulate_flce.cpp) follows exactly what the driver
// (kernels/flce/driver.cuh, make_plan) does: the rows of a chunk, and how many
// ordered K splits the dX GEMM of a chunk takes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace detfuse::flce {

// The dX GEMM of a chunk has only ceil(Nc/BM) * ceil(D/BN) output tiles but a
// K of V: when that is too few tiles to fill the GPU (the Gemma-2 head: 270
// tiles of K = 256000), K is split and the partials summed in fixed order.
// The count depends on the shape only, never on the device, so the bits do not;
// and never on the chunk budget either: the tiles are counted for the rows a
// fixed reference budget of kDxRefMiB (fp32 logits) would hold, not for the
// variant's chunk, so every budget of a tile configuration gives the same dX
// bits (the split count and the K range of each split fix them). Before, the
// count followed the chunk: at the Llama head 128x256 tiles split 4 ways at
// mb1024 and 2 ways at mb1920, and the dX bits differed between the budgets.
inline constexpr int kDxTargetTiles = 1024;
inline constexpr int kDxMaxSplits = 8;
inline constexpr int kDxRefMiB = 2048;

// The most rows a chunk may hold: as many multiples of block_m as chunk_mib
// MiB of logits of logit_bytes each hold (at least block_m), at most N.
// Vp: V rounded up to 8.
inline int64_t plan_max_chunk_rows(int64_t N, int64_t Vp, int64_t chunk_mib, int64_t block_m, int64_t logit_bytes) {
  const int64_t budget_rows = (chunk_mib << 20) / (Vp * logit_bytes);
  return std::min<int64_t>(std::max<int64_t>(block_m, budget_rows / block_m * block_m), N);
}

// Rows of a chunk (every chunk but the last holds exactly this many): N cut
// into as few chunks as the budget allows, ceil(N / max rows), of equal rows
// rounded up to block_m (so at most the max rows, and every boundary still on
// a multiple of block_m). Before, chunks held the max rows and the last one the
// rest: at the Llama head (16384 rows) cuBLASLt mb2000 ran four chunks of 3968
// rows and a 512-row tail whose GEMMs fill the GPU badly; now five of 3328
// (the last 3072). The chunk count, hence the number of dW sweeps, is the same.
inline int64_t plan_chunk_rows(int64_t N, int64_t Vp, int64_t chunk_mib, int64_t block_m, int64_t logit_bytes) {
  const int64_t max_rows = plan_max_chunk_rows(N, Vp, chunk_mib, block_m, logit_bytes);
  if (max_rows >= N) return N;
  const int64_t chunks = (N + max_rows - 1) / max_rows;
  const int64_t even = (N + chunks - 1) / chunks;
  return std::min<int64_t>((even + block_m - 1) / block_m * block_m, max_rows);
}

// Ordered K splits of the dX GEMM (at least 1; at least 256 of K per split).
inline int plan_dx_splits(int64_t N, int64_t D, int64_t V, int64_t Vp, int64_t block_m, int64_t block_n) {
  // The max rows of the reference budget, not its even share: the counts (and
  // so the dX bits) stay those of before the chunks were evened out.
  const int64_t ref_rows = plan_max_chunk_rows(N, Vp, kDxRefMiB, block_m, 4);
  const int64_t tiles = ((ref_rows + block_m - 1) / block_m) * ((D + block_n - 1) / block_n);
  int64_t s = std::clamp<int64_t>(kDxTargetTiles / tiles, 1, kDxMaxSplits);
  s = std::min<int64_t>(s, (V + 255) / 256);
  return int(std::max<int64_t>(s, 1));
}

}  // namespace detfuse::flce
