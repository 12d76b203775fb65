// Row-owned FLCE passes: see rowwise.h. One block owns one row of a chunk:
// pass 1 reads the row once (online max / rescaled sum / sum of z, per thread
// in a fixed element order, then a fixed butterfly + in-order warp combine),
// giving LSE and the row loss; pass 2 reads it again and overwrites it with the
// gradient dL/dz. When the logits GEMM wrote per-tile statistics, pass 1
// combines those instead (one read of the row in all). In bf16 the gradient row is written into the first half of
// the fp32 row's bytes: tile t's bf16 bytes end where tile t's fp32 reads began,
// so one barrier between each tile's reads and writes makes it safe.
// bf16 logits (lg16 variants, row_kernel_lg16): the same two passes over a bf16
// row, with the target and two best logits recomputed exactly (rowwise.h); the
// gradient overwrites each thread's own 8 logits, so no barrier is needed.
//
// fp32 inputs (the `fma` engine) take row_kernel_f32 and reduce_loss_f32
// instead: the same algorithm with the portable arithmetic and explicit
// reduction order of rowwise_portable.h (the `portable` level).
//
// Block reductions are cub::BlockReduce with a fixed block size and the default
// algorithm (BLOCK_REDUCE_WARP_REDUCTIONS: a shfl-down tree in each warp, then
// thread 0 adds the warp aggregates in warp order): one fixed order for a given
// block size, whatever the device or its SM count. Every grid-stride loop here
// is elementwise (no reduction crosses its partition), so the grid size taken
// from the device cannot change any bit.
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_for.cuh>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cuda_bf16.h>
#include <map>
#include <mutex>
#include <type_traits>

#include "kernels/common/cuda_check.h"
#include "kernels/flce/rowwise.h"
#include "kernels/flce/rowwise_portable.h"

