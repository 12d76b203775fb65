// Three cuBLASLt GEMMs of the FLCE shape, timed (see three_gemms.h).
#include "kernels/baseline/three_gemms.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/baseline/lt_matmul.h"
#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/timer.h"

namespace detfuse::baseline {

namespace {

// Counter-based hash -> uniform in [-scale, scale); never a run of zeros.
__device__ __forceinline__ float hash_uniform(uint64_t i, uint32_t seed, float scale) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + (uint64_t(seed) << 32 | seed);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  const float u = float(uint32_t(x >> 40)) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.f * u - 1.f) * scale;
}

template <class T>
__global__ void fill_random_kernel(T* p, uint64_t n, uint32_t seed, float scale) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const float v = hash_uniform(i, seed, scale);
    if constexpr (sizeof(T) == 2)
      p[i] = __float2bfloat16_rn(v);
    else
      p[i] = v;
  }
}


DeviceBytes alloc_named(const char* what, uint64_t bytes) {
  try {
    return DeviceBytes(size_t(bytes));
  } catch (const Error& e) {
    throw Error(std::string("time_three_gemms: cannot allocate ") + what + " (" + std::to_string(bytes) +
                " bytes): " + e.what());
  }
}

}  // namespace

void fill_random(void* p, DType t, uint64_t n, uint32_t seed, float scale, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<uint64_t>((n + 255) / 256, 65536));
  if (t == DType::bf16)
    fill_random_kernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  else
    fill_random_kernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(p), n, seed, scale);
  DETFUSE_CHECK_LAUNCH();
}

double median_ms(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ThreeGemmTiming time_three_gemms(const FlceProblem& p, int warmup, int reps, cudaStream_t stream) {
  p.validate();
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (p.N > kIntMax || p.D > kIntMax || p.V > kIntMax)
    throw invalid_argument("time_three_gemms: N, D and V must fit in int, got " + p.shape());
  if (reps < 1) throw invalid_argument("time_three_gemms: reps must be >= 1, got " + std::to_string(reps));
  warmup = std::max(warmup, 1);
  const int N = int(p.N), D = int(p.D), V = int(p.V);
  const DType in = p.dtype;
  const uint64_t es = dtype_bytes(in);

  ThreeGemmTiming out;
  DeviceBytes X = alloc_named("X [N, D]", uint64_t(N) * D * es);
  DeviceBytes W = alloc_named("W [V, D]", uint64_t(V) * D * es);
  DeviceBytes G = alloc_named("G [N, V]", uint64_t(N) * V * es);
  DeviceBytes dX = alloc_named("dX [N, D] fp32", uint64_t(N) * D * 4);
  DeviceBytes dW = alloc_named("dW [V, D] fp32", uint64_t(V) * D * 4);
  DeviceBytes Z;
  try {
    Z.allocate(size_t(uint64_t(N) * V * 4));
    out.logits_dtype = DType::f32;
  } catch (const Error& e) {
    Z = alloc_named("logits [N, V] bf16 (fp32 did not fit)", uint64_t(N) * V * 2);
    out.logits_dtype = DType::bf16;
    out.note = std::string("logits written as bf16: fp32 [N, V] could not be allocated (") + e.what() + ")";
  }
  // L2 flush: writing a buffer larger than L2 evicts the previous GEMM's data.
  int dev = 0, l2 = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  DeviceBytes flush = alloc_named("L2 flush buffer", uint64_t(std::max(l2, 1 << 20)) * 2);

  fill_random(X.get(), in, uint64_t(N) * D, 1u, 1.0f, stream);
  fill_random(W.get(), in, uint64_t(V) * D, 2u, 0.05f, stream);
  fill_random(G.get(), in, uint64_t(N) * V, 3u, 1e-3f, stream);

  LtContext ctx;
  auto logits = [&] {
    lt_matmul(ctx, in, Major::K, Major::K, N, V, D, X.get(), D, W.get(), D, Z.get(), out.logits_dtype, V, 1.f, 0.f,
              stream);
  };
  auto dx = [&] {
    lt_matmul(ctx, in, Major::K, Major::MN, N, D, V, G.get(), V, W.get(), D, dX.get(), DType::f32, D, 1.f, 0.f,
              stream);
  };
  auto dw = [&] {
    lt_matmul(ctx, in, Major::MN, Major::MN, V, D, N, G.get(), V, X.get(), D, dW.get(), DType::f32, D, 1.f, 0.f,
              stream);
  };
  auto flush_l2 = [&] { DETFUSE_CUDA_CHECK(cudaMemsetAsync(flush.get(), 0, flush.bytes(), stream)); };

  for (int i = 0; i < warmup; ++i) {
    logits();
    dx();
    dw();
  }
  DETFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

  EventTimer timer;
  auto timed = [&](auto&& gemm) {
    flush_l2();
    timer.start(stream);
    gemm();
    return double(timer.stop_ms(stream));
  };
  for (int r = 0; r < reps; ++r) {
    const double a = timed(logits), b = timed(dx), c = timed(dw);
    out.logits_samples_ms.push_back(a);
    out.dx_samples_ms.push_back(b);
    out.dw_samples_ms.push_back(c);
    out.total_samples_ms.push_back(a + b + c);
  }
  out.logits_ms = median_ms(out.logits_samples_ms);
  out.dx_ms = median_ms(out.dx_samples_ms);
  out.dw_ms = median_ms(out.dw_samples_ms);
  return out;
}

}  // namespace detfuse::baseline
