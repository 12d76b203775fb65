// bf16 tensor-core GEMM engine for FLCE: C = A B^T with bf16 operands and
// fp32 accumulation on mma.sync.m16n8k16 (see gemm.cuh for the contract).
//
// Why this shape: the three FLCE products (logits, dX, dW) read their operands
// in three different layouts; one engine templated on each operand's major-ness
// serves them all. Tiles are staged global -> shared with 16-byte cp.async in a
// STAGES-deep ring (zero-filled outside the problem), fragments are read with
// ldmatrix (.trans for M/N-contiguous operands), shared rows are padded by 16
// bytes so ldmatrix is bank-conflict free. Block raster is grouped (group_m
// row-tiles sweep the column tiles) so the caller can keep the smaller operand
// resident in L2. Requirements (checked by the FLCE variants' can_run): lda and
// ldb multiples of 8 elements and 16-byte aligned bases; for a K-contiguous
// operand the elements between K and the next multiple of 8 are zero or K % 8 == 0;
// for an M/N-contiguous operand reading up to the next multiple of 8 past M/N
// stays inside its allocation.
//
// Measured alternatives are kept in kernels/flce/README.md and the benchmark log.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_check.h"
#include "kernels/flce/gemm.cuh"

namespace detfuse::flce {

// Block tile BM x BN x BK, WARPS_M x WARPS_N warps, STAGES-deep cp.async ring.
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct TcConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int WARPS = WARPS_M * WARPS_N;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int WM = BM / WARPS_M;  // warp tile rows
  static constexpr int WN = BN / WARPS_N;  // warp tile cols
  static constexpr int MI = WM / 16;       // m16 fragments per warp
  static constexpr int NI = WN / 8;        // n8 fragments per warp
  static constexpr int PAD = 8;            // bf16 elements (16 bytes) of row padding

  static_assert(BM % (16 * WARPS_M) == 0, "warp tile rows must be a multiple of 16");
  static_assert(BN % (16 * WARPS_N) == 0, "warp tile cols must be a multiple of 16 (ldmatrix.x4 loads two n8 tiles)");
  static_assert(BK % 16 == 0 && BK >= 16, "BK must be a multiple of the mma k (16)");
  static_assert(STAGES >= 2, "the cp.async ring needs at least two stages");
  static_assert((BM * BK / 8) % THREADS == 0 && (BN * BK / 8) % THREADS == 0,
                "every thread loads the same number of 16-byte chunks");

  // Elements of one stage of an operand whose tile extent (rows along M or N) is E.
  static constexpr int stage_elems(Major m, int E) { return m == Major::K ? E * (BK + PAD) : BK * (E + PAD); }
  template <Major AM, Major BMj>
  static constexpr size_t smem_bytes() {
    return size_t(STAGES) * (stage_elems(AM, BM) + stage_elems(BMj, BN)) * sizeof(__nv_bfloat16);
  }
};

namespace tc {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes == 0 writes zeros (src must still be a valid address).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Stage one operand tile (E rows along M or N, BK along K) into shared memory.
//   Major::K : smem [E][BK+PAD], global (e, k) at g[e*ld + k]
//   Major::MN: smem [BK][E+PAD], global (e, k) at g[k*ld + e]
template <class Cfg, Major MJ, int E>
__device__ __forceinline__ void load_tile(__nv_bfloat16* s, const __nv_bfloat16* g, int64_t ld, int e0, int e_ext,
                                          int k0, int k_end, int tid) {
  constexpr int BK = Cfg::BK;
  constexpr int CHUNKS = E * BK / 8;
#pragma unroll
  for (int i = 0; i < CHUNKS / Cfg::THREADS; ++i) {
    int c = tid + i * Cfg::THREADS;
    if constexpr (MJ == Major::K) {
      int r = c / (BK / 8), kc = (c % (BK / 8)) * 8;
      int e = e0 + r, k = k0 + kc;
      bool ok = e < e_ext && k < k_end;
      const __nv_bfloat16* src = ok ? g + int64_t(e) * ld + k : g;
      cp_async16(s + r * (BK + Cfg::PAD) + kc, src, ok);
    } else {
      int kr = c / (E / 8), ec = (c % (E / 8)) * 8;
      int e = e0 + ec, k = k0 + kr;
      bool ok = e < e_ext && k < k_end;
      const __nv_bfloat16* src = ok ? g + int64_t(k) * ld + e : g;
      cp_async16(s + kr * (E + Cfg::PAD) + ec, src, ok);
    }
  }
}

// A fragments (m16 x k16) for the warp's MI row tiles at k offset kk.
template <class Cfg, Major AM>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[Cfg::MI][4], const __nv_bfloat16* s, int wm0, int kk,
                                             int lane) {
#pragma unroll
  for (int mi = 0; mi < Cfg::MI; ++mi) {
    int m = wm0 + mi * 16;
    if constexpr (AM == Major::K) {
      // matrices: (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15); rows = m
      const __nv_bfloat16* p = s + (m + (lane % 16)) * (Cfg::BK + Cfg::PAD) + kk + (lane / 16) * 8;
      ldmatrix_x4(a[mi], p);
    } else {
      // stored rows = k; .trans yields the (m, k) fragment
      const __nv_bfloat16* p = s + (kk + (lane % 8) + (lane / 16) * 8) * (Cfg::BM + Cfg::PAD) + m + ((lane / 8) % 2) * 8;
      ldmatrix_x4_trans(a[mi], p);
    }
  }
}

