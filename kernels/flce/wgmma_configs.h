// The Hopper engine's registered configurations, and the launchers their
// variant files instantiate explicitly (one file per configuration, so the
// CUTLASS instantiations compile in parallel and only once: the engine tests
// and the probe link these instances instead of compiling their own).
#pragma once

#include "kernels/flce/gemm_wgmma.cuh"

namespace detfuse::flce {

// Cooperative 128x256x64 in 2x1 clusters, 4 stages: the fastest on the Llama head (run 1).
using WgCoop256c2 = WgConfig<128, 256, 64, 2, 4>;
// Cooperative 128x256x64 without cluster, 4 stages.
using WgCoop256c1 = WgConfig<128, 256, 64, 1, 4>;
// Cooperative 128x128x64 in 2x1 clusters, 6 stages.
using WgCoop128c2 = WgConfig<128, 128, 64, 2, 6>;
// Ping-pong 128x128x64 per warpgroup in 2x1 clusters, 6 stages.
using WgPing128c2 = WgConfig<128, 128, 64, 2, 6, true>;
// Ping-pong 128x128x64 per warpgroup without cluster, 6 stages.
using WgPing128c1 = WgConfig<128, 128, 64, 1, 6, true>;

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

}  // namespace detfuse::flce
