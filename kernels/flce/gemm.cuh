// The GEMM interface shared by the FLCE engines (CUDA only).
//
// C[m, n] = sum_k A(m, k) * B(n, k) for m < M, n < N, k in the block's K range,
// with fp32 accumulation. Each operand is stored either K-contiguous
// (Major::K: A(m,k) = A[m*lda + k]) or M/N-contiguous (Major::MN:
// A(m,k) = A[k*lda + m]). The three FLCE products use:
//   logits  Z  = X W^T : A = X  [Nc, D] Major::K,  B = W [V, D] Major::K
//   dX      G W       : A = G  [Nc, V] Major::K,  B = W [V, D] Major::MN
//   dW      G^T X     : A = G  [Nc, V] Major::MN, B = X [Nc, D] Major::MN
// Engines: gemm_fma.cuh (`fma`: exact fp32 FMA, no TF32), gemm_mma.cuh
// (`mma`: mma.sync m16n8k16, bf16 in, fp32 acc) and gemm_wgmma.cuh (`wgmma`:
// sm_90a TMA + wgmma). Each takes GemmParams and an epilogue functor called
// once per in-range element with its split index; engine_*.cuh adapt them (and
// cuBLASLt, engine_cublaslt.h) to the FLCE driver (driver.cuh).
//
// Split-K: gridDim.z = splits; split s covers k in [s*k_per_split,
// min(K, (s+1)*k_per_split)); k_per_split is a multiple of the engine's BK.
// Loads outside [0,M) x [0,K) / [0,N) x [0,K) read as zero.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/major.h"

namespace detfuse::flce {

using detfuse::Major;  // kernels/common/major.h

struct GemmParams {
  int M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  int splits = 1;
  int k_per_split = 0;  // 0 means K (no split)
};

// ----------------------------------------------------------------- epilogues
// Logits: C = softcap > 0 ? softcap * tanh(v / softcap) : v (fp32).
struct EpiStoreLogits {
  float* C;
  int64_t ldc;
  float softcap;
  __device__ __forceinline__ void operator()(int m, int n, float v, int) const {
    if (softcap > 0.f) v = softcap * tanhf(v / softcap);
    C[int64_t(m) * ldc + n] = v;
  }
};

// Logits in bf16 (engines with logits_bf16, the `lg16` variants): the fp32
// accumulator rounded once to bf16 (after softcap when the engine fuses it;
// the cuBLASLt engine applies softcap by a separate pass over the bf16 chunk).
struct EpiStoreLogits16 {
  __nv_bfloat16* C;
  int64_t ldc;
  float softcap;
  __device__ __forceinline__ void operator()(int m, int n, float v, int) const {
    if (softcap > 0.f) v = softcap * tanhf(v / softcap);
    C[int64_t(m) * ldc + n] = __float2bfloat16_rn(v);
  }
};

// Logits with per-tile row statistics (engines with fused_row_stats only):
// besides storing C as EpiStoreLogits does, the block that owns column tile t
// of row m writes stats[m * ld_stats + t] = {max_j z, sum_j exp(z - max),
// sum_j z, 0} over its in-range columns j, so the row pass combines ld_stats
// entries in a fixed order instead of reading the whole row of logits again.
struct EpiLogitsStats {
  float* C;
  int64_t ldc;
  float softcap;
  float* stats;  // [rows, ld_stats] float4 (16-byte aligned)
  int64_t ld_stats;
};

// Logits as bf16 exp(z - m_tile) with per-tile row statistics (engines with
// logits_exp16: wgmma). Per row m and column tile t of the logits GEMM, with z
// the (softcapped) fp32 logits and m_tile their max over the tile's in-range
// columns: E[m * ldc + n] = bf16(exp(z - m_tile)) (skipped when E is null:
// forward only), and stats[m * ld_stats + t] = {m_tile, sum exp(z - m_tile),
// sum z, z_y} where z_y is the fp32 logit of the row's target y[m] when it
// lies in the tile, else 0. Every e lies in (0, 1]: its bf16 rounding is
// 2^-9 relative whatever the size of the logits (kernels/flce/README.md).
struct EpiLogitsExp16 {
  __nv_bfloat16* E;
  int64_t ldc;
  float softcap;
  float* stats;         // [rows, ld_stats] float4 (16-byte aligned)
  int64_t ld_stats;
  const int64_t* y;     // the chunk's targets [rows]
};

// Plain store, converting to the output type (dX).
template <class T>
struct EpiStore {
  T* C;
  int64_t ldc;
  __device__ __forceinline__ void operator()(int m, int n, float v, int) const {
    if constexpr (sizeof(T) == 2)
      C[int64_t(m) * ldc + n] = __float2bfloat16_rn(v);
    else
      C[int64_t(m) * ldc + n] = v;
  }
};

// Owning accumulation into an fp32 gradient: the block that owns (m, n) adds
// its sum over this chunk's rows; chunks run in a fixed order, so bits are
// reproducible. first != 0 overwrites (first chunk), avoiding a memset.
struct EpiAccumulate {
  float* C;
  int64_t ldc;
  int first;
  __device__ __forceinline__ void operator()(int m, int n, float v, int) const {
    float* p = C + int64_t(m) * ldc + n;
    *p = first ? v : *p + v;
  }
};

// Owning accumulation with the running sum carried in the accumulator
// registers (engines with owning_acc_in, driver.cuh): before its k-loop the
// block loads C (first == 0) or zeros (first chunk) into its accumulators,
// the chunk's products are added onto them by the tensor-core instructions
// themselves, and the epilogue stores the result. The fp32 chain over the
// rows of dW is then one chain whatever the chunk boundaries are, provided
// every boundary falls on a multiple of the engine's k-tile (driver.cuh,
// make_plan): the chunk budget no longer changes a bit of dW.
struct EpiAccumulateIn {
  float* C;
  int64_t ldc;
  int first;
  __device__ __forceinline__ float initial(int m, int n) const { return first ? 0.f : __ldcs(C + int64_t(m) * ldc + n); }
  __device__ __forceinline__ void operator()(int m, int n, float v, int) const { __stcs(C + int64_t(m) * ldc + n, v); }
};

// Contention baseline: every split adds with an fp32 atomic (order varies).
struct EpiAtomic {
  float* C;
  int64_t ldc;
  __device__ __forceinline__ void operator()(int m, int n, float v, int) const {
    atomicAdd(C + int64_t(m) * ldc + n, v);
  }
};

// Partials: split s writes its sum to its own slice of the workspace; a later
// fixed-order pass adds the slices.
struct EpiPartial {
  float* P;
  int64_t ldc;
  int64_t split_stride;
  __device__ __forceinline__ void operator()(int m, int n, float v, int split) const {
    P[split * split_stride + int64_t(m) * ldc + n] = v;
  }
};

// Engine entry points (defined in gemm_mma.cuh / gemm_fma.cuh, instantiated
// in the per-variant .cu files). They throw detfuse::Error on launch failure.
template <class Cfg, Major AM, Major BM, class Epi>
void launch_gemm_bf16(const GemmParams& p, const Epi& epi, cudaStream_t stream);

template <class Cfg, Major AM, Major BM, class Epi>
void launch_gemm_f32(const GemmParams& p, const Epi& epi, cudaStream_t stream);

}  // namespace detfuse::flce
