#include "tests/tuner_gpu/faulting_variants.h"

#include <cuda_runtime.h>

#include "kernels/common/cuda_check.h"

namespace detfuse::testing {

namespace {

// Stores far past the end of the buffer (2^36 floats = 256 GiB on): never mapped.
__global__ void store_out_of_bounds(float* base) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    volatile float* far = base + (size_t(1) << 36);
    *far = 1.0f;
  }
}

__global__ void trap_kernel(int* flag) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    *flag = 1;
    __trap();
  }
}

// Spins until *stop != 0, which nothing ever writes (the volatile read stops
// the compiler from proving the loop endless and removing it).
__global__ void spin_forever(volatile int* stop, int* sink) {
  long long n = 0;
  while (*stop == 0) ++n;
  *sink = int(n);
}

}  // namespace

FlceVariant faulting_flce(const std::string& how, DType dtype) {
  if (how != "oob" && how != "trap" && how != "hang") throw invalid_argument("faulting_flce: unknown fault '" + how + "'");
  FlceVariant v;
  v.desc.family = Family::flce;
  v.desc.dtype = dtype;
  v.desc.engine = dtype == DType::bf16 ? "mma" : "fma";
  v.desc.strategy = "owning";
  v.desc.params = {{"bm", 1}, {how, 1}};
  v.desc.name = VariantDesc::canonical_name(Family::flce, dtype, v.desc.engine, "owning", v.desc.params);
  v.desc.deterministic = true;
  v.desc.summary = "deliberately faulting test variant (" + how + ")";
  v.can_run = [](const FlceProblem&, FlceMode, const DeviceInfo&) -> std::optional<std::string> { return std::nullopt; };
  v.workspace_bytes = [](const FlceProblem&, FlceMode) { return size_t(0); };
  v.launch = [how](const FlceProblem&, FlceMode, const FlceArgs& a, cudaStream_t s) {
    // dW (or dX) is a device buffer of the case; the kernels only need a valid
    // base pointer, and int scratch inside it.
    void* base = a.dW ? a.dW : a.dX;
    if (how == "oob") store_out_of_bounds<<<1, 32, 0, s>>>(static_cast<float*>(base));
    if (how == "trap") trap_kernel<<<1, 32, 0, s>>>(static_cast<int*>(base));
    if (how == "hang") {
      // Reads a word of the output that stays zero: dW's first 4 bytes are
      // written to zero first, on the same stream, so the loop never ends.
      DETFUSE_CUDA_CHECK(cudaMemsetAsync(base, 0, 8, s));
      int* w = static_cast<int*>(base);
      spin_forever<<<1, 1, 0, s>>>(w, w + 1);
    }
    DETFUSE_CHECK_LAUNCH();
  };
  return v;
}

}  // namespace detfuse::testing
