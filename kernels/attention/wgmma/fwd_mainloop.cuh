// The forward's mainloop (FlashAttention-3's mainloop_fwd_sm90_tma_gmma_ws
// role, read to learn, not copied): the key blocks a query block loads, the
// producer thread's TMA loads of Q, K and V into their pipelines, and one
// consumer warpgroup's work on one tile, S = Q K^T, mask, online softmax and
// O += P V over the tile's key blocks from the last to the first (one block
// at a time, or OVERLAP's software pipeline with the PINGPONG turns).
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention/wgmma/fwd_kernel_traits.cuh"
#include "kernels/attention/wgmma/fwd_softmax.cuh"
#include "kernels/attention/wgmma/named_barriers.h"
#include "kernels/attention/wgmma/wgmma_helpers.cuh"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace detfuse::attention::wg {

using namespace cute;

template <class Cfg>
struct FwdMainloop {
  using K_ = Fwd<Cfg>;
  using Params = typename K_::Params;
  using SharedStorage = typename K_::SharedStorage;
  using Pipeline = typename K_::Pipeline;
  using PipelineState = typename K_::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  // (The tile sizes are function-local constants, as make_shape takes its
  // arguments by reference: a static member would be odr-used in device code.)
  static constexpr int QS = K_::QS;
  static constexpr bool kPersistent = Cfg::PERSISTENT;

  // Key blocks [n_min, n_max) of query block m_block: every key some row of the
  // block may see (causal: up to the last row's diagonal; window: from the
  // first row's window start; below n_min no row of the block sees a key).
  __device__ __forceinline__ static void key_blocks(const Params& p, int m_block, int& n_min, int& n_max) {
    constexpr int BR = K_::BR, BC = K_::BC;
    n_max = (p.Sk + BC - 1) / BC;
    if (p.causal) {
      const int last_row = min((m_block + 1) * BR, p.Sq) - 1;
      const int last_key = last_row + (p.Sk - p.Sq);  // |.| < 2^31: Sq, Sk <= 2^30
      n_max = last_key < 0 ? 0 : min(n_max, last_key / BC + 1);
    }
    n_min = p.window > 0 ? window_first_block(m_block * BR + (p.Sk - p.Sq) - p.window + 1, BC, n_max) : 0;
  }

