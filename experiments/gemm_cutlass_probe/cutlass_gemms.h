// The CUTLASS 4.2 complete GEMMs of gemm_cutlass_probe (experiments/README.md):
// the interface the probe's main file sees, free of CUTLASS headers (the
// instantiations live in cutlass_*.cu, sm_90a only, one file per schedule so
// they compile in parallel).
//
// Every GEMM is D[M, N] (bf16, row-major, ld N) = A B^T with A [M, K] bf16
// row-major (K-major, ld K) and B either [N, K] K-major (ld K: the logits
// product X W^T) or [K, N] MN-major (ld N: the dX product G W), fp32
// accumulation, alpha 1, beta 0, no C operand read.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

namespace detfuse::probe {

// The persistent tile scheduler's raster (PersistentTileSchedulerSm90's
// RasterOrderOptions) and swizzle (max_swizzle_size: 1, 2, 4 or 8).
enum class Raster { heuristic, along_m, along_n };

struct CutlassArgs {
  int M = 0, N = 0, K = 0;
  const void* A = nullptr;
  const void* B = nullptr;
  void* D = nullptr;
  bool b_k_major = true;
  Raster raster = Raster::heuristic;
  int swizzle = 1;
  cudaStream_t stream = nullptr;
};

// A prepared GEMM (arguments checked, workspace allocated, parameters built
// once): calling it launches the kernel; it throws on a launch failure.
using CutlassLaunch = std::function<void()>;

// Prepares one configuration for `a`, or returns an empty launch and sets
// *why when CUTLASS refuses it (can_implement, initialize).
using CutlassMaker = CutlassLaunch (*)(const CutlassArgs& a, std::string* why);

struct CutlassConfig {
  std::string name;       // e.g. "pingpong 128x128x64 c2x1"
  CutlassMaker k_major;   // B [N, K] K-major
  CutlassMaker mn_major;  // B [K, N] MN-major
};

// One per instantiation file.
void add_cutlass_pingpong(std::vector<CutlassConfig>& out);
void add_cutlass_coop_128x256(std::vector<CutlassConfig>& out);
void add_cutlass_coop_256x128(std::vector<CutlassConfig>& out);
void add_cutlass_coop_128x192(std::vector<CutlassConfig>& out);

}  // namespace detfuse::probe