namespace detfuse::flce {

int grid_stride_blocks() {
  // Per device, read once: 16 blocks of 256 threads per SM fill it. The
  // kernels that use it are elementwise, so the count changes no bit.
  static std::mutex mu;
  static std::map<int, int> by_device;
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_device.find(dev);
  if (it != by_device.end()) return it->second;
  int sms = 0;
  DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return by_device[dev] = std::max(sms, 1) * 16;
}

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

// A row's running statistics: max m, sum of exp(z - m), sum of z.
struct RowStat {
  float m, s, sz;
};
struct CombineRowStat {
  __device__ __forceinline__ RowStat operator()(const RowStat& a, const RowStat& b) const {
    const MaxSum ms = combine(MaxSum{a.m, a.s}, MaxSum{b.m, b.s});
    return {ms.m, ms.s, a.sz + b.sz};
  }
};

// bf16 logits: the same, and the two best columns (value descending, then
// column ascending: a total order, so the pair is the same whatever the
// reduction tree), whose logits the row pass recomputes exactly.
struct RowStatTop2 {
  float m, s, sz;
  int j;       // first column holding the max (INT_MAX: none)
  float m2;    // the second best value (-inf: none)
  int j2;
};
__device__ __forceinline__ bool better(float v, int j, float w, int k) { return v > w || (v == w && j < k); }
struct CombineRowStatTop2 {
  __device__ __forceinline__ RowStatTop2 operator()(const RowStatTop2& a, const RowStatTop2& b) const {
    const MaxSum ms = combine(MaxSum{a.m, a.s}, MaxSum{b.m, b.s});
    RowStatTop2 r;
    r.s = ms.s;
    r.sz = a.sz + b.sz;
    if (better(a.m, a.j, b.m, b.j)) {  // a's best first; second: a's second or b's best
      r.m = a.m, r.j = a.j;
      if (better(a.m2, a.j2, b.m, b.j)) r.m2 = a.m2, r.j2 = a.j2;
      else r.m2 = b.m, r.j2 = b.j;
    } else {
      r.m = b.m, r.j = b.j;
      if (better(a.m, a.j, b.m2, b.j2)) r.m2 = a.m, r.j2 = a.j;
      else r.m2 = b.m2, r.j2 = b.j2;
    }
    return r;  // r.m == ms.m: the sum is relative to the best value
  }
};

// Fixed-order block reduction (cub::BlockReduce) of every thread's S; the
// result in every thread. Ends with a barrier, so `tmp` may be reused.
template <class S, class Op>
__device__ S block_reduce(S st, typename cub::BlockReduce<S, ROW_THREADS>::TempStorage& tmp) {
  __shared__ S s_out;
  S all = cub::BlockReduce<S, ROW_THREADS>(tmp).Reduce(st, Op{});
  if (threadIdx.x == 0) s_out = all;
  __syncthreads();
  all = s_out;
  __syncthreads();
  return all;
}
using RowReduce = cub::BlockReduce<RowStat, ROW_THREADS>;
using RowReduceTop2 = cub::BlockReduce<RowStatTop2, ROW_THREADS>;

struct RowConsts {
  int64_t V;
  int64_t ignore_index;
  float eps;       // label smoothing
  float zscale;    // lse_square_scale
  float softcap;
  float grad_output;
  int reduction;   // 0 mean, 1 sum, 2 none
  int bn_shift;    // exp16: log2(stats_bn)
};

template <bool BF16>
__global__ void __launch_bounds__(ROW_THREADS) row_kernel(const RowPass r, const RowConsts c) {
  const int row = blockIdx.x;
  const int64_t gi = r.row0 + row;
  const float* L = r.L + int64_t(row) * r.ldl;
  const int V = int(c.V);
  const int64_t t = r.y[gi];
  const bool valid = t >= 0 && t < c.V;

  __shared__ typename RowReduce::TempStorage tmp;
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
    const RowStat all = block_reduce<RowStat, CombineRowStat>(RowStat{ms.m, ms.s, sz}, tmp);
    ms = MaxSum{all.m, all.s};
    sz = all.sz;
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

// The row pass over bf16 e = exp(z - m_tile) (RowPass::exp16). LSE and loss
// come from the epilogue's per-tile statistics (combined in the same fixed
// order as row_kernel's), the target logit from the statistics of its tile;
// the gradient is written over e in place (each thread its own 8 columns).
//
// Without softcap (SOFTCAP false) a column j other than the target gets
//   dz_j = fma(e_j, A_tile, B),  A_tile = (coef pscale) exp(m_tile - lse),  B = -(coef eps/V)
// (one rounding fewer than coef ((pscale (e_j a)) - eps/V): session 11), the
// target the row constant coef (pscale exp(z_y - lse) - eps/V - (1 - eps)).
// A group of 8 columns is converted by shifts and masks (bf16 is the top half
// of an fp32), 8 FFMAs and 4 bf16x2 packs; only the group holding the target
// and a group crossing V (the tail) take the per-column selects after it. The
// kernel was issue-bound (session 10's ncu: 9.7 cycles an issued instruction,
// DRAM 61%), so the instructions per element are what this removes.
// With softcap (SOFTCAP true): the per-column arithmetic of session 9, the
// factor 1 - (z/cap)^2 with z from e (the softcap test hoisted to the launch).
template <bool SOFTCAP>
__global__ void __launch_bounds__(ROW_THREADS) row_kernel_exp16(const RowPass r, const RowConsts c) {
  const int row = blockIdx.x;
  const int64_t gi = r.row0 + row;
  auto* E = reinterpret_cast<__nv_bfloat16*>(const_cast<float*>(r.L)) + int64_t(row) * r.ldl;
  const float4* st = reinterpret_cast<const float4*>(r.stats) + int64_t(row) * r.stats_cols;
  const int V = int(c.V);
  const int64_t t = r.y[gi];
  const bool valid = t >= 0 && t < c.V;
  const float zt = valid ? st[t / r.stats_bn].w : 0.f;

  __shared__ typename RowReduce::TempStorage tmp;
  float lse;
  if (r.lse_in) {
    lse = r.lse_in[gi];
  } else {
    MaxSum ms{-INFINITY, 0.f};
    float sz = 0.f;
    for (int64_t k = threadIdx.x; k < r.stats_cols; k += ROW_THREADS) {
      float4 v = st[k];
      ms = combine(ms, MaxSum{v.x, v.y});
      sz += v.z;
    }
    const RowStat all = block_reduce<RowStat, CombineRowStat>(RowStat{ms.m, ms.s, sz}, tmp);
    lse = all.m + logf(all.s);
    if (threadIdx.x == 0) {
      if (r.lse_out) r.lse_out[gi] = lse;
      if (r.loss_rows)
        r.loss_rows[gi] =
            valid ? lse - (1.f - c.eps) * zt - (c.eps / float(c.V)) * all.sz + c.zscale * lse * lse : 0.f;
    }
  }
  if (!r.write_grad) return;

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
  const int ldl = int(r.ldl);
  // 8 columns (16 bytes) a group; stats_bn is a multiple of 8, so a group lies
  // in one tile. A thread loads kInFlight groups (kStride columns apart)
  // before it computes and stores any: the chunk is written in place, so the
  // compiler cannot move a later load above an earlier store, and with one
  // load in flight a thread the pass ran at ~2.1 TB/s on the H200 (latency,
  // not bandwidth).
  constexpr int kInFlight = 4;
  constexpr int kStride = ROW_THREADS * 8;
  if (coef == 0.f) {  // the whole row (uniform in the block): +0 everywhere, nothing read
    for (int j = threadIdx.x * 8; j < ldl; j += kStride) *reinterpret_cast<uint4*>(E + j) = make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  const float pscale = 1.f + 2.f * c.zscale * lse;
  const float smooth = c.eps / float(c.V);
  const int ti = int(t);                  // valid: coef != 0
  const float cp = coef * pscale;         // A_tile = cp exp(m_tile - lse)
  const float B = -(coef * smooth);
  const float gt = coef * (pscale * expf(zt - lse) - smooth - (1.f - c.eps));  // the target's dz
  for (int j0 = threadIdx.x * 8; j0 < ldl; j0 += kStride * kInFlight) {
    uint4 raw[kInFlight];
    float mt[kInFlight];  // each group's m_tile, loaded here too: the stores below may alias it for the compiler
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int j = j0 + u * kStride;
      raw[u] = j < V ? __ldcs(reinterpret_cast<const uint4*>(E + j)) : make_uint4(0u, 0u, 0u, 0u);
      mt[u] = j < V ? st[j >> c.bn_shift].x : 0.f;  // its tile (stats_bn a power of two: launch_row_pass)
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int j = j0 + u * kStride;
      if (j >= ldl) break;
      float g[8];
      if constexpr (!SOFTCAP) {
        const float A = cp * expf(mt[u] - lse);  // (coef pscale) exp(m_tile - lse)
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          g[2 * q] = fmaf(__uint_as_float(w[q] << 16), A, B);              // low bf16 of the word
          g[2 * q + 1] = fmaf(__uint_as_float(w[q] & 0xffff0000u), A, B);  // high bf16
        }
        if (j + 8 > V || unsigned(ti - j) < 8u) {  // the tail group (zeros from V on), the target's group
#pragma unroll
          for (int q = 0; q < 8; ++q) g[q] = j + q < V ? (j + q == ti ? gt : g[q]) : 0.f;
        }
      } else {
        const float a = expf(mt[u] - lse);  // exp(m_tile - lse)
        const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw[u]);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int jj = j + q;
          g[q] = 0.f;
          if (jj < V) {
            const float ej = __bfloat162float(e[q]);
            // The target's probability from its exact logit; the others from e.
            const float pj = jj == t ? expf(zt - lse) : ej * a;
            float d = pscale * pj - smooth - (jj == t ? 1.f - c.eps : 0.f);
            // z from e (2^-9 relative in e is 2^-9 absolute in z); e == 0
            // (z more than ~92 below the tile max, only with caps above 46):
            // z is not known, its bound is used (the factor lies in [0, 1]).
            const float z = jj == t ? zt : ej > 0.f ? mt[u] + logf(ej) : fmaxf(-c.softcap, mt[u] - 92.f);
            const float u2 = z / c.softcap;
            d *= 1.f - u2 * u2;
            g[q] = coef * d;
          }
        }
      }
      uint4 out;
      __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
      for (int q = 0; q < 4; ++q) o[q] = __floats2bfloat162_rn(g[2 * q], g[2 * q + 1]);
      *reinterpret_cast<uint4*>(E + j) = out;  // columns [V, ldl) become zeros
    }
  }
}

