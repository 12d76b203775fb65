// Row-owned FLCE passes: see rowwise.h. One block owns one row of a chunk:
// pass 1 reads the row once (online max / rescaled sum / sum of z, per thread
// in a fixed element order, then a fixed butterfly + in-order warp combine),
// giving LSE and the row loss; pass 2 reads it again and overwrites it with the
// gradient dL/dz. When the logits GEMM wrote per-tile statistics, pass 1
// combines those instead (one read of the row in all). In bf16 the gradient row is written into the first half of
// the fp32 row's bytes: tile t's bf16 bytes end where tile t's fp32 reads began,
// so one barrier between each tile's reads and writes makes it safe.
#include <cub/device/device_for.cuh>

#include <cfloat>
#include <climits>
#include <cuda_bf16.h>

#include "kernels/common/cuda_check.h"
#include "kernels/flce/rowwise.h"

namespace detfuse::flce {

namespace {

constexpr int ROW_THREADS = 512;

__global__ void count_targets_kernel(const int64_t* __restrict__ y, int64_t n, int64_t V, int64_t ignore_index,
                                     unsigned long long* counts) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  bool valid = false, bad = false;
  if (i < n) {
    int64_t t = y[i];
    valid = t >= 0 && t < V;
    bad = !valid && t != ignore_index;
    if (bad) atomicMin(reinterpret_cast<unsigned long long*>(counts + 2), static_cast<unsigned long long>(i));
  }
  // Integer counts: the order of the atomics cannot change the result.
  unsigned nv = __popc(__ballot_sync(0xffffffffu, valid));
  unsigned nb = __popc(__ballot_sync(0xffffffffu, bad));
  if (threadIdx.x % 32 == 0) {
    if (nv) atomicAdd(counts + 0, static_cast<unsigned long long>(nv));
    if (nb) atomicAdd(counts + 1, static_cast<unsigned long long>(nb));
  }
}

__global__ void init_counts_kernel(int64_t* counts) {
  counts[0] = 0;
  counts[1] = 0;
  counts[2] = INT64_MAX;
}

struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Fixed-order block reduction of (max, sum) and a plain sum; result in every thread.
__device__ void block_reduce(MaxSum& ms, float& sz) {
  __shared__ MaxSum s_ms[ROW_THREADS / 32];
  __shared__ float s_sz[ROW_THREADS / 32];
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, ms.m, o), __shfl_xor_sync(0xffffffffu, ms.s, o)};
    ms = combine(ms, other);
    sz += __shfl_xor_sync(0xffffffffu, sz, o);
  }
  int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    s_ms[warp] = ms;
    s_sz[warp] = sz;
  }
  __syncthreads();
  MaxSum acc = s_ms[0];
  float acc_z = s_sz[0];
  for (int w = 1; w < ROW_THREADS / 32; ++w) {
    acc = combine(acc, s_ms[w]);
    acc_z += s_sz[w];
  }
  ms = acc;
  sz = acc_z;
  __syncthreads();
}

struct RowConsts {
  int64_t V;
  int64_t ignore_index;
  float eps;       // label smoothing
  float zscale;    // lse_square_scale
  float softcap;
  float grad_output;
  int reduction;   // 0 mean, 1 sum, 2 none
};

template <bool BF16>
__global__ void __launch_bounds__(ROW_THREADS) row_kernel(const RowPass r, const RowConsts c) {
  const int row = blockIdx.x;
  const int64_t gi = r.row0 + row;
  const float* L = r.L + int64_t(row) * r.ldl;
  const int V = int(c.V);
  const int64_t t = r.y[gi];
  const bool valid = t >= 0 && t < c.V;

  float lse;
  if (r.lse_in) {
    lse = r.lse_in[gi];
  } else {
    MaxSum ms{-INFINITY, 0.f};
    float sz = 0.f;
    if (r.stats) {
      // Combine the logits epilogue's per-tile statistics, each thread a fixed
      // strided subset in order, then the fixed block reduction.
      const float4* st = reinterpret_cast<const float4*>(r.stats) + int64_t(row) * r.stats_cols;
      for (int64_t c = threadIdx.x; c < r.stats_cols; c += ROW_THREADS) {
        float4 v = st[c];
        ms = combine(ms, MaxSum{v.x, v.y});
        sz += v.z;
      }
    } else {
      for (int j = threadIdx.x * 4; j < V; j += ROW_THREADS * 4) {
        float4 v = *reinterpret_cast<const float4*>(L + j);
        float z[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (j + q < V) {
            if (z[q] > ms.m) {
              ms.s = ms.s * expf(ms.m - z[q]) + 1.f;
              ms.m = z[q];
            } else {
              ms.s += expf(z[q] - ms.m);
            }
            sz += z[q];
          }
        }
      }
    }
    block_reduce(ms, sz);
    lse = ms.m + logf(ms.s);
    if (threadIdx.x == 0) {
      if (r.lse_out) r.lse_out[gi] = lse;
      if (r.loss_rows) {
        float loss = 0.f;
        if (valid) {
          float zt = L[t];
          loss = lse - (1.f - c.eps) * zt - (c.eps / float(c.V)) * sz + c.zscale * lse * lse;
        }
        r.loss_rows[gi] = loss;
      }
    }
    __syncthreads();  // the target logit is read before pass 2 overwrites the row
  }
  if (!r.write_grad) return;

  // Gradient coefficient of this row.
  float coef = 0.f;
  if (valid) {
    coef = c.grad_output;
    if (c.reduction == 0) {
      int64_t nv = r.counts[0];
      coef = nv > 0 ? coef / float(nv) : 0.f;
    } else if (c.reduction == 2) {
      coef *= r.dloss[gi];
    }
  }
  const float pscale = 1.f + 2.f * c.zscale * lse;
  const float smooth = c.eps / float(c.V);
  const int ldl = int(r.ldl);
  for (int base = 0; base < ldl; base += ROW_THREADS * 4) {
    int j = base + threadIdx.x * 4;
    float g[4] = {0.f, 0.f, 0.f, 0.f};
    if (j < ldl && coef != 0.f) {
      float4 v = *reinterpret_cast<const float4*>(L + j);
      float z[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        int jj = j + q;
        if (jj < V) {
          float d = pscale * expf(z[q] - lse) - smooth - (jj == t ? 1.f - c.eps : 0.f);
          if (c.softcap > 0.f) {
            float u = z[q] / c.softcap;
            d *= 1.f - u * u;
          }
          g[q] = coef * d;
        }
      }
    }
    if constexpr (BF16) {
      __syncthreads();  // every thread has read this tile's fp32 bytes
      if (j < ldl) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(g[0], g[1]);
        __nv_bfloat162 hi = __floats2bfloat162_rn(g[2], g[3]);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&lo);
        packed.y = *reinterpret_cast<uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(reinterpret_cast<__nv_bfloat16*>(const_cast<float*>(L)) + j) = packed;
      }
    } else {
      if (j < ldl) *reinterpret_cast<float4*>(const_cast<float*>(L) + j) = make_float4(g[0], g[1], g[2], g[3]);
    }
  }
}

