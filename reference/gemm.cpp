// The float64 matrix kernel of reference/ (see gemm.h for the contract).
//
// Loop nest: p in blocks of kKB (256) > n in chunks of 8 (the B panel, packed
// into 16 KB that stay in L1) > m in groups of kMR rows > p within the block.
// The C tile lives in registers for the whole p block: per p, 2 vector loads of
// B, kMR scalar broadcasts of A, 2 kMR FMAs.
// Measured, one thread of a 2-core Xeon (x86-64-v3 clone), FLCE logits
// 256 x 8192 x 1024: 4x8 tile 27 GFLOP/s; 2x4 dot-product tiles (the first
// version, A B^T without packing) 10 GFLOP/s; see README for the other numbers.
#include "reference/gemm.h"

#include <algorithm>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define DETFUSE_REF_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DETFUSE_REF_CLONES
#endif
#define DETFUSE_REF_INLINE inline __attribute__((always_inline))

namespace detfuse::reference::detail {
namespace {

typedef double v4d __attribute__((vector_size(32)));

DETFUSE_REF_INLINE v4d load4(const double* p) {
  v4d v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
DETFUSE_REF_INLINE void store4(double* p, v4d v) { __builtin_memcpy(p, &v, sizeof v); }

constexpr int kMR = 4;        // rows of the C tile  (6 measured: see README)
constexpr int kNV = 2;        // 4-wide vectors per row of the C tile: 8 columns
constexpr int64_t kKB = 256;  // p per panel: 256 x 8 doubles = 16 KB

// C tile (MR, 4 NV) += A(MR, K) P(K, 4 NV); P is a packed panel, row stride 4 NV.
template <int MR, int NV>
DETFUSE_REF_INLINE void tile(int64_t K, const double* A, int64_t a_rs, int64_t a_cs, const double* P, double* C,
                             int64_t ldc) {
  v4d acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = load4(C + i * ldc + 4 * v);
  for (int64_t p = 0; p < K; ++p) {
    v4d b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = load4(P + p * 4 * NV + 4 * v);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const double a = A[i * a_rs + p * a_cs];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) store4(C + i * ldc + 4 * v, acc[i][v]);
}

// One column of C (MR, 1): the N % 4 remainder, the same per-entry sequence.
template <int MR>
DETFUSE_REF_INLINE void column(int64_t K, const double* A, int64_t a_rs, int64_t a_cs, const double* P, double* C,
                               int64_t ldc) {
  double acc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = C[i * ldc];
  for (int64_t p = 0; p < K; ++p) {
    const double b = P[p];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc[i] += A[i * a_rs + p * a_cs] * b;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) C[i * ldc] = acc[i];
}

// P(kb, w) = B(p0 .. p0+kb, n0 .. n0+w), row stride w.
DETFUSE_REF_INLINE void pack(int64_t kb, int64_t w, const double* B, int64_t b_rs, int64_t b_cs, double* P) {
  if (b_cs == 1) {
    for (int64_t p = 0; p < kb; ++p)
      for (int64_t v = 0; v < w; ++v) P[p * w + v] = B[p * b_rs + v];
  } else {
    for (int64_t v = 0; v < w; ++v)
      for (int64_t p = 0; p < kb; ++p) P[p * w + v] = B[p * b_rs + v * b_cs];
  }
}

}  // namespace

DETFUSE_REF_CLONES
void gemm_acc(int64_t M, int64_t N, int64_t K, const double* A, int64_t a_rs, int64_t a_cs, const double* B,
              int64_t b_rs, int64_t b_cs, double* C, int64_t ldc) {
  alignas(64) double panel[kKB * 4 * kNV];
  for (int64_t p0 = 0; p0 < K; p0 += kKB) {
    const int64_t kb = std::min(kKB, K - p0);
    const double* Ap = A + p0 * a_cs;
    const double* Bp = B + p0 * b_rs;
    int64_t n0 = 0;
    for (; n0 + 4 * kNV <= N; n0 += 4 * kNV) {
      pack(kb, 4 * kNV, Bp + n0 * b_cs, b_rs, b_cs, panel);
      int64_t m0 = 0;
      for (; m0 + kMR <= M; m0 += kMR) tile<kMR, kNV>(kb, Ap + m0 * a_rs, a_rs, a_cs, panel, C + m0 * ldc + n0, ldc);
      for (; m0 < M; ++m0) tile<1, kNV>(kb, Ap + m0 * a_rs, a_rs, a_cs, panel, C + m0 * ldc + n0, ldc);
    }
    for (; n0 + 4 <= N; n0 += 4) {
      pack(kb, 4, Bp + n0 * b_cs, b_rs, b_cs, panel);
      int64_t m0 = 0;
      for (; m0 + kMR <= M; m0 += kMR) tile<kMR, 1>(kb, Ap + m0 * a_rs, a_rs, a_cs, panel, C + m0 * ldc + n0, ldc);
      for (; m0 < M; ++m0) tile<1, 1>(kb, Ap + m0 * a_rs, a_rs, a_cs, panel, C + m0 * ldc + n0, ldc);
    }
    for (; n0 < N; ++n0) {
      pack(kb, 1, Bp + n0 * b_cs, b_rs, b_cs, panel);
      int64_t m0 = 0;
      for (; m0 + kMR <= M; m0 += kMR) column<kMR>(kb, Ap + m0 * a_rs, a_rs, a_cs, panel, C + m0 * ldc + n0, ldc);
      for (; m0 < M; ++m0) column<1>(kb, Ap + m0 * a_rs, a_rs, a_cs, panel, C + m0 * ldc + n0, ldc);
    }
  }
}

}  // namespace detfuse::reference::detail
