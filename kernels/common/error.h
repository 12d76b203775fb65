// Errors and CUDA status checking for detfuse.
//
// Library code never prints and never exits: it throws detfuse::Error (with a
// message that names the argument or the failing CUDA call and its file:line),
// or, on paths that must not throw, returns a cudaError_t. The CLI maps Error to
// exit code 2 (bad usage / input) or 1 (runtime failure) through Error::kind().
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace detfuse {

class Error : public std::runtime_error {
 public:
  enum class Kind { invalid_argument, runtime };
  explicit Error(const std::string& what, Kind kind = Kind::runtime)
      : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// An Error of kind invalid_argument: bad shapes, null pointers, bad options.
inline Error invalid_argument(const std::string& what) {
  return Error(what, Error::Kind::invalid_argument);
}

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
