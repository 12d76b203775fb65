// The `fma` attention engine: exact fp32 arithmetic on CUDA cores, any GPU.
// Forward (O, LSE) and backward (dQ, dK, dV) with the online softmax in tiles
// of Br queries x Bc keys; the Sq x Sk score matrix never exists in device
// memory (one Br x Bc tile lives in shared memory). Inputs are read in the
// problem dtype (fp32, or bf16 widened to fp32 in shared memory), every
// product and sum is fp32, outputs are stored in the problem dtype. This
// engine is the reference-grade path (fp32 errors of order 1e-7) and the
// portable fallback; it makes no attempt at tensor-core speed.
// Portable (the `portable` determinism level): every fp32 step is a named IEEE
// operation (kernels/common/portable_math.h: exp, log, tanh written once for
// device and host; __fmaf_rn / __fmul_rn / __fadd_rn / __fdiv_rn where a
// product meets a sum, so nvcc contracts nothing on its own) in the order
// this file fixes, and the lane reductions are xor butterflies, whose result
// is the same in every lane. reference/emulate_attention.cpp replays it on the
// CPU bit for bit (owning and partials; atomic adds land in any order).
// Softcap and the sliding window are run-time options:
// key blocks no row of a query block sees (window, causal) are skipped by both
// the forward and the backward, the edge blocks are masked per element.
//
// Kernels (T = element type, C = FmaConfig):
//   fwd_kernel       CTA per (query block, b*H+h): S = scale Q K^T, running max
//                    m, rescaled sum l and numerator acc; O = acc / l, LSE = m + log l.
//   bwd_kv_kernel    CTA per (key block, b*Hkv+hkv): walks the H/Hkv query heads
//                    of its group and the query blocks in a fixed order, keeps dK,
//                    dV in registers (deterministic without atomics); for the
//                    atomic / partials strategies it also emits each query
//                    block's dQ contribution (fp32 atomics / a partial slot).
//   bwd_dq_kernel    CTA per (query block, b*H+h): the `owning` dQ, walking the
//                    key blocks itself and recomputing S and dP.
// Thread layout: "row groups" of GR = NT/Br consecutive lanes own one query
// row (score phase, dQ phase, forward O); GC = NT/Bc lanes own one key row
// (dK/dV phase). Every group lies inside one warp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/attention/bwd_common.h"
#include "kernels/common/portable_math.h"
#include "kernels/common/error.h"
#include "kernels/registry.h"

namespace detfuse::attention::fma {

// Block Br x Bc, WARPS warps, head dim D.
template <int BR_, int BC_, int WARPS_, int D_>
struct FmaConfig {
  static constexpr int BR = BR_, BC = BC_, WARPS = WARPS_, D = D_;
  static constexpr int NT = WARPS * 32;
  static constexpr int GR = NT / BR;  // lanes per query row
  static constexpr int GC = NT / BC;  // lanes per key row
  static constexpr int LD = D + 1;    // padded smem row (floats): conflict-free column walks
  static constexpr int LS = BC + 1;   // padded score row
  static constexpr int SC = BC / GR;  // score columns per lane
  static constexpr int OR = D / GR;   // O / dQ columns per lane
  static constexpr int KR = D / GC;   // dK / dV columns per lane

  static_assert(NT % BR == 0 && GR >= 1 && GR <= 32 && (GR & (GR - 1)) == 0, "lanes per query row: power of 2, <= 32");
  static_assert(NT % BC == 0 && GC >= 1 && GC <= 32 && (GC & (GC - 1)) == 0, "lanes per key row: power of 2, <= 32");
  static_assert(BC % GR == 0 && D % GR == 0 && D % GC == 0, "columns split evenly over a row group");

