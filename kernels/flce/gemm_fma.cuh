// Exact-fp32 SIMT GEMM engine for the FLCE fp32 path (the high-precision mode).
//
// C[m, n] = sum_k A(m, k) * B(n, k) with fmaf on CUDA cores: no TF32, no tensor
// cores, so every product is exact and every sum rounds once per term in fp32.
// It implements the contract of gemm.cuh (layouts, split-K over gridDim.z,
// zero-filled out-of-range loads, one epilogue call per in-range element per
// split). The classic register-blocked SGEMM: a block computes a BM x BN tile,
// each thread TM x TN outputs; BK-deep slices of A and B are staged in shared
// memory as [k][m] / [k][n] rows (a Major::K operand is transposed on its way
// into shared memory), double-buffered with one __syncthreads per slice, the
// next slice's global loads in flight in registers while the current one is
// multiplied. Global loads are float4 when the leading dimension and the base
// allow it (ld % 4 == 0, 16-byte aligned, split offsets % 4 == 0), scalar and
// bounds-checked element by element otherwise, so any M, N, K and ld work.
//
// Determinism: every output is summed by one thread as acc = fma(a_k, b_k, acc)
// (__fmaf_rn: one rounding per term, never split) for k ascending through its
// split from acc = +0, whatever BM, BN, BK, TM, TN. So the engine
// is bitwise run-to-run reproducible, and all configs give the same bits for
// the same split layout (config-invariant; a zero-padded tail adds fmaf(0, 0,
// acc), exact except that it turns an accumulated -0 into +0).
//
// Thread tile layout: a thread's TM rows are TM/4 groups of 4 consecutive rows,
// group c at row c * (BM / (TM/4)) + ty * 4 (likewise columns), so that the
// float4 fragment reads of a warp from shared memory are contiguous and free
// of bank conflicts (the "split" 8x8 layout of the well-known SGEMM kernels).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/common/cuda_check.h"
#include "kernels/common/portable_math.h"
#include "kernels/flce/gemm.cuh"

namespace detfuse::flce {

// The logits epilogue of the fp32 engine: EpiStoreLogits with the portable
// tanh and explicitly rounded steps (kernels/common/portable_math.h), so the
// CPU emulation (reference/emulate_flce.cpp) gives the same bits:
// C = softcap > 0 ? softcap * tanh(v / softcap) : v. F32Engine::gemm swaps it
// in for EpiStoreLogits.
struct EpiStoreLogitsPortable {
  float* C;
  int64_t ldc;
  float softcap;
  __device__ __forceinline__ void operator()(int m, int n, float v, int) const {
    if (softcap > 0.f) v = pm::mul(softcap, pm::tanh(pm::div(v, softcap)));
    C[int64_t(m) * ldc + n] = v;
  }
};

// ------------------------------------------------------------------ traits
// BM x BN output tile per block, BK-deep k slices, TM x TN outputs per thread.
template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct SimtConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int kThreadsM = BM / TM;  // threads along m (ty)
  static constexpr int kThreadsN = BN / TN;  // threads along n (tx)
  static constexpr int kThreads = kThreadsM * kThreadsN;
  // Registers: TM*TN accumulators dominate; keep <= 128 registers per thread
  // (65536 / (kThreads * 128) blocks per SM) so that ptxas has a fixed budget.
  static constexpr int kMinBlocks = 65536 / (kThreads * 128) > 0 ? 65536 / (kThreads * 128) : 1;
  static constexpr int kGroupsM = TM / 4;  // float4 groups of rows per thread
  static constexpr int kGroupsN = TN / 4;
  static constexpr int kGroupStrideM = BM / kGroupsM;  // rows between a thread's groups
  static constexpr int kGroupStrideN = BN / kGroupsN;
  // Shared-memory rows are padded by 4 floats: the transposed (Major::K) stores
  // of a warp then hit distinct banks for BK = 8, and rows stay 16-byte aligned.
  static constexpr int kPad = 4;
  static constexpr int kLdsA = BM + kPad;  // As: [2][BK][kLdsA]
  static constexpr int kLdsB = BN + kPad;  // Bs: [2][BK][kLdsB]
  static constexpr int kSmemFloats = 2 * BK * (kLdsA + kLdsB);
  static constexpr size_t kSmemBytes = size_t(kSmemFloats) * sizeof(float);
  // Grouped rasterisation: kGroupM row tiles sweep the n tiles together so a
  // band of B stays in L2 while several bands of A use it.
  static constexpr int kGroupM = 8;

