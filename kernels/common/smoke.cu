#include "kernels/common/cuda_check.h"
#include "kernels/common/smoke.h"

namespace detfuse {

namespace {
__global__ void saxpy_kernel(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaf(a, x[i], y[i]);
}
}  // namespace

void smoke_saxpy(int n, float a, const float* x, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  saxpy_kernel<<<(n + 255) / 256, 256, 0, stream>>>(n, a, x, y);
  DETFUSE_CHECK_LAUNCH();
}

}  // namespace detfuse
