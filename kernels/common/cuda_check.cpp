#include "kernels/common/cuda_check.h"

#include <sstream>

namespace detfuse {

std::string cuda_error_message(cudaError_t err, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": " << expr << ": " << cudaGetErrorName(err) << " ("
     << cudaGetErrorString(err) << ")";
  return os.str();
}

void check_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  if (err != cudaSuccess) throw Error(cuda_error_message(err, expr, file, line));
}

}  // namespace detfuse
