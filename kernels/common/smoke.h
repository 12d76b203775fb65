// A trivial kernel for the GPU smoke test: proves a build copied to a GPU
// machine loads, launches and computes there.
#pragma once

#include <cuda_runtime_api.h>

namespace detfuse {

// y[i] = a * x[i] + y[i] for i < n, on device pointers.
void smoke_saxpy(int n, float a, const float* x, float* y, cudaStream_t stream = nullptr);

}  // namespace detfuse
