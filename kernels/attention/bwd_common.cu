// Backward passes shared by the attention engines (see bwd_common.h).
#include <cub/device/device_for.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/attention/bwd_common.h"
#include "kernels/common/cuda_check.h"

namespace detfuse::attention {

namespace {

__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// One warp per row: lane sums k = lane, lane+32, ... in order with one fma a
// term (explicit __fmaf_rn: what nvcc's contraction of s += a*b gave, now
// written), then a fixed xor tree (offsets 16..1, the same value in every
// lane): the same bits on every run and in reference/emulate_attention.cpp.
template <class T>
__global__ void rowsum_do_o_kernel(const T* __restrict__ dO, const T* __restrict__ O, float* __restrict__ D,
                                   int64_t rows, int d) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float s = 0.f;
  for (int k = lane; k < d; k += 32) s = __fmaf_rn(ld(dO, row * d + k), ld(O, row * d + k), s);
  for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
  if (lane == 0) D[row] = s;
}

template <class T>
__global__ void convert_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    st(dst, i, src[i]);
}

// One dQ element of the partials reduction (cub::DeviceFor::Bulk calls it
// for i < units * unit_elems): its kc partials summed in key-block order.
template <class T>
struct SumPartials {
  const float* slab;
  float* acc;
  T* dQ;
  int64_t unit_begin, kc, unit_elems;
  bool first, last;
  __device__ void operator()(int64_t i) const {
    const int64_t u = i / unit_elems, e = i % unit_elems;
    float s = first ? 0.f : acc[i];
    const float* col = slab + u * kc * unit_elems + e;
    for (int64_t j = 0; j < kc; ++j) s = __fadd_rn(s, col[j * unit_elems]);
    if (last)
      st(dQ, (unit_begin + u) * unit_elems + e, s);
    else
      acc[i] = s;
  }
};

unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65535 * 16));
}

}  // namespace

void launch_rowsum_do_o(DType dtype, const void* dO, const void* O, float* D, int64_t rows, int d,
                        cudaStream_t stream) {
  if (rows <= 0) return;
  const int warps = 8;
  const unsigned blocks = unsigned((rows + warps - 1) / warps);
  if (dtype == DType::f32)
    rowsum_do_o_kernel<float><<<blocks, warps * 32, 0, stream>>>(static_cast<const float*>(dO),
                                                                static_cast<const float*>(O), D, rows, d);
  else
    rowsum_do_o_kernel<__nv_bfloat16><<<blocks, warps * 32, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(dO), static_cast<const __nv_bfloat16*>(O), D, rows, d);
  DETFUSE_CUDA_CHECK(cudaGetLastError());
}

void launch_convert_f32(DType dtype, const float* src, void* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (dtype == DType::f32)
    convert_kernel<float><<<grid_for(n, 256), 256, 0, stream>>>(src, static_cast<float*>(dst), n);
  else
    convert_kernel<__nv_bfloat16><<<grid_for(n, 256), 256, 0, stream>>>(src, static_cast<__nv_bfloat16*>(dst), n);
  DETFUSE_CUDA_CHECK(cudaGetLastError());
}

void launch_partials_reduce(DType dtype, const float* slab, float* acc, void* dQ, int64_t unit_begin,
                            int64_t units, int64_t kc, int64_t unit_elems, bool first, bool last,
                            cudaStream_t stream) {
  const int64_t n = units * unit_elems;
  if (n <= 0) return;
  if (dtype == DType::f32)
    DETFUSE_CUDA_CHECK(cub::DeviceFor::Bulk(
        n, SumPartials<float>{slab, acc, static_cast<float*>(dQ), unit_begin, kc, unit_elems, first, last}, stream));
  else
    DETFUSE_CUDA_CHECK(cub::DeviceFor::Bulk(
        n,
        SumPartials<__nv_bfloat16>{slab, acc, static_cast<__nv_bfloat16*>(dQ), unit_begin, kc, unit_elems, first,
                                   last},
        stream));
}

std::optional<PartialsPlan> plan_partials(const AttentionProblem& p, int bc, size_t bound_bytes) {
  PartialsPlan pl;
  pl.n_kb = (p.Sk + bc - 1) / bc;
  pl.units = p.B * p.Hkv;
  pl.unit_bytes = (p.H / p.Hkv) * p.Sq * p.d * int64_t(sizeof(float));
  const int64_t cap = int64_t(bound_bytes) / pl.unit_bytes;  // partials that fit in the slab
  if (cap < 1) return std::nullopt;
  if (cap >= pl.n_kb) {
    pl.kc = pl.n_kb;
    pl.uc = std::min(pl.units, cap / pl.n_kb);
    pl.ranges = 1;
  } else {
    pl.kc = cap;
    pl.uc = 1;
    pl.ranges = (pl.n_kb + pl.kc - 1) / pl.kc;
  }
  pl.slab_bytes = align256(size_t(pl.uc * pl.kc * pl.unit_bytes));
  pl.acc_bytes = pl.ranges > 1 ? align256(size_t(pl.uc * pl.unit_bytes)) : 0;
  return pl;
}

}  // namespace detfuse::attention
