// The forward consumers' per-row state and its element-wise steps on one
// 64 x BC score fragment of a warpgroup (FlashAttention-3's softmax.h and
// mask.h roles, read to learn, not copied): the mask (softcap, keys >= Sk,
// causal, window), the online softmax (running max and sum, the correction of
// O) and the conversion of the probabilities to the bf16 A operand of P V.
// Fragment value v of a thread sits at row 16 w + l / 4 + 8 ((v / 2) % 2) and
// column 8 (v / 4) + 2 (l % 4) + v % 2 of its warpgroup's tile
// (attention_wgmma.cuh); a thread owns two rows, r = 0, 1.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention/wgmma/wgmma_helpers.cuh"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

namespace detfuse::attention::wg {

using namespace cute;

// The mask of one tile: diag = the tile's first row's last visible key, row0 =
// this thread's first row, col_lane = its column within each 8.
template <class Cfg>
struct FwdMask {
  static constexpr int BR = Cfg::BR, BC = Cfg::BC;
  int diag, row0, col_lane;

  // Softcap (uniform branch), then keys >= Sk, (causal) keys after a row's
  // last visible key and (window) keys at or before its diagonal - window to
  // -inf, on the blocks that hold any (uniform branch). n: the key block.
  // Per row, the visible keys are an interval: the thread's value v sits at
  // column offset o = 8 (v / 4) + v % 2 from key0 + col_lane (a compile-time
  // constant), so each value is masked by two compares with immediates and a
  // select (lo < o <= hi, per row). (The test written per value, col >= Sk ||
  // (causal && ...) || (window && ...), compiled to 739 instructions a masked
  // block with branches and a constant load per value: the causal diagonal
  // block of every tile, which the walk from the last key block takes first.)
  template <class Params, class TS>
  __device__ __forceinline__ void apply(const Params& p, TS& tSrS, int n) const {
    if (p.softcap) {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BC / 2; ++v) tSrS(v) = detail::softcap_raw(tSrS(v), p.cap_k, p.cap_c);
    }
    const int key0 = n * BC;
    if (key0 + BC > p.Sk || (p.causal && key0 + BC - 1 > diag) ||
        (p.window > 0 && key0 <= diag + BR - 1 - p.window)) {
      // Row r sees offsets o with lo[r] < o <= hi[r]; both clamped to [-1, BC]
      // (o is in [0, BC): the same test, and no int overflow at any Sq, Sk).
      int hi[2], lo[2];
      const int64_t base = int64_t(key0) + col_lane;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int64_t last = int64_t(row0) + 8 * r + (p.Sk - p.Sq);  // the row's diagonal key
        int64_t h = int64_t(p.Sk) - 1 - base;
        if (p.causal) h = min(h, last - base);
        const int64_t l = p.window > 0 ? last - p.window - base : int64_t(-1);
        hi[r] = int(max(int64_t(-1), min(h, int64_t(BC))));
        lo[r] = int(max(int64_t(-1), min(l, int64_t(BC))));
      }
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BC / 2; ++v) {
        const int o = 8 * (v / 4) + v % 2, r = (v / 2) % 2;
        tSrS(v) = (o > hi[r] || o <= lo[r]) ? -INFINITY : tSrS(v);
      }
    }
  }

  // The key blocks n with lo <= n < hi are those apply() leaves unmasked (every
  // row of the tile sees every key of the block): n BC + BC <= Sk; causal, n BC +
  // BC - 1 <= diag; window, n BC > diag + BR - 1 - window. Empty when hi <= lo.
  template <class Params>
  __device__ __forceinline__ void free_blocks(const Params& p, int& lo, int& hi) const {
    int64_t h = p.Sk / BC;
    if (p.causal) h = min(h, (int64_t(diag) + 1) / BC);  // diag + 1 < BC (or < 0): none
    int64_t l = 0;
    if (p.window > 0) {
      const int64_t w = int64_t(diag) + BR - 1 - p.window;
      l = w < 0 ? 0 : w / BC + 1;
    }
    lo = int(min(l, int64_t(INT32_MAX)));
    hi = int(max(h, int64_t(0)));
  }
};

