// cuBLASLt baseline: a thin matmul wrapper with the Major convention of
// kernels/flce/gemm.cuh, used as the speed reference of the FLCE benchmark
// (three GEMMs of the FLCE shape) and as an independent check in tests.
//
//   C[m, n] = alpha * sum_k A(m, k) B(n, k) + beta * C[m, n]
//   A(m, k) = A[m*lda + k] (Major::K) or A[k*lda + m] (Major::MN), likewise B
//   C row-major [M, N] with leading dimension ldc.
// Inputs fp32 or bf16 (both operands the same type), C fp32 or bf16 (bf16 C
// only with bf16 inputs), accumulation always fp32: CUBLAS_COMPUTE_32F, never
// CUBLAS_COMPUTE_32F_FAST_TF32, so fp32 inputs are multiplied exactly (no TF32).
//
// Row-major C in cuBLASLt's column-major world: C row-major [M, N] is C^T
// column-major [N, M] with the same ldc, and C^T = B' A'^T where B' is the
// [N, K] matrix B(n, k) and A' the [M, K] matrix A(m, k). So cuBLASLt's "A" is
// our B and its "B" is our A:
//   our B Major::K : column-major [K, N], ld ldb, op T    Major::MN: [N, K], op N
//   our A Major::K : column-major [K, M], ld lda, op N    Major::MN: [M, K], op T
//
// Determinism. The cuBLAS documentation, "Results Reproducibility" (cuBLAS
// library guide, section 2.1.4, https://docs.nvidia.com/cuda/cublas/#results-reproducibility):
// by design every cuBLAS routine of a given toolkit version gives bit-wise
// identical results on every run on GPUs of the same architecture and SM count;
// the guarantee holds while a single stream is active, and with several
// concurrent streams it can be kept by, among others, calling cublasLtMatmul()
// with a user-owned workspace. LtContext does exactly that: it owns a fixed
// workspace, and it asks the heuristic once per (shape, layouts, leading
// dimensions, dtypes, pointer alignments) and reuses that algorithm, so
// repeated calls run the same kernel with the same split/reduction scheme.
// Use one LtContext per stream (the workspace is not shared safely between
// streams that run concurrently). Across toolkit versions, GPUs or SM counts
// the bits may differ.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "kernels/common/buffer.h"
#include "kernels/common/major.h"
#include "kernels/common/problem.h"

namespace detfuse::baseline {

// Operand layout: the one Major of kernels/common/major.h, shared with the
// FLCE engines (Major::K : X(r, k) = X[r*ld + k], Major::MN: X[k*ld + r]).
using detfuse::Major;

// Throws detfuse::Error naming the call, with cuBLASLt's status name.
void check_cublas(cublasStatus_t st, const char* expr, const char* file, int line);
#define DETFUSE_CUBLAS_CHECK(expr) ::detfuse::baseline::check_cublas((expr), #expr, __FILE__, __LINE__)

// Owns a cuBLASLt handle, a fixed device workspace and the algorithm chosen
// for every problem key seen so far. Not thread-safe; one per stream.
class LtContext {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;  // cuBLAS recommends 32 MiB on Hopper
  explicit LtContext(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~LtContext();
  LtContext(const LtContext&) = delete;
  LtContext& operator=(const LtContext&) = delete;

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_.get(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }
  // Number of distinct problem keys with a cached algorithm.
  size_t cached_plans() const { return plans_.size(); }

  struct Plan;  // descriptors + chosen algorithm (lt_matmul.cpp)
  // The cached plan of `key`, or null.
  Plan* find(const std::string& key);
  Plan* insert(const std::string& key, std::unique_ptr<Plan> plan);

 private:
  cublasLtHandle_t handle_ = nullptr;
  DeviceBytes workspace_;
  std::map<std::string, std::unique_ptr<Plan>> plans_;
};

// One matmul (see the header comment for the convention). M == 0 or N == 0
// does nothing; K == 0 sets C to 0 when beta == 0 (beta != 0 with K == 0 is
// rejected). Throws detfuse::Error (invalid_argument) on bad arguments (naming
// the argument) and on cuBLASLt failure.
void lt_matmul(LtContext& ctx, DType in_dtype, Major am, Major bm, int M, int N, int K, const void* A,
               int64_t lda, const void* B, int64_t ldb, void* C, DType c_dtype, int64_t ldc,
               float alpha = 1.f, float beta = 0.f, cudaStream_t stream = nullptr);

// The canonical cache key lt_matmul uses for these arguments (exposed for tests).
std::string lt_plan_key(DType in_dtype, Major am, Major bm, int M, int N, int K, int64_t lda, int64_t ldb,
                        DType c_dtype, int64_t ldc, const void* A, const void* B, const void* C);

}  // namespace detfuse::baseline
