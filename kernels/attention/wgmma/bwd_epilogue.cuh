// The backward's epilogues (FlashAttention-3's epilogue_bwd role, read to
// learn, not copied): the kv kernel's dK * scale and dV in bf16 (keys < Sk)
// from the consumers' fp32 accumulators, the partials strategy's zeros in
// the slot rows of the query blocks a key block skips, and the dq kernel's
// dQ * scale in bf16 (rows < Sq). Value v of a thread's 64 x D accumulator
// sits at row (key / query) 8 ((v / 2) % 2) on from its first and column
// 8 (v / 4) + col_lane + v % 2 (attention_wgmma.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention/wgmma/bwd_kernel_traits.cuh"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

namespace detfuse::attention::wg {

using namespace cute;

template <class K_>
struct BwdKvEpilogue {
  using Params = typename K_::Params;

  __device__ __forceinline__ static void zero_partials(const Params& p, int m_begin, int m_stop, int ctid) {
    constexpr int D = K_::D, BR = K_::BR;
    // Partials: rows of the query blocks this key block skips (causal:
    // before m_begin, window: from m_stop on) hold zeros in its slot, so
    // the fixed-order sum reads only written values.
    const int64_t lo = min(int64_t(m_begin) * BR, int64_t(p.Sq));
    const int64_t hi = max(lo, min(int64_t(m_stop) * BR, int64_t(p.Sq)));
    for (int g = 0; g < p.group; ++g) {
      float4* z = reinterpret_cast<float4*>(
          p.dq + ((int64_t(blockIdx.y) * p.kb_count + blockIdx.x) * p.group + g) * p.Sq * D);
      for (int64_t i = ctid; i < lo * D / 4; i += 256) z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int64_t i = hi * D / 4 + ctid; i < int64_t(p.Sq) * D / 4; i += 256) z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }

  // dK * scale and dV in bf16, keys key0, key0 + 8 of kv head hk of batch b if < Sk.
  template <class Acc>
  __device__ __forceinline__ static void store(const Params& p, const Acc& tdKacc, const Acc& tdVacc, int hk, int b,
                                               int key0, int col_lane) {
    constexpr int D = K_::D;
    const int64_t base = (int64_t(b) * p.Hkv + hk) * p.Sk;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r;
      if (key < p.Sk) {
        __nv_bfloat16* krow = reinterpret_cast<__nv_bfloat16*>(p.dK) + (base + key) * D;
        __nv_bfloat16* vrow = reinterpret_cast<__nv_bfloat16*>(p.dV) + (base + key) * D;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < D / 8; ++j) {
          const int v = 4 * j + 2 * r;
          *reinterpret_cast<__nv_bfloat162*>(krow + 8 * j + col_lane) =
              __floats2bfloat162_rn(tdKacc(v) * p.scale, tdKacc(v + 1) * p.scale);
          *reinterpret_cast<__nv_bfloat162*>(vrow + 8 * j + col_lane) =
              __floats2bfloat162_rn(tdVacc(v), tdVacc(v + 1));
        }
      }
    }
  }
};

template <class K_>
struct BwdDqEpilogue {

  // dQ * scale in bf16, rows row0, row0 + 8 of head bh if < Sq.
  template <class Acc>
  __device__ __forceinline__ static void store(const typename K_::Params& p, const Acc& tdQacc, int64_t bh, int row0,
                                               int col_lane) {
    constexpr int D = K_::D;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row < p.Sq) {
        __nv_bfloat16* qrow = reinterpret_cast<__nv_bfloat16*>(p.dQ) + (bh * p.Sq + row) * D;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < D / 8; ++j) {
          const int v = 4 * j + 2 * r;
          *reinterpret_cast<__nv_bfloat162*>(qrow + 8 * j + col_lane) =
              __floats2bfloat162_rn(tdQacc(v) * p.scale, tdQacc(v + 1) * p.scale);
        }
      }
    }
  }
};

}  // namespace detfuse::attention::wg