  // Forward: Q [BR][LD], K, V [BC][LD], P [BR][LS].
  static constexpr size_t fwd_smem = size_t((BR + 2 * BC) * LD + BR * LS) * sizeof(float);
  // Backward: K, V [BC][LD], Q, dO [BR][LD], P, dS [BR][LS], lse, D [BR].
  static constexpr size_t bwd_smem = size_t(2 * (BC + BR) * LD + 2 * BR * LS + 2 * BR) * sizeof(float);
};

enum class DqMode { none, atomic, partials };

struct Params {
  const void* Q;
  const void* K;
  const void* V;
  const void* dO;
  const float* lse_in;  // backward
  const float* Dvec;    // backward: rowsum(dO * O)
  void* O;              // forward
  float* lse;           // forward
  void* dQ;             // owning
  void* dK;
  void* dV;
  float* dq_acc;  // atomic: [B,H,Sq,d] fp32
  float* slab;    // partials: [uc][kc][G*Sq*d]
  int64_t B, H, Hkv, Sq, Sk;
  float scale;
  bool causal;
  float softcap;   // 0: off; else s = softcap * tanh(s / softcap)
  int64_t window;  // 0: off; else query i sees key j only if j > i + Sk - Sq - window
  int64_t n_blocks;   // query (or key) blocks per head
  int64_t kb_begin;   // bwd_kv: first key block of this launch
  int64_t kb_count;   // bwd_kv: key blocks in this launch (grid = kb_count * units)
  int64_t unit_begin; // bwd_kv: first (b, kv head) unit of this launch
};

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// rows x D elements of src (row stride D) into smem (row stride LD) as fp32;
// rows at or beyond `valid` are zero-filled.
template <class T, class C>
__device__ __forceinline__ void load_tile(float* __restrict__ dst, const T* __restrict__ src, int rows, int64_t valid) {
  for (int idx = threadIdx.x; idx < rows * C::D; idx += C::NT) {
    const int r = idx / C::D, k = idx % C::D;
    dst[r * C::LD + k] = r < valid ? to_f(src[int64_t(r) * C::D + k]) : 0.f;
  }
}

template <int G>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v = pm::max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v = pm::add(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Number of keys any row of query rows [q0, q0+rows) can see (causal: a prefix).
__device__ __forceinline__ int64_t visible_keys(const Params& p, int64_t q0, int64_t rows) {
  if (!p.causal) return p.Sk;
  const int64_t last = q0 + rows - 1 + (p.Sk - p.Sq) + 1;  // keys [0, last) for the block's last row
  return last < 0 ? 0 : (last < p.Sk ? last : p.Sk);
}

// First key of the first key block of BC that a row >= q0 can see (window:
// the first row's window starts there; else 0).
template <int BC>
__device__ __forceinline__ int64_t first_key_block(const Params& p, int64_t q0) {
  if (p.window <= 0) return 0;
  const int64_t k = q0 + (p.Sk - p.Sq) - p.window + 1;  // the first key row q0 sees
  return k <= 0 ? 0 : k / BC * BC;
}

// Query i sees key j (both in range): causal and window bounds.
__device__ __forceinline__ bool sees(const Params& p, int64_t i, int64_t j) {
  const int64_t diag = i + (p.Sk - p.Sq);
  return (!p.causal || j <= diag) && (p.window <= 0 || j > diag - p.window);
}

// A scaled score through the softcap (none when softcap = 0).
__device__ __forceinline__ float cap_score(const Params& p, float s) {
  return p.softcap > 0.f ? pm::mul(p.softcap, pm::tanh(pm::div(s, p.softcap))) : s;
}

template <class T, class C>
__global__ void __launch_bounds__(C::NT) fwd_kernel(const Params p) {
  extern __shared__ float smem[];
  float* Qs = smem;                 // [BR][LD]
  float* Ks = Qs + C::BR * C::LD;   // [BC][LD]
  float* Vs = Ks + C::BC * C::LD;   // [BC][LD]
  float* Ps = Vs + C::BC * C::LD;   // [BR][LS]

  const int64_t qb = blockIdx.x % p.n_blocks, bh = blockIdx.x / p.n_blocks;
  const int64_t b = bh / p.H, h = bh % p.H, hkv = h / (p.H / p.Hkv);
  const int64_t q0 = qb * C::BR;
  const int64_t rows = p.Sq - q0 < C::BR ? p.Sq - q0 : int64_t(C::BR);
  const T* Q = static_cast<const T*>(p.Q) + (bh * p.Sq + q0) * C::D;
  const T* K = static_cast<const T*>(p.K) + (b * p.Hkv + hkv) * p.Sk * C::D;
  const T* V = static_cast<const T*>(p.V) + (b * p.Hkv + hkv) * p.Sk * C::D;

  const int r = threadIdx.x / C::GR, g = threadIdx.x % C::GR;
  const int64_t qi = q0 + r;
  float acc[C::OR];
#pragma unroll
  for (int j = 0; j < C::OR; ++j) acc[j] = 0.f;
  float m = kNegInf, l = 0.f;

  load_tile<T, C>(Qs, Q, C::BR, rows);
  const int64_t n_keys = visible_keys(p, q0, rows);
  for (int64_t k0 = first_key_block<C::BC>(p, q0); k0 < n_keys; k0 += C::BC) {
    __syncthreads();  // Q loaded; the previous tile's readers of Ks, Vs, Ps are done
    load_tile<T, C>(Ks, K + k0 * C::D, C::BC, p.Sk - k0);
    load_tile<T, C>(Vs, V + k0 * C::D, C::BC, p.Sk - k0);
    __syncthreads();
    float s[C::SC];
#pragma unroll
    for (int t = 0; t < C::SC; ++t) s[t] = 0.f;
    for (int k = 0; k < C::D; ++k) {
      const float q = Qs[r * C::LD + k];
#pragma unroll
      for (int t = 0; t < C::SC; ++t) s[t] = pm::fma(q, Ks[(g + C::GR * t) * C::LD + k], s[t]);
    }
    float mx = kNegInf;
#pragma unroll
    for (int t = 0; t < C::SC; ++t) {
      const int64_t kj = k0 + g + C::GR * t;
      const bool ok = qi < p.Sq && kj < p.Sk && sees(p, qi, kj);
      s[t] = ok ? cap_score(p, pm::mul(s[t], p.scale)) : kNegInf;
      mx = pm::max(mx, s[t]);
    }
    mx = group_max<C::GR>(mx);
    const float m_new = pm::max(m, mx);
    const float m_use = m_new == kNegInf ? 0.f : m_new;  // a row with nothing visible yet stays at 0
    const float alpha = pm::exp(pm::sub(m, m_use));       // m = -inf: 0
    float rs = 0.f;
#pragma unroll
    for (int t = 0; t < C::SC; ++t) {
      const float pv = pm::exp(pm::sub(s[t], m_use));  // masked: exp(-inf) = 0
      rs = pm::add(rs, pv);
      Ps[r * C::LS + g + C::GR * t] = pv;
    }
    rs = group_sum<C::GR>(rs);
    l = pm::fma(l, alpha, rs);
    m = m_new;
#pragma unroll
    for (int j = 0; j < C::OR; ++j) acc[j] = pm::mul(acc[j], alpha);
    __syncwarp();  // the row group (inside this warp) wrote its P row
    for (int c = 0; c < C::BC; ++c) {
      const float pv = Ps[r * C::LS + c];
#pragma unroll
      for (int j = 0; j < C::OR; ++j) acc[j] = pm::fma(pv, Vs[c * C::LD + g + C::GR * j], acc[j]);
    }
  }
  if (qi < p.Sq) {
    T* O = static_cast<T*>(p.O) + (bh * p.Sq + qi) * C::D;
    const bool any = l > 0.f;
    const float inv = any ? pm::div(1.f, l) : 0.f;
#pragma unroll
    for (int j = 0; j < C::OR; ++j) O[g + C::GR * j] = from_f<T>(any ? pm::mul(acc[j], inv) : 0.f);
    if (g == 0) p.lse[bh * p.Sq + qi] = any ? pm::add(m, pm::log(l)) : kNegInf;
  }
}

// Score phase of the backward, shared by both backward kernels: for the query
// tile in Qs/dOs (rows q0..) and the key tile in Ks/Vs (keys k0..), writes
// P = exp(scale*s - lse) and dS = P * (dP - D) into Ps, dSs (masked: 0);
// with the softcap, P = exp(c tanh(scale*s / c) - lse) and dS is multiplied by
// 1 - tanh^2.
template <class C>
__device__ __forceinline__ void bwd_scores(const Params& p, const float* Qs, const float* dOs, const float* Ks,
                                           const float* Vs, const float* lse_s, const float* D_s, float* Ps,
                                           float* dSs, int64_t q0, int64_t k0) {
  const int r = threadIdx.x / C::GR, g = threadIdx.x % C::GR;
  const int64_t qi = q0 + r;
  float s[C::SC], dp[C::SC];
#pragma unroll
  for (int t = 0; t < C::SC; ++t) s[t] = dp[t] = 0.f;
  for (int k = 0; k < C::D; ++k) {
    const float q = Qs[r * C::LD + k], o = dOs[r * C::LD + k];
#pragma unroll
    for (int t = 0; t < C::SC; ++t) {
      const int c = g + C::GR * t;
      s[t] = pm::fma(q, Ks[c * C::LD + k], s[t]);
      dp[t] = pm::fma(o, Vs[c * C::LD + k], dp[t]);
    }
  }
  const float lse = lse_s[r], Dr = D_s[r];
#pragma unroll
  for (int t = 0; t < C::SC; ++t) {
    const int c = g + C::GR * t;
    const int64_t kj = k0 + c;
    const bool ok = qi < p.Sq && kj < p.Sk && sees(p, qi, kj) && lse != kNegInf;
    float sc = pm::mul(s[t], p.scale), dcap = 1.f;
    if (p.softcap > 0.f) {
      const float th = pm::tanh(pm::div(sc, p.softcap));
      sc = pm::mul(p.softcap, th);
      dcap = pm::fma(-th, th, 1.f);
    }
    const float pv = ok ? pm::exp(pm::sub(sc, lse)) : 0.f;
    Ps[r * C::LS + c] = pv;
    dSs[r * C::LS + c] = pm::mul(pm::mul(pv, pm::sub(dp[t], Dr)), dcap);
  }
}

template <class T, class C>
__device__ __forceinline__ void load_query_side(const Params& p, int64_t bh, int64_t q0, float* Qs, float* dOs,
                                                float* lse_s, float* D_s) {
  const int64_t rows = p.Sq - q0;
  load_tile<T, C>(Qs, static_cast<const T*>(p.Q) + (bh * p.Sq + q0) * C::D, C::BR, rows);
  load_tile<T, C>(dOs, static_cast<const T*>(p.dO) + (bh * p.Sq + q0) * C::D, C::BR, rows);
  for (int r = threadIdx.x; r < C::BR; r += C::NT) {
    lse_s[r] = r < rows ? p.lse_in[bh * p.Sq + q0 + r] : kNegInf;
    D_s[r] = r < rows ? p.Dvec[bh * p.Sq + q0 + r] : 0.f;
  }
}

template <class T, class C, DqMode M>
__global__ void __launch_bounds__(C::NT) bwd_kv_kernel(const Params p) {
  extern __shared__ float smem[];
  float* Ks = smem;                  // [BC][LD]
  float* Vs = Ks + C::BC * C::LD;    // [BC][LD]
  float* Qs = Vs + C::BC * C::LD;    // [BR][LD]
  float* dOs = Qs + C::BR * C::LD;   // [BR][LD]
  float* Ps = dOs + C::BR * C::LD;   // [BR][LS]
  float* dSs = Ps + C::BR * C::LS;   // [BR][LS]
  float* lse_s = dSs + C::BR * C::LS;  // [BR]
  float* D_s = lse_s + C::BR;          // [BR]

  const int64_t jl = blockIdx.x % p.kb_count, ul = blockIdx.x / p.kb_count;  // local key block, local unit
  const int64_t unit = p.unit_begin + ul;
  const int64_t b = unit / p.Hkv, hkv = unit % p.Hkv, G = p.H / p.Hkv;
  const int64_t k0 = (p.kb_begin + jl) * C::BC;
  const T* K = static_cast<const T*>(p.K) + (unit * p.Sk + k0) * C::D;
  const T* V = static_cast<const T*>(p.V) + (unit * p.Sk + k0) * C::D;
  load_tile<T, C>(Ks, K, C::BC, p.Sk - k0);
  load_tile<T, C>(Vs, V, C::BC, p.Sk - k0);

  const int c = threadIdx.x / C::GC, gc = threadIdx.x % C::GC;  // key row owned in the dK/dV phase
  const int r = threadIdx.x / C::GR, g = threadIdx.x % C::GR;   // query row owned in the dQ phase
  float dk[C::KR], dv[C::KR];
#pragma unroll
  for (int j = 0; j < C::KR; ++j) dk[j] = dv[j] = 0.f;

  const int64_t n_qb = (p.Sq + C::BR - 1) / C::BR;
  // Causal: query i sees key k0 only if i >= k0 - (Sk - Sq); earlier query blocks are skipped.
  int64_t qb_first = 0;
  if (p.causal) {
    const int64_t qmin = k0 - (p.Sk - p.Sq);
    qb_first = qmin <= 0 ? 0 : (qmin >= p.Sq ? n_qb : qmin / C::BR);
  }
  // Window: query i sees key j only if i < j - (Sk - Sq) + window; the query
  // blocks after the one of the last such row of the block's last key are skipped.
  int64_t qb_end = n_qb;
  if (p.window > 0) {
    const int64_t kmax = (k0 + C::BC < p.Sk ? k0 + C::BC : p.Sk) - 1;
    const int64_t qmax = kmax - (p.Sk - p.Sq) + p.window - 1;
    qb_end = qmax < 0 ? 0 : (qmax / C::BR + 1 < n_qb ? qmax / C::BR + 1 : n_qb);
  }
  const int64_t unit_elems = G * p.Sq * C::D;
  float* slab = M == DqMode::partials ? p.slab + (ul * p.kb_count + jl) * unit_elems : nullptr;

  for (int64_t hl = 0; hl < G; ++hl) {
    const int64_t h = hkv * G + hl, bh = b * p.H + h;
    if constexpr (M == DqMode::partials) {  // this key block contributes nothing to the skipped rows
      float* s0 = slab + hl * p.Sq * C::D;
      const int64_t lo = (qb_first * C::BR < p.Sq ? qb_first * C::BR : p.Sq) * C::D;  // rows [0, lo/D)
      int64_t hi = (qb_end * C::BR < p.Sq ? qb_end * C::BR : p.Sq) * C::D;            // rows [hi/D, Sq)
      hi = hi > lo ? hi : lo;
      for (int64_t i = threadIdx.x; i < lo; i += C::NT) s0[i] = 0.f;
      for (int64_t i = hi + threadIdx.x; i < p.Sq * C::D; i += C::NT) s0[i] = 0.f;
    }
    for (int64_t qb = qb_first; qb < qb_end; ++qb) {
      const int64_t q0 = qb * C::BR;
      __syncthreads();  // the previous tile's readers are done (and K, V are loaded)
      load_query_side<T, C>(p, bh, q0, Qs, dOs, lse_s, D_s);
      __syncthreads();
      bwd_scores<C>(p, Qs, dOs, Ks, Vs, lse_s, D_s, Ps, dSs, q0, k0);
      __syncthreads();
      // dV[c] += P^T dO, dK[c] += dS^T Q (scale applied at the end)
      for (int rr = 0; rr < C::BR; ++rr) {
        const float pv = Ps[rr * C::LS + c], ds = dSs[rr * C::LS + c];
#pragma unroll
        for (int j = 0; j < C::KR; ++j) {
          dv[j] = pm::fma(pv, dOs[rr * C::LD + gc + C::GC * j], dv[j]);
          dk[j] = pm::fma(ds, Qs[rr * C::LD + gc + C::GC * j], dk[j]);
        }
      }
      if constexpr (M != DqMode::none) {
        // This key block's dQ contribution to rows q0..: scale * dS K.
        const int64_t qi = q0 + r;
#pragma unroll
        for (int j = 0; j < C::OR; ++j) {
          const int k = g + C::GR * j;
          float v = 0.f;
          for (int cc = 0; cc < C::BC; ++cc) v = pm::fma(dSs[r * C::LS + cc], Ks[cc * C::LD + k], v);
          v = pm::mul(v, p.scale);
          if (qi < p.Sq) {
            if constexpr (M == DqMode::atomic)
              atomicAdd(p.dq_acc + (bh * p.Sq + qi) * C::D + k, v);
            else
              slab[(hl * p.Sq + qi) * C::D + k] = v;
          }
        }
      }
    }
  }
  const int64_t kj = k0 + c;
  if (kj < p.Sk) {
    T* dK = static_cast<T*>(p.dK) + (unit * p.Sk + kj) * C::D;
    T* dV = static_cast<T*>(p.dV) + (unit * p.Sk + kj) * C::D;
#pragma unroll
    for (int j = 0; j < C::KR; ++j) {
      dK[gc + C::GC * j] = from_f<T>(pm::mul(dk[j], p.scale));
      dV[gc + C::GC * j] = from_f<T>(dv[j]);
    }
  }
}

template <class T, class C>
__global__ void __launch_bounds__(C::NT) bwd_dq_kernel(const Params p) {
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = Ks + C::BC * C::LD;
  float* Qs = Vs + C::BC * C::LD;
  float* dOs = Qs + C::BR * C::LD;
  float* Ps = dOs + C::BR * C::LD;
  float* dSs = Ps + C::BR * C::LS;
  float* lse_s = dSs + C::BR * C::LS;
  float* D_s = lse_s + C::BR;

  const int64_t qb = blockIdx.x % p.n_blocks, bh = blockIdx.x / p.n_blocks;
  const int64_t b = bh / p.H, h = bh % p.H, hkv = h / (p.H / p.Hkv);
  const int64_t q0 = qb * C::BR;
  const int64_t rows = p.Sq - q0 < C::BR ? p.Sq - q0 : int64_t(C::BR);
  const T* K = static_cast<const T*>(p.K) + (b * p.Hkv + hkv) * p.Sk * C::D;
  const T* V = static_cast<const T*>(p.V) + (b * p.Hkv + hkv) * p.Sk * C::D;
  const int r = threadIdx.x / C::GR, g = threadIdx.x % C::GR;
  float acc[C::OR];
#pragma unroll
  for (int j = 0; j < C::OR; ++j) acc[j] = 0.f;

  load_query_side<T, C>(p, bh, q0, Qs, dOs, lse_s, D_s);
  const int64_t n_keys = visible_keys(p, q0, rows);
  for (int64_t k0 = first_key_block<C::BC>(p, q0); k0 < n_keys; k0 += C::BC) {
    __syncthreads();
    load_tile<T, C>(Ks, K + k0 * C::D, C::BC, p.Sk - k0);
    load_tile<T, C>(Vs, V + k0 * C::D, C::BC, p.Sk - k0);
    __syncthreads();
    bwd_scores<C>(p, Qs, dOs, Ks, Vs, lse_s, D_s, Ps, dSs, q0, k0);
    __syncwarp();  // dQ reads only its own row group's dS row, written by that group
#pragma unroll
    for (int j = 0; j < C::OR; ++j) {
      const int k = g + C::GR * j;
      float v = 0.f;
      for (int cc = 0; cc < C::BC; ++cc) v = pm::fma(dSs[r * C::LS + cc], Ks[cc * C::LD + k], v);
      acc[j] = pm::add(acc[j], v);
    }
  }
  const int64_t qi = q0 + r;
  if (qi < p.Sq) {
    T* dQ = static_cast<T*>(p.dQ) + (bh * p.Sq + qi) * C::D;
#pragma unroll
    for (int j = 0; j < C::OR; ++j) dQ[g + C::GR * j] = from_f<T>(pm::mul(acc[j], p.scale));
  }
}

}  // namespace detfuse::attention::fma