  static_assert(BM % TM == 0 && BN % TN == 0, "tile must divide into thread tiles");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are float4 groups");
  static_assert(BK % 4 == 0, "BK must be a multiple of 4 (float4 loads along k)");
  static_assert(BM % 4 == 0 && BN % 4 == 0, "BM, BN must be multiples of 4");
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  static_assert(TM * TN <= 64, "more than 64 accumulators per thread would spill");
  static_assert(BM % (kGroupsM * 4) == 0 && BN % (kGroupsN * 4) == 0, "group layout");

  // Canonical name fragment, e.g. "bm128_bn128_bk8_tm8_tn8".
  static std::string name() {
    return "bm" + std::to_string(BM) + "_bn" + std::to_string(BN) + "_bk" + std::to_string(BK) +
           "_tm" + std::to_string(TM) + "_tn" + std::to_string(TN);
  }
};

// The configs the library instantiates, with TFLOP/s measured on an H200 at
// 4096^3 (GemmF32Perf test; cuBLASLt SGEMM, CUBLAS_COMPUTE_32F, 49-51 there):
//   128x128x8 8x8: (K,K) 40.0, (K,MN) 41.8, (MN,MN) 43.6; 128 regs, 16.5 KiB smem
//   128x64x8 8x4:  (K,K) 31.3; 95 regs, 12.5 KiB smem
//   64x64x8 4x8:   (K,K) 30.7; 93-107 regs, 8.5 KiB smem
using SimtConfig128x128 = SimtConfig<128, 128, 8, 8, 8>;  // 256 threads, big problems
// 128x64 with 8x8 per thread (128 threads, two float4 prefetches of A) spilled
// 8-116 bytes with EpiAtomic under the 128-register cap; 8x4 does not.
using SimtConfig128x64 = SimtConfig<128, 64, 8, 8, 4>;    // 256 threads
// 64x64 with 8x8 per thread (64 threads) spilled 64-96 bytes under the 128-register
// cap (two float4 prefetches per operand); 4x8 per thread keeps one.
using SimtConfig64x64 = SimtConfig<64, 64, 8, 4, 8>;      // 128 threads, small / skinny problems

namespace f32_detail {

template <class Epi>
struct F32Args {
  const float* A;
  const float* B;
  int64_t lda, ldb;
  int M, N, K;
  int k_per_split;
  int tiles_m, tiles_n;
  int vec_a, vec_b;  // float4 global loads allowed for this operand
  Epi epi;
};

// Loads a ROWS x BK slice of one operand (ROWS = BM for A, BN for B) into
// registers, then stores it to shared memory as [BK][LDS] (k-major rows).
//   Major::K : X(r, k) = X[r*ld + k]; a float4 is 4 consecutive k of one row,
//              stored transposed into 4 shared rows.
//   Major::MN: X(r, k) = X[k*ld + r]; a float4 is 4 consecutive rows of one k,
//              stored as is.
template <int ROWS, int BK, int THREADS, int LDS, Major MAJ>
struct TileLoader {
  static constexpr int kGroups = ROWS * BK / 4;                    // float4 groups per slice
  static constexpr int kPerThread = (kGroups + THREADS - 1) / THREADS;
  static constexpr bool kExact = kGroups % THREADS == 0;
  float4 v[kPerThread];

  // Group g's (row, k) offsets within the slice.
  __device__ __forceinline__ static void coords(int g, int& r, int& k) {
    if constexpr (MAJ == Major::K) {
      r = g / (BK / 4);
      k = (g % (BK / 4)) * 4;
    } else {
      k = g / (ROWS / 4);
      r = (g % (ROWS / 4)) * 4;
    }
  }

  // row0: first row of the tile; k0: first k of the slice; k_end: end of the
  // split's k range; extent: M or N.
  __device__ __forceinline__ void load(const float* __restrict__ X, int64_t ld, int extent, int row0,
                                       int k0, int k_end, bool vec, int tid) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int g = tid + i * THREADS;
      v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (!kExact && g >= kGroups) continue;
      int r, k;
      coords(g, r, k);
      const int row = row0 + r, kk = k0 + k;
      float e[4] = {0.f, 0.f, 0.f, 0.f};
      if constexpr (MAJ == Major::K) {
        if (row < extent) {
          const float* src = X + int64_t(row) * ld + kk;
          if (vec && kk + 3 < k_end) {
            v[i] = __ldg(reinterpret_cast<const float4*>(src));
            continue;
          }
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (kk + j < k_end) e[j] = __ldg(src + j);
        }
      } else {
        if (kk < k_end) {
          const float* src = X + int64_t(kk) * ld + row;
          if (vec && row + 3 < extent) {
            v[i] = __ldg(reinterpret_cast<const float4*>(src));
            continue;
          }
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (row + j < extent) e[j] = __ldg(src + j);
        }
      }
      v[i] = make_float4(e[0], e[1], e[2], e[3]);
    }
  }

  __device__ __forceinline__ void store(float* __restrict__ s /* [BK][LDS] */, int tid) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int g = tid + i * THREADS;
      if (!kExact && g >= kGroups) continue;
      int r, k;
      coords(g, r, k);
      if constexpr (MAJ == Major::K) {
        s[(k + 0) * LDS + r] = v[i].x;
        s[(k + 1) * LDS + r] = v[i].y;
        s[(k + 2) * LDS + r] = v[i].z;
        s[(k + 3) * LDS + r] = v[i].w;
      } else {
        *reinterpret_cast<float4*>(s + k * LDS + r) = v[i];
      }
    }
  }
};

