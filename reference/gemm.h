// Internal: the float64 matrix kernel every reference is built from.
//
// C[m*ldc + n] += sum_{p<K} A(m, p) B(p, n), with A(m, p) = A[m*a_rs + p*a_cs]
// and B(p, n) = B[p*b_rs + n*b_cs], so one routine serves A B, A B^T, A^T B.
//
// What matters for an oracle: every entry of C is c += A(m, p) B(p, n) for
// p = 0, 1, ..., K-1 in order (a plain sequential sum, no tree), whatever the
// tile it falls in, whatever M, N or the callers' split of the work into
// tasks. Results therefore never depend on blocking or thread count.
//
// It is register-blocked (a 4 x 8 tile of C in registers), copies each
// (256 x 8) panel of B into a contiguous buffer (B rows a power of two apart
// would otherwise all fall in one L1 set), is vectorised with GCC vector
// extensions and compiled twice, for x86-64-v3 (AVX2 + FMA) and for the
// baseline, picked at load time, so binaries stay portable (no -march=native).
// The two clones may differ in the last bits (FMA rounds once); every machine
// with AVX2 + FMA gives the same bits.
#pragma once

#include <cstdint>

namespace detfuse::reference::detail {

void gemm_acc(int64_t M, int64_t N, int64_t K, const double* A, int64_t a_rs, int64_t a_cs, const double* B,
              int64_t b_rs, int64_t b_cs, double* C, int64_t ldc);

// C = A B^T: C[m*ldc + n] = sum_k A[m*lda + k] B[n*ldb + k] (both row-major along k).
inline void gemm_abt(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb,
                     double* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = 0.0;
  gemm_acc(M, N, K, A, lda, 1, B, 1, ldb, C, ldc);
}

// C += op(A) B with B row-major (ldb): (a_rs, a_cs) = (lda, 1) for A, (1, lda) for A^T.
inline void gemm_ab_acc(int64_t M, int64_t N, int64_t K, const double* A, int64_t a_rs, int64_t a_cs,
                        const double* B, int64_t ldb, double* C, int64_t ldc) {
  gemm_acc(M, N, K, A, a_rs, a_cs, B, ldb, 1, C, ldc);
}

}  // namespace detfuse::reference::detail
