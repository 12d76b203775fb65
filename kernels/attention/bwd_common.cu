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

// The bf16 rows of the wgmma head dims (d = 64, 128) with 16-byte loads: the
// same fma chains and xor tree as rowsum_do_o_kernel, so the same bits. A row
// is LPR = d / 8 lanes of 8 elements (32 / LPR rows a warp); lane j of a row
// holds elements 8 j .. 8 j + 7, i.e. term k = j / 4 (element 32 k + l) of the
// virtual lanes l = 8 (j % 4) + e, e < 8. The chain s_l = fma(term k, s_l) runs
// up the lanes j, j + 4, j + 8, ... (shuffles by 4); the last term's lanes
// then do the tree: offsets 16 and 8 of l are lanes j ^ 2 and j ^ 1, offsets
// 4, 2, 1 are e ^ 4, e ^ 2, e ^ 1 inside a lane. The result equals the warp's
// lane-0 value of the generic kernel (fadd is commutative: both lanes of a pair
// hold the same bits after every step).
template <int DIM>
__global__ void rowsum_do_o_bf16_vec_kernel(const uint4* __restrict__ dO, const uint4* __restrict__ O,
                                            float* __restrict__ D, int64_t rows) {
  constexpr int LPR = DIM / 8, RPW = 32 / LPR, K = DIM / 32;
  const int lane = threadIdx.x % 32, j = lane % LPR, k = j / 4;
  const int64_t row = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * RPW + lane / LPR;
  const bool live = row < rows;
  float a[8], b[8], s[8];
  {
    uint4 va = make_uint4(0, 0, 0, 0), vb = va;
    if (live) {
      va = __ldg(dO + row * LPR + j);
      vb = __ldg(O + row * LPR + j);
    }
    const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&va);
    const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&vb);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 fa = __bfloat1622float2(pa[e]), fb = __bfloat1622float2(pb[e]);
      a[2 * e] = fa.x, a[2 * e + 1] = fa.y, b[2 * e] = fb.x, b[2 * e + 1] = fb.y;
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) s[e] = __fmaf_rn(a[e], b[e], 0.f);
#pragma unroll
  for (int kk = 1; kk < K; ++kk) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float prev = __shfl_up_sync(0xffffffffu, s[e], 4);
      if (k == kk) s[e] = __fmaf_rn(a[e], b[e], prev);
    }
  }
#pragma unroll
  for (int o = 2; o > 0; o >>= 1)
#pragma unroll
    for (int e = 0; e < 8; ++e) s[e] = __fadd_rn(s[e], __shfl_xor_sync(0xffffffffu, s[e], o));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) {
    float t[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) t[e] = __fadd_rn(s[e], s[e ^ o]);
#pragma unroll
    for (int e = 0; e < 8; ++e) s[e] = t[e];
  }
  if (live && j == 4 * (K - 1)) D[row] = s[0];
}

template <class T>
__global__ void convert_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    st(dst, i, src[i]);
}

// bf16 convert with 16-byte loads and 8-byte stores (n % 4 == 0, aligned):
// each value rounded on its own, the bits of convert_kernel.
__global__ void convert_bf16_vec_kernel(const float4* __restrict__ src, uint2* __restrict__ dst, int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(src + i);
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    dst[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  }
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
  const bool vec = dtype == DType::bf16 && (d == 64 || d == 128) &&
                   reinterpret_cast<uintptr_t>(dO) % 16 == 0 && reinterpret_cast<uintptr_t>(O) % 16 == 0;
  if (vec) {  // 16-byte loads, 32 / (d / 8) rows a warp; the generic kernel's bits
    const int64_t rpb = int64_t(warps) * (32 / (d / 8));
    const unsigned blocks = unsigned((rows + rpb - 1) / rpb);
    const auto* a = static_cast<const uint4*>(dO);
    const auto* b = static_cast<const uint4*>(O);
    if (d == 64)
      rowsum_do_o_bf16_vec_kernel<64><<<blocks, warps * 32, 0, stream>>>(a, b, D, rows);
    else
      rowsum_do_o_bf16_vec_kernel<128><<<blocks, warps * 32, 0, stream>>>(a, b, D, rows);
    DETFUSE_CUDA_CHECK(cudaGetLastError());
    return;
  }
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
  if (dtype == DType::bf16 && n % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
    convert_bf16_vec_kernel<<<grid_for(n / 4, 256), 256, 0, stream>>>(reinterpret_cast<const float4*>(src),
                                                                      static_cast<uint2*>(dst), n / 4);
    DETFUSE_CUDA_CHECK(cudaGetLastError());
    return;
  }
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