// B fragments (k16 x n8) for the warp's NI column tiles, two n8 tiles per ldmatrix.x4.
template <class Cfg, Major BMj>
__device__ __forceinline__ void load_b_frags(uint32_t (&b)[Cfg::NI][2], const __nv_bfloat16* s, int wn0, int kk,
                                             int lane) {
#pragma unroll
  for (int nj = 0; nj < Cfg::NI / 2; ++nj) {
    int n = wn0 + nj * 16;
    uint32_t r[4];
    if constexpr (BMj == Major::K) {
      // matrices: (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15); rows = n
      const __nv_bfloat16* p = s + (n + (lane % 8) + (lane / 16) * 8) * (Cfg::BK + Cfg::PAD) + kk + ((lane / 8) % 2) * 8;
      ldmatrix_x4(r, p);
    } else {
      // stored rows = k: (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15)
      const __nv_bfloat16* p = s + (kk + (lane % 8) + ((lane / 8) % 2) * 8) * (Cfg::BN + Cfg::PAD) + n + (lane / 16) * 8;
      ldmatrix_x4_trans(r, p);
    }
    b[2 * nj][0] = r[0];
    b[2 * nj][1] = r[1];
    b[2 * nj + 1][0] = r[2];
    b[2 * nj + 1][1] = r[3];
  }
}

template <class Cfg, Major AM, Major BMj, class Epi>
__global__ void __launch_bounds__(Cfg::THREADS) gemm_bf16_kernel(const GemmParams p, const Epi epi, int group_m) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int A_STAGE = Cfg::stage_elems(AM, Cfg::BM);
  constexpr int B_STAGE = Cfg::stage_elems(BMj, Cfg::BN);
  __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(smem_raw);   // [STAGES][A_STAGE]
  __nv_bfloat16* sB = sA + Cfg::STAGES * A_STAGE;                    // [STAGES][B_STAGE]

  // Grouped raster: group_m row tiles sweep all column tiles before the next group.
  const int tiles_m = (p.M + Cfg::BM - 1) / Cfg::BM;
  const int tiles_n = (p.N + Cfg::BN - 1) / Cfg::BN;
  const int pid = blockIdx.x;
  const int per_group = group_m * tiles_n;
  const int first_m = (pid / per_group) * group_m;
  const int gm = min(tiles_m - first_m, group_m);
  const int tile_m = first_m + (pid % per_group) % gm;
  const int tile_n = (pid % per_group) / gm;
  const int m0 = tile_m * Cfg::BM, n0 = tile_n * Cfg::BN;

  const int split = blockIdx.z;
  const int kps = p.k_per_split > 0 ? p.k_per_split : p.K;
  const int k_begin = split * kps;
  const int k_end = min(p.K, k_begin + kps);
  const int ktiles = k_end > k_begin ? (k_end - k_begin + Cfg::BK - 1) / Cfg::BK : 0;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm0 = (warp / Cfg::WARPS_N) * Cfg::WM;  // warp tile origin inside the block tile
  const int wn0 = (warp % Cfg::WARPS_N) * Cfg::WN;
  const auto* A = static_cast<const __nv_bfloat16*>(p.A);
  const auto* B = static_cast<const __nv_bfloat16*>(p.B);

  float acc[Cfg::MI][Cfg::NI][4];  // (MI x 16) x (NI x 8) fp32 accumulators per warp