__global__ void __launch_bounds__(1024) reduce_loss_kernel(const float* __restrict__ rows, int64_t n,
                                                           const int64_t* counts, int mean, float* out) {
  __shared__ double s[1024];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += 1024) acc += double(rows[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 512; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double total = s[0];
    if (mean) {
      int64_t nv = counts[0];
      total = nv > 0 ? total / double(nv) : 0.0;
    }
    *out = float(total);
  }
}

struct SumPartials {
  float* dst;
  const float* partials;
  int splits;
  int64_t stride;
  bool first;
  __device__ void operator()(int64_t i) const {
    float acc = first ? 0.f : dst[i];
    for (int s = 0; s < splits; ++s) acc += partials[s * stride + i];
    dst[i] = acc;
  }
};

__global__ void to_bf16_kernel(__nv_bfloat16* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

}  // namespace

void launch_count_targets(const FlceProblem& p, const int64_t* y, int64_t* counts, cudaStream_t stream) {
  init_counts_kernel<<<1, 1, 0, stream>>>(counts);
  DETFUSE_CHECK_LAUNCH();
  int blocks = int((p.N + 255) / 256);
  count_targets_kernel<<<blocks, 256, 0, stream>>>(y, p.N, p.V, p.ignore_index,
                                                   reinterpret_cast<unsigned long long*>(counts));
  DETFUSE_CHECK_LAUNCH();
}

void launch_row_pass(const FlceProblem& p, const RowPass& r, cudaStream_t stream) {
  if (r.rows <= 0) return;
  if (r.ldl % 8 != 0 || r.ldl < p.V) throw Error("row pass: logits leading dimension must be >= V and a multiple of 8");
  RowConsts c{p.V,
              p.ignore_index,
              float(p.label_smoothing),
              float(p.lse_square_scale),
              float(p.softcap),
              float(p.grad_output),
              p.reduction == Reduction::mean ? 0 : p.reduction == Reduction::sum ? 1 : 2};
  if (r.grad_bf16)
    row_kernel<true><<<r.rows, ROW_THREADS, 0, stream>>>(r, c);
  else
    row_kernel<false><<<r.rows, ROW_THREADS, 0, stream>>>(r, c);
  DETFUSE_CHECK_LAUNCH();
}

void launch_reduce_loss(const FlceProblem& p, const float* loss_rows, const int64_t* counts, float* loss,
                        cudaStream_t stream) {
  reduce_loss_kernel<<<1, 1024, 0, stream>>>(loss_rows, p.N, counts, p.reduction == Reduction::mean ? 1 : 0, loss);
  DETFUSE_CHECK_LAUNCH();
}

void launch_sum_partials(float* dst, const float* partials, int splits, int64_t stride, int64_t count, bool first,
                         cudaStream_t stream) {
  if (count <= 0) return;
  DETFUSE_CUDA_CHECK(cub::DeviceFor::Bulk(count, SumPartials{dst, partials, splits, stride, first}, stream));
}

void launch_to_bf16(void* dst, const float* src, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  int blocks = int(std::min<int64_t>((count + 255) / 256, 132 * 16));
  to_bf16_kernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), src, count);
  DETFUSE_CHECK_LAUNCH();
}

}  // namespace detfuse::flce
