// The Hopper engine's registered configurations, and the launchers their
// variant files instantiate explicitly (one file per configuration, so the
// CUTLASS instantiations compile in parallel and only once: the engine tests
// and the probe link these instances instead of compiling their own).
#pragma once

#include "kernels/flce/gemm_wgmma.cuh"

namespace detfuse::flce {

// Measured alternatives (H200, owning mb1920 forward_backward, flce_probe run 4
// of experiments/flce_bench_log.md; Llama 16384,4096,128256 / Gemma-2
// 8192,2304,256000, three cuBLAS GEMMs 75.5 / 42.7 ms):
// Cooperative 128x256x64 in 2x1 clusters, 4 stages: best at Gemma.
using WgCoop256c2 = WgConfig<128, 256, 64, 2, 4>;         // 95.1 ms / 61.2 ms
// Cooperative 128x256x64 without cluster, 4 stages.
using WgCoop256c1 = WgConfig<128, 256, 64, 1, 4>;         // 100.2 / 63.7
// Cooperative 128x128x64 in 2x1 clusters, 6 stages.
using WgCoop128c2 = WgConfig<128, 128, 64, 2, 6>;         // 101.1 / 72.9
// Ping-pong 128x128x64 per warpgroup in 2x1 clusters, 6 stages: best at Llama.
using WgPing128c2 = WgConfig<128, 128, 64, 2, 6, true>;   // 93.1 / 68.4
// Ping-pong 128x128x64 per warpgroup without cluster, 6 stages: slowest
// everywhere (its dX and dW mainloops reach 350-410 TF/s); kept as the study's
// point without multicast.
using WgPing128c1 = WgConfig<128, 128, 64, 1, 6, true>;   // 117.8 / 72.7
// Ping-pong 128x128x64 per warpgroup in 2x2 clusters, 6 stages (issue 17):
// A multicast along the cluster's N pair as well as B along its M pair, 128
// flop per byte of L2 -> shared memory traffic instead of 85 (gemm_wgmma.cuh,
// kernels/flce/README.md "2x2 clusters"). Variant names carry `c22`.
using WgPing128c22 = WgConfig<128, 128, 64, 2, 6, true, 2>;
// Cooperative 128x256x64 in 2x2 clusters, 4 stages: 171 flop per byte of L2
// traffic (the c2 tile has 128), its epilogue still with the tensor cores idle.
using WgCoop256c22 = WgConfig<128, 256, 64, 2, 4, false, 2>;

// Ping-pong 128x128x64 in 2x1 clusters with the bf16 epilogues (ex16 logits,
// store_bf16) through shared memory and a TMA store (EPI_TMA, variant token
// `ot1`): 5 stages, since the two 32 KiB epilogue tiles take the sixth's room
// (5 x 32 + 2 x 32 = 224 KiB). Only the logits layout (K, K) is instantiated:
// the `wgmmalt` variants run no other product on wgmma.
using WgPing128c2t = WgConfig<128, 128, 64, 2, 5, true, 1, true>;
// The same in 2x2 clusters (the c22 multicast, variant token c22 ... ot1).
using WgPing128c22t = WgConfig<128, 128, 64, 2, 5, true, 2, true>;

// Cooperative 128x256x64 in 2x1 clusters with the TMA store (ot1): the
// 128 x 256 tile goes out as two 128-column passes through one 32 KiB shared
// tile, 4 stages (4 x 48 + 32 = 224 KiB). Session 9's H200 figures for
// CUTLASS's own kernels put this tile (690 TFLOP/s at the Llama chunk) over
// ping-pong 128x128 (our ot1: 626).
using WgCoop256c2t = WgConfig<128, 256, 64, 2, 4, false, 1, true>;
// Cooperative 256x128x64 in 1x2 clusters (A multicast along the cluster's N
// pair; each consumer warpgroup owns 128 rows) with the TMA store: two 64-column
// passes through one 32 KiB shared tile (256 x 64), 4 stages. CUTLASS's best
// at the Gemma-2 chunk (757 TFLOP/s, session 9). Its register-epilogue
// configuration (the fallback), logits layout only:
using WgCoop256x128c12t = WgConfig<256, 128, 64, 1, 4, false, 2, true>;
using WgCoop256x128c12 = WgConfig<256, 128, 64, 1, 4, false, 2>;

// What an EPI_TMA launch runs when it cannot take the TMA store (an epilogue
// other than the bf16 ones, a C that is not a TMA tensor): the same tile,
// cluster and ping-pong with the register epilogue (6 stages; the ring's
// depth changes no wgmma, so the same bits).
#define DETFUSE_WG_TMA_FALLBACK(CFG, FALLBACK) \
  template <>                                  \
  struct WgTmaFallback<CFG> {                  \
    using type = FALLBACK;                     \
  };
DETFUSE_WG_TMA_FALLBACK(WgPing128c2t, WgPing128c2)
DETFUSE_WG_TMA_FALLBACK(WgPing128c22t, WgPing128c22)
DETFUSE_WG_TMA_FALLBACK(WgCoop256c2t, WgCoop256c2)
DETFUSE_WG_TMA_FALLBACK(WgCoop256x128c12t, WgCoop256x128c12)
#undef DETFUSE_WG_TMA_FALLBACK

// The three operand layouts of the FLCE products (gemm.cuh): logits (K, K),
// dX (K, MN), dW (MN, MN).
#define DETFUSE_WGMMA_INSTANCES(PREFIX, CFG)                                                                   \
  PREFIX template void launch_gemm_wgmma<CFG, Major::K, Major::K>(const GemmParams&, const WgEpilogue&, int,   \
                                                                  cudaStream_t);                               \
  PREFIX template void launch_gemm_wgmma<CFG, Major::K, Major::MN>(const GemmParams&, const WgEpilogue&, int,  \
                                                                   cudaStream_t);                              \
  PREFIX template void launch_gemm_wgmma<CFG, Major::MN, Major::MN>(const GemmParams&, const WgEpilogue&, int, \
                                                                    cudaStream_t);

DETFUSE_WGMMA_INSTANCES(extern, WgCoop256c2)
DETFUSE_WGMMA_INSTANCES(extern, WgCoop256c1)
DETFUSE_WGMMA_INSTANCES(extern, WgCoop128c2)
DETFUSE_WGMMA_INSTANCES(extern, WgPing128c2)
DETFUSE_WGMMA_INSTANCES(extern, WgPing128c1)
DETFUSE_WGMMA_INSTANCES(extern, WgPing128c22)
DETFUSE_WGMMA_INSTANCES(extern, WgCoop256c22)

// The logits layout alone (the EPI_TMA configurations).
#define DETFUSE_WGMMA_LOGITS_INSTANCE(PREFIX, CFG) \
  PREFIX template void launch_gemm_wgmma<CFG, Major::K, Major::K>(const GemmParams&, const WgEpilogue&, int, cudaStream_t);
DETFUSE_WGMMA_LOGITS_INSTANCE(extern, WgPing128c2t)
DETFUSE_WGMMA_LOGITS_INSTANCE(extern, WgPing128c22t)
DETFUSE_WGMMA_LOGITS_INSTANCE(extern, WgCoop256c2t)
DETFUSE_WGMMA_LOGITS_INSTANCE(extern, WgCoop256x128c12t)
DETFUSE_WGMMA_LOGITS_INSTANCE(extern, WgCoop256x128c12)

}  // namespace detfuse::flce
