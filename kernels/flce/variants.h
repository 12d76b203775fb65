// The registered FLCE variant set: which tile configurations exist (one
// instantiation file each) and the strategy parameters registered for each.
// Measured alternatives go in the comments next to the chosen values once the
// tuner has data for them (kernels/flce/README.md, experiments/flce_bench_log.md).
#pragma once

#include <vector>

#include "kernels/registry.h"

namespace detfuse::flce {

// Chunk buffer budgets (MiB) registered for the owning strategy: a larger chunk
// means fewer read-modify-write sweeps over dW, at the price of memory.
inline const std::vector<int> kOwningChunkMiB = {512, 1024, 1920};
// The cuBLASLt engine's owning budgets: 2000 MiB instead of 1920 holds exactly
// 2048 rows of a 256k vocabulary (4 chunks instead of 5 at the Gemma-2 head, so
// one dW read-modify-write fewer) and stays under 2 GiB in all, since that
// engine needs no row statistics and no dX partials. The wgmma variants cannot:
// their statistics and dX partials would take a 2000 MiB chunk past 2 GiB.
//   Gemma-2 head, run 4: cublaslt owning mb1920 56.97 ms (1.33x cuBLAS).
inline const std::vector<int> kLtOwningChunkMiB = {512, 1024, 2000};
// The hybrid engine's owning budgets (`wgmmalt`: ex16 logits on wgmma, dX and
// dW on cuBLASLt). The chunk is bf16, 2 bytes a logit: 1024 MiB holds 4096 rows
// of a 128256 vocabulary, so the Llama head (16384 rows) runs as four equal
// chunks (within issue 17's 1.2 GiB with the row statistics: about 1.04 GiB),
// and 2048 rows of a 256k one (Gemma-2 head: four chunks); 1920 MiB holds
// 7808 / 3840 rows (three chunks at either head, about 1.95 GiB).
inline const std::vector<int> kHybridChunkMiB = {1024, 1920};
// Chunk budget, row splits and partial slab rows of the atomic and partials variants.
constexpr int kChunkMiB = 1024;
constexpr int kSplits = 4;
constexpr int kSlabRows = 8192;

void register_flce_mma_bm128_bn128(Registry& r);
void register_flce_mma_bm128_bn256(Registry& r);
void register_flce_mma_bm64_bn128(Registry& r);
#if defined(DETFUSE_HAVE_WGMMA)
void register_flce_wgmma_coop256c2(Registry& r);
void register_flce_wgmma_coop256c1(Registry& r);
void register_flce_wgmma_coop128c2(Registry& r);
void register_flce_wgmma_ping128c2(Registry& r);
void register_flce_wgmma_ping128c1(Registry& r);
void register_flce_wgmmalt_ping128c2(Registry& r);
void register_flce_wgmmalt_coop256c2(Registry& r);
void register_flce_wgmmalt_ping128c22(Registry& r);
void register_flce_wgmmalt_coop256c22(Registry& r);
void register_flce_wgmmalt_ping128c2t(Registry& r);
void register_flce_wgmmalt_ping128c22t(Registry& r);
void register_flce_wgmmalt_coop256c2t(Registry& r);
void register_flce_wgmmalt_coop256x128c12t(Registry& r);
#endif
void register_flce_cublaslt(Registry& r);
void register_flce_fma_bm128_bn128(Registry& r);
void register_flce_fma_bm128_bn64(Registry& r);
void register_flce_fma_bm64_bn64(Registry& r);

}  // namespace detfuse::flce