template <class Cfg, Major AM, Major BM_, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    gemm_f32_kernel(const __grid_constant__ F32Args<Epi> args) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, TM = Cfg::TM, TN = Cfg::TN;
  constexpr int LDA = Cfg::kLdsA, LDB = Cfg::kLdsB;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* As = smem;                 // [2][BK][LDA]
  float* Bs = smem + 2 * BK * LDA;  // [2][BK][LDB]

  // Grouped rasterisation of the (tiles_m x tiles_n) grid laid out in blockIdx.x.
  const int pid = blockIdx.x;
  const int per_group = Cfg::kGroupM * args.tiles_n;
  const int first_m = (pid / per_group) * Cfg::kGroupM;
  const int group_rows = min(args.tiles_m - first_m, Cfg::kGroupM);
  const int tile_m = first_m + (pid % per_group) % group_rows;
  const int tile_n = (pid % per_group) / group_rows;
  const int m0 = tile_m * BM, n0 = tile_n * BN;

  const int split = blockIdx.z;
  const int64_t kb64 = int64_t(split) * args.k_per_split;
  const int k_begin = int(kb64 < args.K ? kb64 : args.K);
  const int k_end = int(kb64 + args.k_per_split < args.K ? kb64 + args.k_per_split : args.K);
  const int num_slices = (k_end - k_begin + BK - 1) / BK;  // 0 for an empty split

  const int tid = threadIdx.x;
  const int tx = tid % Cfg::kThreadsN, ty = tid / Cfg::kThreadsN;

  float acc[TM][TN];  // (TM, TN) outputs of this thread
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  TileLoader<BM, BK, Cfg::kThreads, LDA, AM> la;
  TileLoader<BN, BK, Cfg::kThreads, LDB, BM_> lb;
  const bool vec_a = args.vec_a, vec_b = args.vec_b;

  if (num_slices > 0) {
    la.load(args.A, args.lda, args.M, m0, k_begin, k_end, vec_a, tid);
    lb.load(args.B, args.ldb, args.N, n0, k_begin, k_end, vec_b, tid);
    la.store(As, tid);
    lb.store(Bs, tid);
    __syncthreads();

    for (int t = 0; t < num_slices; ++t) {
      const int cur = t & 1;
      const bool more = t + 1 < num_slices;
      if (more) {  // next slice in flight while this one is multiplied
        la.load(args.A, args.lda, args.M, m0, k_begin + (t + 1) * BK, k_end, vec_a, tid);
        lb.load(args.B, args.ldb, args.N, n0, k_begin + (t + 1) * BK, k_end, vec_b, tid);
      }
      const float* as = As + cur * BK * LDA;
      const float* bs = Bs + cur * BK * LDB;
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float a[TM], b[TN];
#pragma unroll
        for (int c = 0; c < Cfg::kGroupsM; ++c) {
          const float4 q = *reinterpret_cast<const float4*>(as + kk * LDA + c * Cfg::kGroupStrideM + ty * 4);
          a[c * 4 + 0] = q.x, a[c * 4 + 1] = q.y, a[c * 4 + 2] = q.z, a[c * 4 + 3] = q.w;
        }
#pragma unroll
        for (int c = 0; c < Cfg::kGroupsN; ++c) {
          const float4 q = *reinterpret_cast<const float4*>(bs + kk * LDB + c * Cfg::kGroupStrideN + tx * 4);
          b[c * 4 + 0] = q.x, b[c * 4 + 1] = q.y, b[c * 4 + 2] = q.z, b[c * 4 + 3] = q.w;
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
      }
      if (more) {
        // Buffer cur^1 was last read in slice t-1, before the barrier that
        // closed it, so it can be overwritten now; one barrier per slice.
        la.store(As + (cur ^ 1) * BK * LDA, tid);
        lb.store(Bs + (cur ^ 1) * BK * LDB, tid);
        __syncthreads();
      }
    }
  }

  // Epilogue: once per in-range element, also for empty splits (value 0).
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + (i / 4) * Cfg::kGroupStrideM + ty * 4 + (i % 4);
    if (m >= args.M) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = n0 + (j / 4) * Cfg::kGroupStrideN + tx * 4 + (j % 4);
      if (n < args.N) args.epi(m, n, acc[i][j], split);
    }
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace f32_detail