// Exact logit of column j of global row gi: the fp32 dot product of the bf16
// rows X[gi] and W[j] (threads stride over D in a fixed order, then the fixed
// block sum), softcap applied. Three at once: the target's and the two best.
struct Sum3 {
  __device__ __forceinline__ float4 operator()(const float4& a, const float4& b) const {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, 0.f);
  }
};
using DotReduce = cub::BlockReduce<float4, ROW_THREADS>;

__device__ __forceinline__ float capped(float v, float cap) { return cap > 0.f ? cap * tanhf(v * (1.f / cap)) : v; }

__global__ void __launch_bounds__(ROW_THREADS) row_kernel_lg16(const RowPass r, const RowConsts c, int64_t D) {
  __shared__ union {
    typename RowReduceTop2::TempStorage row;
    typename DotReduce::TempStorage dot;
  } tmp;
  __shared__ float s_exact[3];  // {target logit, best, second best}
  __shared__ float s_lse;
  const int row = blockIdx.x;
  const int64_t gi = r.row0 + row;
  auto* L = reinterpret_cast<__nv_bfloat16*>(const_cast<float*>(r.L)) + int64_t(row) * r.ldl;
  const int V = int(c.V);
  const int ldl = int(r.ldl);
  const int64_t t = r.y[gi];
  const bool valid = t >= 0 && t < c.V;

  float coef = 0.f;  // gradient coefficient of this row
  if (valid) {
    coef = c.grad_output;
    if (c.reduction == 0) {
      int64_t nv = r.counts[0];
      coef = nv > 0 ? coef / float(nv) : 0.f;
    } else if (c.reduction == 2) {
      coef *= r.dloss[gi];
    }
  }
  const bool need_stats = !r.lse_in || (r.write_grad && coef != 0.f);
  float zt = 0.f, z1 = 0.f, z2 = 0.f, lse = 0.f;
  int j1 = INT_MAX, j2 = INT_MAX;
  if (need_stats) {
    // Pass 1: online (max, sum exp, sum z, the two best columns) over this
    // thread's columns in increasing order, 8 bf16 (16 bytes) at a time. At 2
    // bytes a logit the per-element exponentials are __expf (MUFU ex2, a few
    // fp32 ulps: nothing beside the 2^-9 of a bf16 logit), so the pass stays
    // bound by memory, not by the special-function units.
    RowStatTop2 st{-INFINITY, 0.f, 0.f, INT_MAX, -INFINITY, INT_MAX};
    for (int j = threadIdx.x * 8; j < V; j += ROW_THREADS * 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(L + j);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const float z = q % 2 == 0 ? __low2float(h[q / 2]) : __high2float(h[q / 2]);
        if (j + q < V) {
          if (z > st.m) {  // columns increase: a tie keeps the earlier column first
            st.s = st.s * __expf(st.m - z) + 1.f;
            st.m2 = st.m, st.j2 = st.j;
            st.m = z, st.j = j + q;
          } else {
            st.s += __expf(z - st.m);
            if (z > st.m2) st.m2 = z, st.j2 = j + q;
          }
          st.sz += z;
        }
      }
    }
    const RowStatTop2 all = block_reduce<RowStatTop2, CombineRowStatTop2>(st, tmp.row);
    j1 = all.j;
    j2 = all.j2;  // INT_MAX when V == 1

    // The exact target and two best logits.
    const auto* x = static_cast<const __nv_bfloat16*>(r.X) + gi * D;
    const auto* W = static_cast<const __nv_bfloat16*>(r.W);
    const auto* wt = W + (valid ? t : 0) * D;
    const auto* w1 = W + int64_t(j1) * D;
    const auto* w2 = W + int64_t(j2 < V ? j2 : j1) * D;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int64_t d = threadIdx.x; d < D; d += ROW_THREADS) {
      const float xv = __bfloat162float(x[d]);
      acc.x = fmaf(xv, __bfloat162float(wt[d]), acc.x);
      acc.y = fmaf(xv, __bfloat162float(w1[d]), acc.y);
      acc.z = fmaf(xv, __bfloat162float(w2[d]), acc.z);
    }
    const float4 dots = DotReduce(tmp.dot).Reduce(acc, Sum3{});
    if (threadIdx.x == 0) {
      const float z_t = capped(dots.x, c.softcap), e1 = capped(dots.y, c.softcap), e2 = capped(dots.z, c.softcap);
      // all.s = sum_j exp(zb_j - zb_1) holds exp(0) = 1 for the best column
      // and exp(zb_2 - zb_1) for the second: take both out, rescale the rest
      // to the exact best logit, put both back exactly.
      float rest = all.s - 1.f;
      float back = 1.f;
      if (j2 < V) {
        rest -= expf(all.m2 - all.m);
        back += expf(e2 - e1);
      }
      const float ssum = fmaxf(rest, 0.f) * expf(all.m - e1) + back;
      const float l = r.lse_in ? r.lse_in[gi] : e1 + logf(ssum);
      s_exact[0] = z_t;
      s_exact[1] = e1;
      s_exact[2] = e2;
      s_lse = l;
      if (!r.lse_in) {
        if (r.lse_out) r.lse_out[gi] = l;
        if (r.loss_rows) {
          r.loss_rows[gi] = valid ? l - (1.f - c.eps) * z_t - (c.eps / float(c.V)) * all.sz + c.zscale * l * l : 0.f;
        }
      }
    }
    __syncthreads();
    zt = s_exact[0];
    z1 = s_exact[1];
    z2 = s_exact[2];
    lse = s_lse;
  }
  if (!r.write_grad) return;

  // Pass 2: G = dL/dz over this thread's own 8 columns, written in place as
  // bf16; columns [V, ldl) get zeros.
  const float pscale = 1.f + 2.f * c.zscale * lse;
  const float smooth = c.eps / float(c.V);
  for (int j = threadIdx.x * 8; j < ldl; j += ROW_THREADS * 8) {
    float g[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (coef != 0.f) {
      const uint4 raw = *reinterpret_cast<const uint4*>(L + j);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int jj = j + q;
        if (jj < V) {
          float z = q % 2 == 0 ? __low2float(h[q / 2]) : __high2float(h[q / 2]);
          if (jj == j1) z = z1;
          if (jj == j2) z = z2;
          if (jj == t) z = zt;
          float d = pscale * __expf(z - lse) - smooth - (jj == t ? 1.f - c.eps : 0.f);
          if (c.softcap > 0.f) {
            const float u = z / c.softcap;
            d *= 1.f - u * u;
          }
          g[q] = coef * d;
        }
      }
    }
    uint4 out;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int q = 0; q < 4; ++q) o[q] = __floats2bfloat162_rn(g[2 * q], g[2 * q + 1]);
    *reinterpret_cast<uint4*>(L + j) = out;
  }
}