// The running max and this thread's partial sums (its 2 columns of each 8) of
// its two rows over the key blocks seen so far: references to the consumer's
// own arrays (as the lambdas of the one-function kernel captured them; state
// held in the struct itself is scalarised in another order and changes the
// register allocation, so the machine code would not stay the same).
template <class Cfg>
struct FwdSoftmax {
  using T = cutlass::bfloat16_t;
  static constexpr int D = Cfg::D, BC = Cfg::BC;
  float (&row_max)[2];  // -inf before the first key block
  float (&row_sum)[2];  // 0 before the first key block

  // Online softmax over one block: new running max, the correction of the
  // previous blocks' O and sum (returned in corr, the sum already scaled),
  // and S replaced by exp2((S - max) * scale * log2 e).
  template <class Params, class TS>
  __device__ __forceinline__ void online(const Params& p, TS& tSrS, float (&corr)[2]) {
    float mx[2] = {row_max[0], row_max[1]};
    if constexpr (Cfg::TREE) {
      // Row r's values are v = 4 j + 2 r + e (j < BC / 8, e < 2): four
      // chains per row (e, and j even / odd), then a tree. fmax is exact
      // in any order: the same max as the serial chain.
      static_assert((BC / 8) % 2 == 0, "pairs of 8-column groups");
      float a[2][4];
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < 4; ++k) a[r][k] = tSrS(4 * (k / 2) + 2 * r + k % 2);
        CUTLASS_PRAGMA_UNROLL
        for (int j = 2; j < BC / 8; j += 2) {
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < 4; ++k) a[r][k] = fmaxf(a[r][k], tSrS(4 * (j + k / 2) + 2 * r + k % 2));
        }
        mx[r] = fmaxf(fmaxf(mx[r], fmaxf(a[r][0], a[r][1])), fmaxf(a[r][2], a[r][3]));
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BC / 2; ++v) mx[(v / 2) % 2] = fmaxf(mx[(v / 2) % 2], tSrS(v));
    }
    float mscaled[2];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      // A row with no visible key so far keeps max -inf: subtract 0 (every
      // exponent is then exp2(-inf) = 0) and leave O and the sum alone.
      mscaled[r] = mx[r] == -INFINITY ? 0.f : mx[r] * p.scale_log2;
      corr[r] = mx[r] == -INFINITY ? 1.f : detail::ex2(row_max[r] * p.scale_log2 - mscaled[r]);
      row_max[r] = mx[r];
      row_sum[r] *= corr[r];
    }
    if constexpr (Cfg::TREE) {
      // Four partial sums per row (the same chains as the max), added as
      // a tree: a fixed order, so still bitwise reproducible.
      float a[2][4] = {{row_sum[0], 0.f, 0.f, 0.f}, {row_sum[1], 0.f, 0.f, 0.f}};
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BC / 2; ++v) {
        const int r = (v / 2) % 2;
        const float e = detail::ex2(fmaf(tSrS(v), p.scale_log2, -mscaled[r]));
        tSrS(v) = e;
        a[r][2 * ((v / 4) % 2) + v % 2] += e;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) row_sum[r] = (a[r][0] + a[r][1]) + (a[r][2] + a[r][3]);
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BC / 2; ++v) {
        const int r = (v / 2) % 2;
        const float e = detail::ex2(fmaf(tSrS(v), p.scale_log2, -mscaled[r]));
        tSrS(v) = e;
        row_sum[r] += e;
      }
    }
  }

  // O *= corr, row by row.
  template <class TO>
  __device__ __forceinline__ static void rescale_o(TO& tOrO, const float (&corr)[2]) {
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < D / 2; ++v) tOrO(v) *= corr[(v / 2) % 2];
  }

  // P = S rounded to bf16, value by value into the register A operand of P V.
  template <class TS, class TP>
  __device__ __forceinline__ static void to_p(const TS& tSrS, TP& tOrP) {
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < BC / 2; v += 2) {
      const __nv_bfloat162 two = __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
      tOrP(v) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[0]);
      tOrP(v + 1) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[1]);
    }
  }
};

}  // namespace detfuse::attention::wg