// Launches the fp32 engine. Throws detfuse::Error (invalid_argument) for bad
// shapes or pointers and on launch failure. M == 0 or N == 0 launches nothing;
// K == 0 (or an empty split) hands the epilogue 0 for every element.
template <class Cfg, Major AM, Major BM, class Epi>
void launch_gemm_f32(const GemmParams& p, const Epi& epi, cudaStream_t stream) {
  using namespace f32_detail;
  if (p.M < 0 || p.N < 0 || p.K < 0)
    throw invalid_argument("launch_gemm_f32: negative size M=" + std::to_string(p.M) +
                           " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K));
  if (p.splits < 1 || p.splits > 65535)
    throw invalid_argument("launch_gemm_f32: splits must be in [1, 65535], got " + std::to_string(p.splits));
  if (p.k_per_split < 0)
    throw invalid_argument("launch_gemm_f32: negative k_per_split");
  if (p.splits > 1 && p.k_per_split == 0)
    throw invalid_argument("launch_gemm_f32: k_per_split must be > 0 when splits > 1");
  const int kps = p.k_per_split == 0 ? p.K : p.k_per_split;
  if (int64_t(p.splits) * kps < p.K)
    throw invalid_argument("launch_gemm_f32: splits * k_per_split = " +
                           std::to_string(int64_t(p.splits) * kps) + " does not cover K = " +
                           std::to_string(p.K));
  if (p.M == 0 || p.N == 0) return;
  if (p.K > 0) {
    if (!p.A || !p.B) throw invalid_argument("launch_gemm_f32: A or B is null");
    const int64_t need_a = AM == Major::K ? p.K : p.M;
    const int64_t need_b = BM == Major::K ? p.K : p.N;
    if (p.lda < need_a)
      throw invalid_argument("launch_gemm_f32: lda = " + std::to_string(p.lda) + " < " + std::to_string(need_a));
    if (p.ldb < need_b)
      throw invalid_argument("launch_gemm_f32: ldb = " + std::to_string(p.ldb) + " < " + std::to_string(need_b));
  }
  const int64_t tiles_m = (int64_t(p.M) + Cfg::BM - 1) / Cfg::BM;
  const int64_t tiles_n = (int64_t(p.N) + Cfg::BN - 1) / Cfg::BN;
  if (tiles_m * tiles_n > 0x7fffffff)
    throw invalid_argument("launch_gemm_f32: too many tiles for one grid");

  F32Args<Epi> args{};
  args.A = static_cast<const float*>(p.A);
  args.B = static_cast<const float*>(p.B);
  args.lda = p.lda;
  args.ldb = p.ldb;
  args.M = p.M;
  args.N = p.N;
  args.K = p.K;
  args.k_per_split = kps;
  args.tiles_m = int(tiles_m);
  args.tiles_n = int(tiles_n);
  // float4 along k needs every split to start on a multiple of 4 (so does
  // every slice, BK % 4 == 0); along m / n only the row starts matter.
  const bool split_ok = p.splits == 1 || kps % 4 == 0;
  args.vec_a = aligned16(p.A) && p.lda % 4 == 0 && (AM == Major::MN || split_ok);
  args.vec_b = aligned16(p.B) && p.ldb % 4 == 0 && (BM == Major::MN || split_ok);
  args.epi = epi;

  auto kernel = gemm_f32_kernel<Cfg, AM, BM, Epi>;
  if constexpr (Cfg::kSmemBytes > 48 * 1024) {
    // Once per instantiation (thread-safe static init); per-device in
    // principle, and every device this library targets takes the same value.
    static const cudaError_t attr_err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::kSmemBytes));
    check_cuda(attr_err, "cudaFuncSetAttribute(gemm_f32_kernel)", __FILE__, __LINE__);
  }
  const dim3 grid(unsigned(tiles_m * tiles_n), 1, unsigned(p.splits));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  DETFUSE_CHECK_LAUNCH();
}

}  // namespace detfuse::flce