// fp32 inputs (the `fma` engine): the portable row pass. The same two passes
// as row_kernel<false>, with the arithmetic of rowwise_portable.h (portable
// exp/log, explicitly rounded steps) and its explicit reduction tree in shared
// memory instead of cub::BlockReduce, so reference/emulate_flce.cpp reproduces
// every bit. No fused statistics, no bf16 gradient.
__global__ void __launch_bounds__(portable::kRowThreads) row_kernel_f32(const RowPass r, const RowConsts c) {
  namespace pp = portable;
  constexpr int NT = pp::kRowThreads;
  __shared__ pp::RowStat red[NT];
  const int tid = threadIdx.x;
  const int row = blockIdx.x;
  const int64_t gi = r.row0 + row;
  float* L = const_cast<float*>(r.L) + int64_t(row) * r.ldl;
  const int V = int(c.V);
  const int64_t t = r.y[gi];
  const bool valid = t >= 0 && t < c.V;
  const pp::RowOptions o{c.eps, c.zscale, c.softcap, c.grad_output, float(c.V)};

  float lse;
  if (r.lse_in) {
    lse = r.lse_in[gi];
  } else {
    pp::RowStat st = pp::row_init();
    for (int j = tid * 4; j < V; j += NT * 4) {
      const float4 v = *reinterpret_cast<const float4*>(L + j);
      const float z[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (j + q < V) pp::row_push(st, z[q]);
    }
    red[tid] = st;
    __syncthreads();
#pragma unroll
    for (int stride = NT / 2; stride > 0; stride >>= 1) {
      if (tid < stride) red[tid] = pp::row_combine(red[tid], red[tid + stride]);
      __syncthreads();
    }
    const pp::RowStat all = red[0];
    lse = pp::row_lse(all);
    if (tid == 0) {
      if (r.lse_out) r.lse_out[gi] = lse;
      if (r.loss_rows) r.loss_rows[gi] = valid ? pp::row_loss(o, lse, L[t], all.sz) : 0.f;
    }
    __syncthreads();  // the target logit is read before pass 2 overwrites the row
  }
  if (!r.write_grad) return;

  const float coef = pp::row_coef(o, valid, c.reduction, valid && c.reduction == 0 ? r.counts[0] : 0,
                                  valid && c.reduction == 2 ? r.dloss[gi] : 0.f);
  const int ldl = int(r.ldl);
  for (int j = tid * 4; j < ldl; j += NT * 4) {
    float g[4] = {0.f, 0.f, 0.f, 0.f};
    if (coef != 0.f) {
      const float4 v = *reinterpret_cast<const float4*>(L + j);
      const float z[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (j + q < V) g[q] = pp::row_grad(o, z[q], j + q == t, lse, coef);
    }
    *reinterpret_cast<float4*>(L + j) = make_float4(g[0], g[1], g[2], g[3]);
  }
}

// fp32 inputs: the loss reduction in the explicit order of rowwise_portable.h
// (double, strided per thread, then a halving tree).
__global__ void __launch_bounds__(portable::kLossThreads) reduce_loss_f32(const float* __restrict__ rows, int64_t n,
                                                                           const int64_t* counts, int mean,
                                                                           float* out) {
  constexpr int NT = portable::kLossThreads;
  __shared__ double red[NT];
  const int tid = threadIdx.x;
  double acc = 0.0;
  for (int64_t i = tid; i < n; i += NT) acc = __dadd_rn(acc, double(rows[i]));
  red[tid] = acc;
  __syncthreads();
#pragma unroll
  for (int stride = NT / 2; stride > 0; stride >>= 1) {
    if (tid < stride) red[tid] = __dadd_rn(red[tid], red[tid + stride]);
    __syncthreads();
  }
  if (tid == 0) {
    double total = red[0];
    if (mean) {
      const int64_t nv = counts[0];
      total = nv > 0 ? __ddiv_rn(total, double(nv)) : 0.0;
    }
    *out = __double2float_rn(total);
  }
}

__global__ void __launch_bounds__(1024) reduce_loss_kernel(const float* __restrict__ rows, int64_t n,
                                                           const int64_t* counts, int mean, float* out) {
  using LossReduce = cub::BlockReduce<double, 1024>;
  __shared__ typename LossReduce::TempStorage tmp;
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += 1024) acc += double(rows[i]);
  const double sum = LossReduce(tmp).Sum(acc);  // fixed order (see the file comment); valid in thread 0
  if (threadIdx.x == 0) {
    double total = sum;
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

template <class T>
__global__ void scale_unless_one_kernel(T* __restrict__ data, int64_t n, const float* __restrict__ scale) {
  const float g = *scale;
  if (g == 1.f) return;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    if constexpr (std::is_same_v<T, float>)
      data[i] = data[i] * g;
    else
      data[i] = __float2bfloat16_rn(__bfloat162float(data[i]) * g);
  }
}

}  // namespace

void launch_scale_unless_one(void* data, int64_t n, DType dtype, const float* scale, cudaStream_t stream) {
  if (n <= 0) return;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 4096));
  if (dtype == DType::f32)
    scale_unless_one_kernel<float><<<blocks, threads, 0, stream>>>(static_cast<float*>(data), n, scale);
  else
    scale_unless_one_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n,
                                                                            scale);
  DETFUSE_CHECK_LAUNCH();
}

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
              p.reduction == Reduction::mean ? 0 : p.reduction == Reduction::sum ? 1 : 2,
              -1};
  if (r.exp16) {
    if (!r.stats || r.stats_bn < 8 || (r.stats_bn & (r.stats_bn - 1)) != 0)
      throw Error("row pass: bf16 exp(z - m_tile) needs the per-tile statistics and a tile width that is a power of "
                  "two, at least 8");
    if (r.write_grad && !r.grad_bf16) throw Error("row pass: bf16 exp(z - m_tile) takes a bf16 gradient in place");
    c.bn_shift = __builtin_ctz(unsigned(r.stats_bn));
    if (c.softcap > 0.f)
      row_kernel_exp16<true><<<r.rows, ROW_THREADS, 0, stream>>>(r, c);
    else
      row_kernel_exp16<false><<<r.rows, ROW_THREADS, 0, stream>>>(r, c);
  } else if (r.logits_bf16) {
    if (!r.X || !r.W) throw Error("row pass: bf16 logits need X and W (the exact target and maximum logits)");
    if (r.write_grad && !r.grad_bf16) throw Error("row pass: bf16 logits take a bf16 gradient in place");
    if (r.stats) throw Error("row pass: bf16 logits with fused row statistics are not implemented");
    row_kernel_lg16<<<r.rows, ROW_THREADS, 0, stream>>>(r, c, p.D);
  } else if (p.dtype == DType::f32 && !r.stats && !r.grad_bf16) {
    row_kernel_f32<<<r.rows, portable::kRowThreads, 0, stream>>>(r, c);  // portable (rowwise_portable.h)
  } else if (r.grad_bf16)
    row_kernel<true><<<r.rows, ROW_THREADS, 0, stream>>>(r, c);
  else
    row_kernel<false><<<r.rows, ROW_THREADS, 0, stream>>>(r, c);
  DETFUSE_CHECK_LAUNCH();
}

void launch_reduce_loss(const FlceProblem& p, const float* loss_rows, const int64_t* counts, float* loss,
                        cudaStream_t stream) {
  if (p.dtype == DType::f32)  // portable order (rowwise_portable.h)
    reduce_loss_f32<<<1, portable::kLossThreads, 0, stream>>>(loss_rows, p.N, counts,
                                                              p.reduction == Reduction::mean ? 1 : 0, loss);
  else
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
  int blocks = int(std::min<int64_t>((count + 255) / 256, int64_t(grid_stride_blocks())));
  to_bf16_kernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), src, count);
  DETFUSE_CHECK_LAUNCH();
}

}  // namespace detfuse::flce