#pragma unroll
  for (int i = 0; i < Cfg::MI; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::NI; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
  if constexpr (std::is_same_v<Epi, EpiAccumulateIn>) {
    // Owning dW with the running sum in the accumulators (gemm.cuh): start the
    // chain from the fp32 dW of the chunks before. Issued before the ring's
    // prologue, so the loads overlap the first stages' copies.
    if (!epi.first) {
#pragma unroll
      for (int i = 0; i < Cfg::MI; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::NI; ++j) {
          const int m = m0 + wm0 + i * 16 + lane / 4, n = n0 + wn0 + j * 8 + (lane % 4) * 2;
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int mm = m + (r / 2) * 8, nn = n + r % 2;
            if (mm < p.M && nn < p.N) acc[i][j][r] = epi.initial(mm, nn);
          }
        }
    }
  }

  auto load_stage = [&](int stage, int kt) {
    int k0 = k_begin + kt * Cfg::BK;
    load_tile<Cfg, AM, Cfg::BM>(sA + stage * A_STAGE, A, p.lda, m0, p.M, k0, k_end, tid);
    load_tile<Cfg, BMj, Cfg::BN>(sB + stage * B_STAGE, B, p.ldb, n0, p.N, k0, k_end, tid);
  };

#pragma unroll
  for (int s = 0; s < Cfg::STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<Cfg::STAGES - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt-1 is free to overwrite
    int next = kt + Cfg::STAGES - 1;
    if (next < ktiles) load_stage(next % Cfg::STAGES, next);
    cp_async_commit();

    const __nv_bfloat16* a_s = sA + (kt % Cfg::STAGES) * A_STAGE;
    const __nv_bfloat16* b_s = sB + (kt % Cfg::STAGES) * B_STAGE;
#pragma unroll
    for (int kk = 0; kk < Cfg::BK; kk += 16) {
      uint32_t af[Cfg::MI][4];
      uint32_t bf[Cfg::NI][2];
      load_a_frags<Cfg, AM>(af, a_s, wm0, kk, lane);
      load_b_frags<Cfg, BMj>(bf, b_s, wn0, kk, lane);
#pragma unroll
      for (int i = 0; i < Cfg::MI; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::NI; ++j) mma_bf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  }
  cp_async_wait<0>();

  // Accumulator layout: acc[i][j][0..1] at (row lane/4, cols 2*(lane%4)+{0,1}), [2..3] at row +8.
#pragma unroll
  for (int i = 0; i < Cfg::MI; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::NI; ++j) {
      int m = m0 + wm0 + i * 16 + lane / 4;
      int n = n0 + wn0 + j * 8 + (lane % 4) * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int mm = m + h * 8;
        if (mm < p.M) {
          if (n < p.N) epi(mm, n, acc[i][j][2 * h], split);
          if (n + 1 < p.N) epi(mm, n + 1, acc[i][j][2 * h + 1], split);
        }
      }
    }
  }
}

}  // namespace tc

// group_m: row tiles per raster group (1: all column tiles of one row tile run
// together; tiles_m: one column tile meets every row tile before moving on).
template <class Cfg, Major AM, Major BMj, class Epi>
void launch_gemm_bf16_grouped(const GemmParams& p, const Epi& epi, int group_m, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return;
  const int tiles_m = (p.M + Cfg::BM - 1) / Cfg::BM;
  const int tiles_n = (p.N + Cfg::BN - 1) / Cfg::BN;
  if (group_m < 1 || group_m > tiles_m) group_m = tiles_m;
  constexpr size_t smem = Cfg::template smem_bytes<AM, BMj>();
  auto kernel = tc::gemm_bf16_kernel<Cfg, AM, BMj, Epi>;
  static bool configured = false;  // one attribute call per instantiation and process
  if (!configured) {
    DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  dim3 grid(unsigned(tiles_m) * unsigned(tiles_n), 1, unsigned(p.splits > 0 ? p.splits : 1));
  kernel<<<grid, Cfg::THREADS, smem, stream>>>(p, epi, group_m);
  DETFUSE_CHECK_LAUNCH();
}

template <class Cfg, Major AM, Major BMj, class Epi>
void launch_gemm_bf16(const GemmParams& p, const Epi& epi, cudaStream_t stream) {
  launch_gemm_bf16_grouped<Cfg, AM, BMj, Epi>(p, epi, 8, stream);
}

}  // namespace detfuse::flce