  // The producer (thread 0 of warpgroup 0): per tile of the scheduler, Q into
  // buffer q_iter % QS (its own mbarrier; persistent: once the consumers
  // released it through q_empty), then the K and V tiles of the key blocks from
  // the last to the first into the two STAGES-deep rings, whose position
  // carries from tile to tile.
  template <class Sched, class TK, class TV>
  __device__ __forceinline__ static void load(const Params& p, SharedStorage& ss, const Sched& sched, Pipeline& pipe_k,
                                              Pipeline& pipe_v, TK& sK, TV& sV) {
    constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;
    Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
    Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
    Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
    PipelineState st = cutlass::make_producer_start_state<Pipeline>();
    int q_iter = 0;  // tiles with keys so far (Q buffer q_iter % QS, phase (q_iter / QS) % 2)
    for (int t = sched.t_first; t < sched.t_end; t += sched.t_step) {
      const FwdTile tile = sched.tile(t);
      int n_min, n_max;
      key_blocks(p, tile.m_block, n_min, n_max);
      if (n_max <= n_min) continue;  // nothing to load: the consumers write O = 0, LSE = -inf
      const int hk = tile.h / p.group;
      const int qb = q_iter % QS;
      Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + qb * K_::kQElems), typename K_::SmemQ{});
      Tensor gQ = local_tile(mQ(_, _, tile.h, tile.b), Shape<Int<BR>, Int<D>>{}, make_coord(tile.m_block, 0));
      Tensor gK = local_tile(mK(_, _, hk, tile.b), Shape<Int<BC>, Int<D>>{}, make_coord(_, 0));  // (BC, D, n)
      Tensor gV = local_tile(mV(_, _, hk, tile.b), Shape<Int<BC>, Int<D>>{}, make_coord(_, 0));
      auto [tQg, tQs] = tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
      auto [tKg, tKs] = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVg, tVs] = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));

      // One Q buffer, persistent: the first K tile goes out before Q (its
      // stage frees before the previous tile's consumers are done with Q),
      // then Q once they are. Two Q buffers, or one tile per CTA: Q first
      // (with two buffers the one of the tile before last, long free).
      const int n0 = n_max - 1;
      constexpr bool kQFirst = !kPersistent || QS > 1;
      if constexpr (kQFirst) {
        if constexpr (kPersistent) {
          if (q_iter >= QS) cutlass::arch::ClusterBarrier::wait(&ss.q_empty[qb], ((q_iter / QS) - 1) & 1);
        }
        Barrier::arrive_and_expect_tx(&ss.q_bar[qb], K_::kQBytes);
        copy(p.tma_q.with(ss.q_bar[qb]), tQg, tQs);
      }
      pipe_k.producer_acquire(st);
      copy(p.tma_k.with(*pipe_k.producer_get_barrier(st)), tKg(_, n0), tKs(_, st.index()));
      if constexpr (!kQFirst) {
        if (q_iter >= QS) cutlass::arch::ClusterBarrier::wait(&ss.q_empty[qb], ((q_iter / QS) - 1) & 1);
        Barrier::arrive_and_expect_tx(&ss.q_bar[qb], K_::kQBytes);
        copy(p.tma_q.with(ss.q_bar[qb]), tQg, tQs);
      }
      pipe_v.producer_acquire(st);
      copy(p.tma_v.with(*pipe_v.producer_get_barrier(st)), tVg(_, n0), tVs(_, st.index()));
      ++st;
      for (int n = n0 - 1; n >= n_min; --n) {
        pipe_k.producer_acquire(st);
        copy(p.tma_k.with(*pipe_k.producer_get_barrier(st)), tKg(_, n), tKs(_, st.index()));
        pipe_v.producer_acquire(st);
        copy(p.tma_v.with(*pipe_v.producer_get_barrier(st)), tVg(_, n), tVs(_, st.index()));
        ++st;
      }
      ++q_iter;
    }
  }

  // One consumer warpgroup (ctid: its thread's index among the kConsumers
  // consumers, 256 or 384) on one tile with key blocks [n_min, n_max), n_max > n_min: O
  // (tOrO, cleared) and the softmax state accumulate over the blocks; the K/V
  // ring position st and the Q buffer counter q_iter advance. tSrQ: the Q
  // buffer's wgmma descriptors; tSrK / tOrV: the K and V rings'; tSrS / tOrP:
  // the score and P fragments (scratch).
  template <class MmaQK, class MmaPV, class TQ, class TK, class TV, class TS, class TP, class TO>
  __device__ __forceinline__ static void mma(const Params& p, SharedStorage& ss, Pipeline& pipe_k, Pipeline& pipe_v,
                                             PipelineState& st, int& q_iter, int n_min, int n_max, int ctid,
                                             MmaQK& mma_qk, MmaPV& mma_pv, TQ& tSrQ, TK& tSrK, TV& tOrV, TS& tSrS,
                                             TP& tOrP, TO& tOrO, FwdSoftmax<Cfg>& softmax, const FwdMask<Cfg>& mask) {
    using Softmax = FwdSoftmax<Cfg>;
    // The last Q K^T of the tile is done: the producer may load Q into this buffer again.
    auto release_q = [&]() {
      if constexpr (kPersistent) cutlass::arch::ClusterBarrier::arrive(&ss.q_empty[q_iter % QS]);
    };
    Barrier::wait(&ss.q_bar[q_iter % QS], (q_iter / QS) & 1);
    if constexpr (!Cfg::OVERLAP) {
      // One block at a time: S, softmax, P V; the other warpgroup's wgmma
      // runs under this one's softmax.
      for (int n = n_max - 1; n >= n_min; --n) {
        pipe_k.consumer_wait(st);
        detail::wg_gemm<true, false>(mma_qk, tSrQ, tSrK(_, _, _, st.index()), tSrS);
        warpgroup_wait<0>();
        pipe_k.consumer_release(st);
        if (n == n_min) release_q();
        mask.apply(p, tSrS, n);
        float corr[2];
        softmax.online(p, tSrS, corr);
        Softmax::rescale_o(tOrO, corr);
        Softmax::to_p(tSrS, tOrP);
        pipe_v.consumer_wait(st);
        detail::wg_gemm<false, true>(mma_pv, tOrP, tOrV(_, _, _, st.index()), tOrO);
        warpgroup_wait<0>();
        pipe_v.consumer_release(st);
        ++st;
      }
    } else {
      // Software-pipelined within the warpgroup: S of block n and O += P V of
      // block n + 1 are issued together, and the softmax of block n runs
      // while P V is still on the tensor cores.
      {
        const int n = n_max - 1;
        pipe_k.consumer_wait(st);
        detail::wg_gemm<true, false>(mma_qk, tSrQ, tSrK(_, _, _, st.index()), tSrS);
        warpgroup_wait<0>();
        pipe_k.consumer_release(st);
        if (n == n_min) release_q();
        mask.apply(p, tSrS, n);
        float corr[2];
        softmax.online(p, tSrS, corr);  // O is zero: nothing to rescale
        Softmax::to_p(tSrS, tOrP);
      }
      // Ping-pong: the consumer warpgroups take turns on the tensor cores in a
      // ring (FlashAttention-4's warp-scheduler barrier, two or three
      // warpgroups): warpgroup c waits on its barrier (kPingPongWg0 + c)
      // before issuing and then lets the next one go (arrive on c + 1's, mod
      // the warpgroups; with two, kPingPongWg1 - c). All run the same n_max -
      // n_min - 1 turns; the last primes the first's barrier once and skips
      // its last arrive, so every barrier phase completes (in the persistent
      // kernel too: the last warpgroup primes the next tile only after its
      // last turn here, which waited for every other one's last).
      constexpr int kWgs = K_::kConsumerWGs;
      const int cwg = ctid / 128;
      if constexpr (Cfg::PINGPONG) {
        if (cwg == kWgs - 1 && n_max - n_min >= 2) detail::named_arrive(barrier_id(FwdBarrier::kPingPongWg0), 256);
      }
      // A turn ends once block n + 1's P V is done: O corrected, the new P
      // written over the registers P V read. ov1 ends each turn in its own
      // iteration; ov2 (the loop rotated) opens the next iteration with it, so
      // that the softmax stays before that wait: ptxas moves a wgmma wait up to
      // the start of its basic block, above any arithmetic that does not need
      // it (ov1's SASS waits for P V before the first exp2: the softmax then
      // runs after the P V product, not under it). Same operations, same bits.
      float corr[2] = {1.f, 1.f};
      PipelineState prev = st;
      auto end_turn = [&]() {
        warpgroup_wait<0>();  // P V done: O and the P registers are free
        pipe_v.consumer_release(prev);
        warpgroup_fence_operand(tOrP);
        Softmax::rescale_o(tOrO, corr);
        Softmax::to_p(tSrS, tOrP);
      };
      // One turn: block n's S and block n + 1's P V; masked (true_type): with the mask (and the
      // softcap, a branch on p.softcap), else a block that needs neither (no softcap, every key seen).
      auto turn = [&](int n, auto masked) __attribute__((always_inline)) {
        if constexpr (Cfg::OVERLAP == 2) {
          if (n != n_max - 2) end_turn();
        }
        prev = st;
        ++st;
        pipe_k.consumer_wait(st);
        pipe_v.consumer_wait(prev);
        if constexpr (Cfg::PINGPONG) detail::named_sync(barrier_id(FwdBarrier::kPingPongWg0) + cwg, 256);
        detail::wg_gemm<true, false>(mma_qk, tSrQ, tSrK(_, _, _, st.index()), tSrS);
        detail::wg_gemm<false, true>(mma_pv, tOrP, tOrV(_, _, _, prev.index()), tOrO);
        if constexpr (Cfg::PINGPONG) {
          const int next = kWgs == 2 ? barrier_id(FwdBarrier::kPingPongWg1) - cwg
                                     : barrier_id(FwdBarrier::kPingPongWg0) + (cwg + 1) % kWgs;
          if (!(cwg == kWgs - 1 && n == n_min)) detail::named_arrive(next, 256);
        }
        warpgroup_wait<1>();  // S done, P V may still run
        pipe_k.consumer_release(st);
        if (n == n_min) release_q();
        if constexpr (decltype(masked)::value) mask.apply(p, tSrS, n);
        softmax.online(p, tSrS, corr);
        if constexpr (Cfg::OVERLAP == 1) end_turn();
      };
      using Masked = cute::true_type;
      if constexpr (Cfg::SPLIT) {
        // ls1: the blocks above the unmasked range (the diagonal, keys past Sk), those in it
        // (without softcap) in a loop with no branch before the softmax, then the rest (the
        // window's start; with softcap, all below the diagonal). A loop of its own for the
        // softcap's unmasked blocks spilled 24-28 bytes at d64 (ov2, br192).
        int lo, hi;
        mask.free_blocks(p, lo, hi);
        int n = n_max - 2;
        for (; n >= n_min && n >= hi; --n) turn(n, Masked{});
        if (!p.softcap)
          for (; n >= n_min && n >= lo; --n) turn(n, cute::false_type{});
        for (; n >= n_min; --n) turn(n, Masked{});
      } else {
        for (int n = n_max - 2; n >= n_min; --n) turn(n, Masked{});
      }
      if constexpr (Cfg::OVERLAP == 2) {
        if (n_max - n_min >= 2) end_turn();
      }
      pipe_v.consumer_wait(st);
      detail::wg_gemm<false, true>(mma_pv, tOrP, tOrV(_, _, _, st.index()), tOrO);
      warpgroup_wait<0>();
      pipe_v.consumer_release(st);
      ++st;
    }
    ++q_iter;
  }
};

}  // namespace detfuse::attention::wg
