// The forward's epilogue (FlashAttention-3's epilogue_fwd role, read to learn,
// not copied): per tile, the full row sums of the softmax state, O normalised
// once (1 / rowsum; 0 for a row that saw no key) and written bf16, and LSE =
// scale * max + ln(sum) in fp32 (-inf for a row that saw no key). O goes
// straight from the accumulators to global memory, or (Cfg::TMA_O, ot1)
// through the shared O tile and one TMA store per tile (ot2: the tile
// written by stmatrix).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention/wgmma/fwd_kernel_traits.cuh"
#include "kernels/attention/wgmma/fwd_softmax.cuh"
#include "kernels/attention/wgmma/named_barriers.h"
#include "kernels/attention/wgmma/wgmma_helpers.cuh"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

namespace detfuse::attention::wg {

using namespace cute;

template <class Cfg>
struct FwdEpilogue {
  using K_ = Fwd<Cfg>;
  using T = typename K_::T;
  using Params = typename K_::Params;
  using SharedStorage = typename K_::SharedStorage;

  // Row r's full sum: the partial sums of the four threads of a quad (lanes
  // 4 i .. 4 i + 3 hold the row's columns 2 (l % 4) + 8 j, + 1).
  __device__ __forceinline__ static float row_total(const float (&row_sum)[2], int r) {
    float s = row_sum[r];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    return s;
  }

  // Tile (m_block, h, b) of one consumer thread (ctid among the kConsumers; rows
  // row0 and row0 + 8, columns col_lane + 8 j of O): thr_pv its slice of the
  // P V TiledMMA, tOrO its O accumulators (persistent: the stores run under
  // the next tile's loads).
  template <class ThrPV, class TO>
  __device__ __forceinline__ static void store(const Params& p, SharedStorage& ss, const ThrPV& thr_pv, const TO& tOrO,
                                               const FwdSoftmax<Cfg>& softmax, int m_block, int h, int b, int row0,
                                               int lane, int col_lane, int ctid) {
    constexpr int D = K_::D, BR = K_::BR;  // local: make_shape odr-uses its arguments
    const float(&row_max)[2] = softmax.row_max;
    const float(&row_sum)[2] = softmax.row_sum;
    const int64_t bh = int64_t(b) * p.H + h;
    if constexpr (Cfg::TMA_O) {
      // O through the shared tile and one TMA store. The previous tile's
      // store must have read the tile: its issuing thread waits, then all
      // kConsumers pass FwdBarrier::kOStore.
      if (ctid == 0) tma_store_wait<0>();
      detail::named_sync(barrier_id(FwdBarrier::kOStore), K_::kConsumers);
      Tensor sO = make_tensor(make_smem_ptr(ss.o.data()), typename K_::SmemQ{});
      Tensor tOsO = thr_pv.partition_C(sO);  // the accumulator's (row, col) in the tile
      static_assert(decltype(size(tOsO))::value == D / 2, "one shared element per accumulator value");
      float inv[2];
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const float s = row_total(row_sum, r);
        const bool seen = s > 0.f;
        inv[r] = seen ? 1.f / s : 0.f;
        const int row = row0 + 8 * r;
        if (row < p.Sq && lane % 4 == 0) p.lse[bh * p.Sq + row] = seen ? row_max[r] * p.scale + logf(s) : -INFINITY;
      }
      if constexpr (Cfg::TMA_O == 2) {
        // ot2: O in bf16 (values v, v + 1, columns c, c + 1 of one row,
        // rounded as a pair as ot1 does), then into the tile by stmatrix (8 x 8
        // matrices of 16-byte rows; the 128-byte swizzle permutes 16-byte
        // chunks): D / 16 stores a thread, as FlashAttention-3's epilogue.
        Tensor rO = make_tensor_like<T>(tOrO);
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < D / 2; v += 2) {
          const float iv = inv[(v / 2) % 2];
          const __nv_bfloat162 two = __floats2bfloat162_rn(tOrO(v) * iv, tOrO(v + 1) * iv);
          rO(v) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[0]);
          rO(v + 1) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[1]);
        }
        auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, T>{}, typename K_::MmaPV{});
        auto thr_stsm = stsm.get_thread_slice(ctid);
        copy(stsm, thr_stsm.retile_S(rO), thr_stsm.partition_D(sO));
      } else {
        // Values v, v + 1 are columns c, c + 1 (c even) of one row: adjacent
        // in the 128-byte swizzle (it permutes 16-byte chunks), one 4-byte
        // store. (The swizzled pointer loses its shared address space here:
        // 64-bit address arithmetic and a generic store per pair, 32 a thread
        // at d = 128; experiments/results/sass-2026-12-06. ot2 does not.)
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < D / 2; v += 2) {
          const float iv = inv[(v / 2) % 2];
          *reinterpret_cast<__nv_bfloat162*>(raw_pointer_cast(&tOsO(v))) =
              __floats2bfloat162_rn(tOrO(v) * iv, tOrO(v + 1) * iv);
        }
      }
      cutlass::arch::fence_view_async_shared();  // the generic-proxy writes, seen by TMA
      detail::named_sync(barrier_id(FwdBarrier::kOStore), K_::kConsumers);
      if (ctid == 0) {
        Tensor mO = p.tma_o.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
        Tensor gO = local_tile(mO(_, _, h, b), Shape<Int<BR>, Int<D>>{}, make_coord(m_block, 0));
        auto [tOg, tOs] =
            tma_partition(p.tma_o, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sO), group_modes<0, 2>(gO));
        copy(p.tma_o, tOs, tOg);
        tma_store_arrive();
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const float s = row_total(row_sum, r);
        const bool seen = s > 0.f;
        const float inv = seen ? 1.f / s : 0.f;
        const int row = row0 + 8 * r;
        if (row < p.Sq) {
          __nv_bfloat16* orow = reinterpret_cast<__nv_bfloat16*>(p.O) + (bh * p.Sq + row) * D;
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < D / 8; ++j) {
            const int v = 4 * j + 2 * r;
            *reinterpret_cast<__nv_bfloat162*>(orow + 8 * j + col_lane) =
                __floats2bfloat162_rn(tOrO(v) * inv, tOrO(v + 1) * inv);
          }
          if (lane % 4 == 0) p.lse[bh * p.Sq + row] = seen ? row_max[r] * p.scale + logf(s) : -INFINITY;
        }
      }
    }
  }

  // After the last tile (TMA_O): the shared O tile must stay until the last
  // store has read it.
  __device__ __forceinline__ static void finish(int ctid) {
    if constexpr (Cfg::TMA_O) {
      if (ctid == 0) tma_store_wait<0>();
    }
  }
};

}  // namespace detfuse::attention::wg
