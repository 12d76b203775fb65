// CUDA status checks: a failed CUDA call becomes a detfuse::Error (throwing
// form) or a returned cudaError_t (for paths that must not throw, as CUB's
// dispatch does). The message names the call and its file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/common/error.h"

namespace detfuse {

// "file:line: expr: cudaErrorName (message)".
std::string cuda_error_message(cudaError_t err, const char* expr, const char* file, int line);

// Throws Error if err != cudaSuccess.
void check_cuda(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace detfuse

// Throwing form: DETFUSE_CUDA_CHECK(cudaMalloc(&p, n));
#define DETFUSE_CUDA_CHECK(expr) ::detfuse::check_cuda((expr), #expr, __FILE__, __LINE__)

// After a kernel launch: catches launch-configuration errors.
#define DETFUSE_CHECK_LAUNCH() ::detfuse::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// Returning form, for code that reports a cudaError_t instead of throwing.
#define DETFUSE_CUDA_TRY(expr)                         \
  do {                                                 \
    cudaError_t detfuse_err_ = (expr);                 \
    if (detfuse_err_ != cudaSuccess) return detfuse_err_; \
  } while (0)
