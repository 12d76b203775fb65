// Hopper (sm_90a) attention backward on wgmma and TMA (attention_wgmma_bwd.h),
// built on the forward's pieces (attention_wgmma.cuh: swizzled tiles, TMA
// descriptors over [B, heads, S, d], PipelineTmaAsync rings, wg_gemm).
//
// kv kernel, per CTA (key block n of 128 keys, kv head hk, batch b):
//   warpgroup 0    producer: K and V tiles once (one mbarrier), then Q and dO
//                  tiles of BR queries for every (query head of the group,
//                  query block) in a fixed order into two rings.
//   warpgroups 1-2 consumers, 64 keys each (the wgmma M). Per query block:
//                  S^T = K Q^T and dP^T = V dO^T (SS), P^T = exp(scale S^T - LSE)
//                  (keys >= Sk, causal and rows >= Sq or LSE = -inf give 0),
//                  dV += P^T dO (RS: P^T from registers, dO MN-major through a
//                  transposed view of its tile), dS^T = P^T (dP^T - D),
//                  dK += dS^T Q (RS). Atomic dQ: dS^T is stored to shared memory
//                  as dS (BR x 128, K-major), both warpgroups form dS K (SS, each
//                  d/2 columns) and add scale * dS K with fp32 atomics.
//                  Ordered dQ: the same dS K (d = 64: warpgroup 1's part
//                  added to warpgroup 0's through shared memory), added with
//                  plain loads and stores once the key blocks before this one
//                  have added theirs to the query block (a semaphore per (batch, head,
//                  query block) counts them: FlashAttention-3's deterministic
//                  mode), so every dQ element is summed in key-block order.
//                  TMA dQ (DQ 4 atomic, 5 ordered: FlashAttention-3's dQ
//                  path): the consumers store scale * dS K into a
//                  double-buffered fp32 shared tile (in their fragment order,
//                  bank-conflict free) and go on; warp 1 of the producer
//                  warpgroup adds the tile into the tile-blocked accumulator
//                  with one cp.reduce.async.bulk add (ordered: after the
//                  semaphore says key blocks 0 .. n-1 have added theirs).
//                  bwd_dq_tma_convert un-permutes it into dQ afterwards.
//   epilogue       dK * scale and dV, bf16, keys < Sk.
// Softcap and window (run-time, as in the forward): S goes through
// detail::softcap_raw before P is formed, and once P has been used (dV, in
// bf16) it is multiplied by 1 - t^2 in place, with t = tanh recovered from P
// itself, t = (log2 P + LSE log2 e) / (c log2 e) (one lg2 per element in the
// softcap branch, no register kept per score), so dS = (P (1 - t^2)) (dP - D)
// comes out of the unchanged dS code.
// The window bounds the query blocks a key block walks from above
// ([m_begin, m_stop): the producer loads no query block that sees none of its
// keys); the ordered dQ waits for the key blocks [n_lo(m), n) that walk query
// block m before this one (n_lo(m) > 0 with a window), see kv kernel.
// dq kernel (owning), per CTA (query block of 128 rows, head, batch): Q and dO
// once, K and V rings over the key blocks in ascending order: S = Q K^T and
// dP = dO V^T (SS), P, dS = P (dP - D) in registers, dQ += dS K (RS, K through
// its transposed view); epilogue dQ * scale, bf16, rows < Sq.
//
// Accumulator layout (every fragment here is 64 x N per warpgroup): value v of
// lane l of warp w sits at row 16 w + l / 4 + 8 ((v / 2) % 2) and column
// 8 (v / 4) + 2 (l % 4) + v % 2 (attention_wgmma.cuh).
//
// Structure (FlashAttention-3's hopper/ split; kernels/attention/wgmma/README.md
// "Structure: the backward in role files"): bwd_kernel_traits.cuh (BwdKv<Cfg>,
// BwdDq<Cfg>: tiles, MMAs, layouts, shared storage, barrier ids, TMA types,
// Params), bwd_tile_scheduler.cuh (a CTA's key block / query block and its
// walk), bwd_mainloop_kv.cuh (the kv kernel's loads and consumer walks),
// bwd_softmax.cuh (P^T / P: softcap, mask), bwd_dq_writer.cuh (dQ: the
// consumers' hand-offs and adds, the writer warp, the convert kernel),
// bwd_epilogue.cuh (dK, dV; dQ of the dq kernel), named_barriers.h
// (BwdBarrier). This file: the kernels (their prologue and the role
// dispatch; the dq kernel's loop) and the launchers.
#pragma once

#include <algorithm>
#include <type_traits>

#include <cuda/ptx>
#include <cutlass/barrier.h>

#include "kernels/attention/wgmma/attention_wgmma.cuh"
#include "kernels/attention/wgmma/attention_wgmma_bwd.h"
#include "kernels/attention/wgmma/bwd_dq_order.h"
#include "kernels/attention/wgmma/bwd_dq_writer.cuh"
#include "kernels/attention/wgmma/bwd_epilogue.cuh"
#include "kernels/attention/wgmma/bwd_kernel_traits.cuh"
#include "kernels/attention/wgmma/bwd_mainloop_kv.cuh"
#include "kernels/attention/wgmma/bwd_softmax.cuh"
#include "kernels/attention/wgmma/bwd_tile_scheduler.cuh"
#include "kernels/attention/wgmma/named_barriers.h"

namespace detfuse::attention::wg {

using namespace cute;

// The kv kernel: shared memory, the barriers and pipelines, then the roles
// (warpgroup 0: the producer thread 0, pds2's LSE / D thread 64, TMA dQ's
// writer warp 1; warpgroups 1, 2: the consumers).
template <class Cfg>
__global__ void __launch_bounds__(384, 1) attention_bwd_kv_wgmma_kernel(const __grid_constant__ typename BwdKv<Cfg>::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K_ = BwdKv<Cfg>;
  using Pipeline = typename K_::Pipeline;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using Sched = BwdKvScheduler<K_>;
  using Mainloop = BwdKvMainloop<K_>;
  using T = typename K_::T;
  using PipelineState = typename K_::PipelineState;
  constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K_::SharedStorage*>(smem_raw);

  const int tid = threadIdx.x;
  const int warp_group = tid / 128;
  // TMA dQ: the convert may launch once every CTA has started (it waits for
  // each head's counts in p.dq_done; attention_wgmma_bwd.h dq_done_bytes).
  if constexpr (K_::kTma) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // The tile of this CTA (bwd_tile_scheduler.cuh).
  const BwdKvTile tile = Sched::tile(p);
  const int n_block = tile.n_block, hk = tile.hk, b = tile.b, m_begin = tile.m_begin, m_stop = tile.m_stop;
  const int iters = tile.steps * p.group;

  if (tid == 0) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    Barrier::init(&ss.kv_bar, 1);
    Sched::init_walk(p, ss, n_block, m_begin, m_stop, tile.part);
  }
  const typename Pipeline::Params pp = detail::tma_pipeline_params<Pipeline>(tid, 0, K_::kConsumers, K_::kTileBytes);
  Pipeline pipe_q(ss.pipe_q, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_do(ss.pipe_do, pp, Shape<_1, _1, _1>{});
  // pds2: a third ring of the same depth for the LSE and D values of each
  // query block, filled by thread 64 (warp 2 of the producer warpgroup) with
  // two bulk copies per stage and released with the Q / dO stage (its own
  // thread: in thread 0's loop the copies' addresses spilled at d128, where
  // the Q and dO tiles are two TMA boxes each).
  auto make_pipe_l = [&]() {
    if constexpr (K_::kPds2) {
      using PipelineL = typename K_::PipelineL;
      const typename PipelineL::Params pl =
          detail::tma_pipeline_params<PipelineL>(tid, 64, K_::kConsumers, 2u * BR * sizeof(float));
      return PipelineL(ss.pipe_l, pl, Shape<_1, _1, _1>{});
    } else {
      return 0;
    }
  };
  auto pipe_l = make_pipe_l();
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename K_::SmemK{});
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename K_::SmemQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dO.data()), typename K_::SmemQ{});

  if (warp_group == 0) {
    // ------------------------------------------------------------ producer
    cutlass::arch::warpgroup_reg_dealloc<K_::kProducerRegs>();
    if constexpr (K_::kTma) {
      if (tid / 32 == 1 && iters > 0) BwdDqWriter<K_>::run(p, ss, n_block, hk, b, m_begin, iters, tid);
      if (tid == 32 && p.dq_done != nullptr) BwdDqWriter<K_>::count_done(p);  // (every CTA, iters 0 too)
    }
    if constexpr (K_::kPds2) {
      if (tid == 64 && iters > 0) Mainloop::load_lse(p, ss, pipe_l, hk, b, m_begin);
    }
    // Thread 0: K and V once (one mbarrier), then the Q and dO tiles of every
    // (query head, query block) in the walk's order. (Here rather than in
    // BwdKvMainloop: as a function it changed the PTX, README "Structure: the
    // backward in role files".)
    if (tid == 0 && iters > 0) {
      Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
      Tensor mdO = p.tma_do.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
      Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      const int hkr = K_::kHs && p.walk_step == 1 ? hk / p.splits : hk;  // the kv head (hs: hk counts its splits)
      Tensor gK = local_tile(mK(_, _, hkr, b), Shape<Int<BC>, Int<D>>{}, make_coord(n_block, 0));
      Tensor gV = local_tile(mV(_, _, hkr, b), Shape<Int<BC>, Int<D>>{}, make_coord(n_block, 0));
      auto [tKg, tKs] = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVg, tVs] = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
      Barrier::arrive_and_expect_tx(&ss.kv_bar, K_::kKVBytes);
      copy(p.tma_k.with(ss.kv_bar), tKg, tKs);
      copy(p.tma_v.with(ss.kv_bar), tVg, tVs);
      PipelineState st = cutlass::make_producer_start_state<Pipeline>();
      for (int g = 0; g < p.group; ++g) {
        const int h = hk * p.group + g;
        Tensor gQ = local_tile(mQ(_, _, h, b), Shape<Int<BR>, Int<D>>{}, make_coord(_, 0));  // (BR, D, m)
        Tensor gdO = local_tile(mdO(_, _, h, b), Shape<Int<BR>, Int<D>>{}, make_coord(_, 0));
        auto [tQg, tQs] = tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
        auto [tdOg, tdOs] =
            tma_partition(p.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));
        auto load = [&](int m) {
          pipe_q.producer_acquire(st);
          copy(p.tma_q.with(*pipe_q.producer_get_barrier(st)), tQg(_, m), tQs(_, st.index()));
          pipe_do.producer_acquire(st);
          copy(p.tma_do.with(*pipe_do.producer_get_barrier(st)), tdOg(_, m), tdOs(_, st.index()));
          ++st;
        };
        if constexpr (K_::kPds) {
          // Not unrolled: unrolled (4x), its 24 registers spilled.
#pragma unroll 1
          for (int u = Sched::u_first(ss, m_begin, ss.m_stop); u != Sched::u_end(ss, m_begin, ss.m_stop);
               u += Sched::u_step(p))
            load(Sched::walk_m(p, u));
        } else {
          for (int m = Sched::m_first(m_begin, ss.m_stop); m != Sched::m_end(m_begin, ss.m_stop); m += Sched::kMStep) load(m);
        }
      }
    }
  } else {
    // ----------------------------------------------------------- consumers
    // pds: BwdKvMainloop::consume_pds; else BwdKvMainloop::consume (P^T, dS^T
    // in registers). Then the epilogue.
    cutlass::arch::warpgroup_reg_alloc<K_::kConsumerRegs>();
    const int ctid = tid - 128;
    const int lane = tid % 32;
    const int wq = (ctid % 128) / 32;
    const int key0 = n_block * BC + (ctid / 128) * 64 + wq * 16 + lane / 4;  // keys key0, key0 + 8
    const int col_lane = 2 * (lane % 4);

    typename K_::MmaKV mma_kv;
    Tensor tdVacc = partition_fragment_C(mma_kv, Shape<Int<BC>, Int<D>>{});
    Tensor tdKacc = partition_fragment_C(mma_kv, Shape<Int<BC>, Int<D>>{});
    static_assert(decltype(size(tdVacc))::value == D / 2, "64 x D accumulator per warpgroup");
    clear(tdVacc);
    clear(tdKacc);

    if constexpr (K_::kPds) {
      if (iters > 0) {
        Barrier::wait(&ss.kv_bar, 0);
        Mainloop::consume_pds(p, ss, pipe_q, pipe_do, pipe_l, n_block, hk, b, m_begin, tdVacc, tdKacc);
      }
    } else if (iters > 0) {
      Barrier::wait(&ss.kv_bar, 0);
      Mainloop::consume(p, ss, pipe_q, pipe_do, n_block, hk, b, m_begin, m_stop, ctid, lane, wq, key0, col_lane, tdVacc,
                        tdKacc);
    }

    if constexpr (K_::DQS == DqStrategy::kPartials) BwdKvEpilogue<K_>::zero_partials(p, m_begin, m_stop, ctid);
    // Epilogue: dK * scale and dV in bf16, keys < Sk (hs: the parts summed in split order first).
    BwdKvEpilogue<K_>::store(p, ss, tdKacc, tdVacc, hk, b, key0, col_lane);
  }
#endif
}

// The dq kernel (owning): Q and dO once, K and V rings over the key blocks.
template <class Cfg>
__global__ void __launch_bounds__(384, 1) attention_bwd_dq_wgmma_kernel(const __grid_constant__ typename BwdDq<Cfg>::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K_ = BwdDq<Cfg>;
  using T = typename K_::T;
  using Pipeline = typename K_::Pipeline;
  using PipelineState = typename K_::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K_::SharedStorage*>(smem_raw);

  const int tid = threadIdx.x;
  const int warp_group = tid / 128;
  // The tile of this CTA (bwd_tile_scheduler.cuh).
  const BwdDqTile tile = BwdDqScheduler<K_>::tile(p);
  const int m_block = tile.m_block, h = tile.h, b = tile.b, hk = tile.hk, n_min = tile.n_min, n_max = tile.n_max;

  if (tid == 0) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    Barrier::init(&ss.q_bar, 1);
  }
  const typename Pipeline::Params pp = detail::tma_pipeline_params<Pipeline>(tid, 0, K_::kConsumers, K_::kTileBytes);
  Pipeline pipe_k(ss.pipe_k, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_v(ss.pipe_v, pp, Shape<_1, _1, _1>{});
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename K_::SmemQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dO.data()), typename K_::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename K_::SmemK{});

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<K_::kProducerRegs>();
    if (tid == 0 && n_max > n_min) {
      Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
      Tensor mdO = p.tma_do.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
      Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      Tensor gQ = local_tile(mQ(_, _, h, b), Shape<Int<BR>, Int<D>>{}, make_coord(m_block, 0));
      Tensor gdO = local_tile(mdO(_, _, h, b), Shape<Int<BR>, Int<D>>{}, make_coord(m_block, 0));
      Tensor gK = local_tile(mK(_, _, hk, b), Shape<Int<BC>, Int<D>>{}, make_coord(_, 0));
      Tensor gV = local_tile(mV(_, _, hk, b), Shape<Int<BC>, Int<D>>{}, make_coord(_, 0));
      auto [tQg, tQs] = tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
      auto [tdOg, tdOs] = tma_partition(p.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));
      auto [tKg, tKs] = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVg, tVs] = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
      Barrier::arrive_and_expect_tx(&ss.q_bar, 2 * K_::kQBytes);
      copy(p.tma_q.with(ss.q_bar), tQg, tQs);
      copy(p.tma_do.with(ss.q_bar), tdOg, tdOs);
      PipelineState st = cutlass::make_producer_start_state<Pipeline>();
      for (int n = n_min; n < n_max; ++n) {
        pipe_k.producer_acquire(st);
        copy(p.tma_k.with(*pipe_k.producer_get_barrier(st)), tKg(_, n), tKs(_, st.index()));
        pipe_v.producer_acquire(st);
        copy(p.tma_v.with(*pipe_v.producer_get_barrier(st)), tVg(_, n), tVs(_, st.index()));
        ++st;
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<K_::kConsumerRegs>();
    const int ctid = tid - 128;
    const int lane = tid % 32;
    const int wq = (ctid % 128) / 32;
    const int row0 = m_block * BR + (ctid / 128) * 64 + wq * 16 + lane / 4;  // rows row0, row0 + 8
    const int col_lane = 2 * (lane % 4);
    const int64_t bh = int64_t(b) * p.H + h;

    typename K_::MmaS mma_s;
    typename K_::MmaDQ mma_dq;
    auto thr_s = mma_s.get_thread_slice(ctid);
    auto thr_dq = mma_dq.get_thread_slice(ctid);
    Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemKt{});
    Tensor tSrQ = thr_s.partition_fragment_A(sQ);
    Tensor tSrdO = thr_s.partition_fragment_A(sdO);
    Tensor tSrK = thr_s.partition_fragment_B(sK);  // (MMA, 1, D/16, ST)
    Tensor tSrV = thr_s.partition_fragment_B(sV);
    Tensor tQrK = thr_dq.partition_fragment_B(sKt);  // (MMA, 1, BC/16, ST)
    Tensor tdQacc = partition_fragment_C(mma_dq, Shape<Int<BR>, Int<D>>{});
    clear(tdQacc);
    Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<BR>, Int<BC>>{});
    Tensor tSrdP = partition_fragment_C(mma_s, Shape<Int<BR>, Int<BC>>{});
    static_assert(decltype(size(tSrS))::value == BC / 2, "64 x BC scores per warpgroup");
    Tensor tdSr = make_tensor<T>(partition_shape_A(mma_dq, Shape<Int<BR>, Int<BC>>{}));

    float lse2[2], dd[2];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      lse2[r] = INFINITY;
      dd[r] = 0.f;
      if (row < p.Sq) {
        const float x = p.lse[bh * p.Sq + row];
        lse2[r] = x == -INFINITY ? INFINITY : x * 1.4426950408889634f;
        dd[r] = p.Dvec[bh * p.Sq + row];
      }
    }
    const int diag = m_block * BR + (p.Sk - p.Sq);

    if (n_max > n_min) {
      Barrier::wait(&ss.q_bar, 0);
      PipelineState st;
      for (int n = n_min; n < n_max; ++n) {
        pipe_k.consumer_wait(st);
        detail::wg_gemm<true, false>(mma_s, tSrQ, tSrK(_, _, _, st.index()), tSrS);
        pipe_v.consumer_wait(st);
        detail::wg_gemm<true, false>(mma_s, tSrdO, tSrV(_, _, _, st.index()), tSrdP);
        warpgroup_wait<1>();  // S done
        if (p.softcap) {
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < BC / 2; ++v) tSrS(v) = detail::softcap_raw(tSrS(v), p.cap_k, p.cap_c);
        }
        const int kb = n * BC;
        const bool need_mask = kb + BC > p.Sk || (p.causal && kb + BC - 1 > diag) ||
                               (p.window > 0 && kb <= diag + BR - 1 - p.window);
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < BC / 2; ++v) {
          const int r = (v / 2) % 2;
          float e = detail::ex2(fmaf(tSrS(v), p.scale_log2, -lse2[r]));
          if (need_mask) {
            const int col = kb + 8 * (v / 4) + col_lane + (v % 2);
            const int row = row0 + 8 * r;
            if (col >= p.Sk || (p.causal && col > row + (p.Sk - p.Sq)) ||
                (p.window > 0 && col <= row + (p.Sk - p.Sq) - p.window))
              e = 0.f;
          }
          tSrS(v) = e;
        }
        if (p.softcap) {  // P times 1 - t^2 (t recovered from P and the LSE): dS below unchanged
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < BC / 2; ++v) tSrS(v) *= detail::softcap_grad(tSrS(v), lse2[(v / 2) % 2], p.cap_t);
        }
        warpgroup_wait<0>();  // dP done
        pipe_v.consumer_release(st);
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < BC / 2; v += 2) {
          const int r = (v / 2) % 2;
          const __nv_bfloat162 two =
              __floats2bfloat162_rn(tSrS(v) * (tSrdP(v) - dd[r]), tSrS(v + 1) * (tSrdP(v + 1) - dd[r]));
          tdSr(v) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[0]);
          tdSr(v + 1) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[1]);
        }
        detail::wg_gemm<false, true>(mma_dq, tdSr, tQrK(_, _, _, st.index()), tdQacc);
        warpgroup_wait<0>();
        pipe_k.consumer_release(st);
        warpgroup_fence_operand(tdSr);
        ++st;
      }
    }

    BwdDqEpilogue<K_>::store(p, tdQacc, bh, row0, col_lane);
  }
#endif
}

// -------------------------------------------------------------------- host
namespace detail {
inline void check_ptr(const void* ptr, const char* name) {
  if (ptr == nullptr) throw Error(std::string("attention wgmma backward: ") + name + " is null");
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
    throw Error(std::string("attention wgmma backward: ") + name + " must be 16-byte aligned (TMA)");
}
template <class T>
auto gtensor(const void* ptr, int S, int D, int heads, int B) {
  return make_tensor(make_gmem_ptr(static_cast<T const*>(ptr)), make_shape(S, D, heads, B),
                     make_stride(int64_t(D), _1{}, int64_t(S) * D, int64_t(heads) * S * D));
}
}  // namespace detail

template <class Cfg>
size_t bwd_kv_smem_bytes() {
  return sizeof(typename BwdKv<Cfg>::SharedStorage);
}
template <class Cfg>
size_t bwd_dq_smem_bytes() {
  return sizeof(typename BwdDq<Cfg>::SharedStorage);
}

template <class Cfg>
void launch_bwd_kv(const AttentionProblem& pr, const AttentionArgs& a, const float* Dvec, float* dq,
                   cudaStream_t stream, int64_t kb_begin, int64_t kb_count, int64_t unit_begin, int64_t units,
                   int* sem, float* stage, bool spt, KvHeadSplit hs, int* done) {
  using K_ = BwdKv<Cfg>;
  using T = typename K_::T;
  detail::check_ptr(a.Q, "Q");
  detail::check_ptr(a.K, "K");
  detail::check_ptr(a.V, "V");
  detail::check_ptr(a.dO, "dO");
  detail::check_ptr(a.dK, "dK");
  detail::check_ptr(a.dV, "dV");
  if (a.lse_in == nullptr) throw Error("attention wgmma backward: lse_in is null");
  if (Dvec == nullptr) throw Error("attention wgmma backward: workspace is null");
  if (Cfg::DQS != DqStrategy::kNone && dq == nullptr) throw Error("attention wgmma backward: workspace is null");
  if (Cfg::DQ_ORDERED && sem == nullptr)
    throw Error("attention wgmma backward: ordered dQ needs its semaphores");
  if (K_::kTma && a.dQ == nullptr) throw Error("attention wgmma backward: dQ is null");
  if (K_::kPds2 && stage == nullptr) throw Error("attention wgmma backward: pds2 needs its LSE / D staging workspace");
  const int B = int(pr.B), H = int(pr.H), Hkv = int(pr.Hkv), Sq = int(pr.Sq), Sk = int(pr.Sk);
  constexpr int D = Cfg::D;
  auto gq = detail::gtensor<T>(a.Q, Sq, D, H, B);
  auto gdo = detail::gtensor<T>(a.dO, Sq, D, H, B);
  auto gk = detail::gtensor<T>(a.K, Sk, D, Hkv, B);
  auto gv = detail::gtensor<T>(a.V, Sk, D, Hkv, B);
  const Options opt(pr);
  typename K_::Params P{
      make_tma_copy(SM90_TMA_LOAD{}, gq, take<0, 2>(typename K_::SmemQ{}), Shape<Int<Cfg::BR>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gdo, take<0, 2>(typename K_::SmemQ{}), Shape<Int<Cfg::BR>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gk, typename K_::SmemK{}, Shape<Int<Cfg::BC>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gv, typename K_::SmemK{}, Shape<Int<Cfg::BC>, Int<D>>{}, _1{}),
      B, H, Hkv, Sq, Sk, H / Hkv,
      (Sq + Cfg::BR - 1) / Cfg::BR,
      pr.causal ? 1 : 0,
      float(pr.softmax_scale()),
      float(pr.softmax_scale() * 1.4426950408889634),
      a.lse_in,
      Dvec,
      static_cast<T*>(a.dK),
      static_cast<T*>(a.dV),
      dq,
      sem,
      0, 0, 0,
      opt.window, opt.softcap, opt.cap_k, opt.cap_c, opt.cap_t,
      nullptr, nullptr,
      kDqOrderDesc, 0, 0, 0, 0, 1u, 0,
      1, 1, nullptr, nullptr, nullptr};
  const int64_t n_kb = (pr.Sk + Cfg::BC - 1) / Cfg::BC;
  if (kb_count < 0) kb_count = n_kb - kb_begin;
  // Ordered: a key block waits for the ones before it, so the launch holds
  // every key block of its units, in blockIdx.x order (the hardware starts
  // blocks in linear index order: a waiting block's predecessors have started).
  // TMA: the launch converts the whole accumulator into dQ afterwards.
  if ((Cfg::DQ_ORDERED || Cfg::DQ_TMA) && (kb_begin != 0 || kb_count != n_kb))
    throw Error("attention wgmma backward: ordered and TMA dQ launch every key block at once");
  P.kb_begin = int(kb_begin);
  P.kb_count = int(kb_count);
  P.unit_begin = int(unit_begin);
  int dev = 0, sms = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // spt1 (bwd_dq_order.h): the causal or shift order where it applies, else
  // today's (the kOrderRt kernels only).
  if (spt && !K_::kOrderRt) throw Error("attention wgmma backward: spt1 needs an ordered pds2 / pds3 / sp1 kv kernel");
  if constexpr (K_::kOrderRt) {
    P.order = dq_order_for(spt, pr.causal, opt.window, int(n_kb), P.m_blocks, sms);
    const DqTurnLine l = dq_turn_line(P.order, Cfg::BR, Cfg::BC, Sq, Sk, opt.window, P.m_blocks, int(n_kb));
    const DqDiv dv = dq_div(l.c);
    P.turn_a = l.a;
    P.turn_b = l.b;
    P.turn_cap = l.cap;
    P.turn_base0 = l.base0;
    P.turn_mul = dv.mul;
    P.turn_sh32 = dv.sh32;
  }
  if (hs.splits > 1) {
    // hs: the query heads of a kv head over hs.splits CTAs per key block; ws
    // (hs.walk): the walk of a key block over hs.splits CTAs, each every
    // hs.splits-th step, causal order only (elsewhere the walks run whole:
    // the tail it shortens is the causal grid's). The dK, dV parts are added
    // in split order (KvHeadSplit, attention_wgmma_bwd.h).
    if (!K_::kHs || !spt)
      throw Error("attention wgmma backward: hs / ws need the ew1 sp1 spt1 d128 kv kernel or pds4 pb5 built with "
                  "the split (BwdKv::kHs)");
    if (hs.walk && !K_::kWs)
      throw Error("attention wgmma backward: ws (the walk split) needs the ew1 sp1 spt1 d128 kv kernel");
    if (!hs.walk && (H / Hkv) % hs.splits != 0)
      throw Error("attention wgmma backward: hs" + std::to_string(hs.splits) + " needs H / Hkv (" +
                  std::to_string(H / Hkv) + ") to be a multiple of it");
    if (hs.acc == nullptr || hs.sem == nullptr)
      throw Error("attention wgmma backward: hs / ws need their dK / dV workspace");
    if constexpr (K_::kHs) {
      if (!hs.walk || P.order == kDqOrderCausal) {
        P.splits = hs.splits;
        P.walk_step = hs.walk ? hs.splits : 1;
        if (!hs.walk) P.group = H / Hkv / hs.splits;
        P.dkv_acc = hs.acc;
        P.dkv_sem = hs.sem;
      }
    }
  }
  if (units < 0) units = pr.B * pr.Hkv * P.splits - unit_begin;
  if (units > 65535) throw Error("attention wgmma backward: more than 65535 units (the kv kernel's grid y)");
  if constexpr (K_::kPds2) {
    // The padded LSE and D (pds_stage_bytes: two halves, 256-byte aligned).
    const int64_t rows = pr.B * pr.H, n = rows * int64_t(P.m_blocks) * Cfg::BR;
    float* lse2 = stage;
    float* dvec = stage + pds_stage_bytes(pr, Cfg::BR) / 2 / sizeof(float);
    const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, int64_t(std::max(sms, 1)) * 32));
    attention_bwd_pds_stage_kernel<Cfg::BR><<<blocks, 256, 0, stream>>>(a.lse_in, Dvec, lse2, dvec, rows, Sq,
                                                                         P.m_blocks);
    DETFUSE_CUDA_CHECK(cudaGetLastError());
    P.lse2s = lse2;
    P.dvecs = dvec;
  }
  auto kernel = attention_bwd_kv_wgmma_kernel<Cfg>;
  const size_t smem = bwd_kv_smem_bytes<Cfg>();
  DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  if (done != nullptr && !K_::kTma) throw Error("attention wgmma backward: the overlapped convert is TMA dQ's");
  P.dq_done = done;
  dim3 grid(unsigned(kb_count), unsigned(units), 1);
  kernel<<<grid, K_::THREADS, smem, stream>>>(P);
  DETFUSE_CUDA_CHECK(cudaGetLastError());
  if constexpr (K_::kTma) {
    const int64_t tiles = pr.B * pr.H * int64_t(P.m_blocks);
    // A loop over tiles: at most 8 blocks of 256 threads per SM of this device
    // (each value is rounded on its own, so the grid changes no bit).
    const unsigned blocks = unsigned(std::min<int64_t>(tiles, int64_t(std::max(sms, 1)) * 8));
    const bool aligned16 = reinterpret_cast<uintptr_t>(a.dQ) % 16 == 0;
    const DqConvertWait wait{done, H, H / Hkv, P.splits, int(kb_count)};
    cudaLaunchConfig_t lc{};
    lc.gridDim = dim3(blocks);
    lc.blockDim = dim3(256);
    lc.stream = stream;
    // Overlapped (done): launched once every kv CTA has started (programmatic
    // stream serialization; the kv kernel's griddepcontrol.launch_dependents).
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = pdl;
    lc.numAttrs = done != nullptr ? 1 : 0;
    DETFUSE_CUDA_CHECK(cudaLaunchKernelEx(&lc, attention_bwd_dq_tma_convert_kernel<Cfg>, static_cast<const float*>(dq),
                                          static_cast<__nv_bfloat16*>(a.dQ), tiles, Sq, P.m_blocks,
                                          static_cast<const int*>(K_::kOrderedDq ? sem : nullptr), aligned16, P.scale,
                                          wait));
  }
}

template <class Cfg>
void launch_bwd_dq(const AttentionProblem& pr, const AttentionArgs& a, const float* Dvec, cudaStream_t stream) {
  using K_ = BwdDq<Cfg>;
  using T = typename K_::T;
  detail::check_ptr(a.Q, "Q");
  detail::check_ptr(a.K, "K");
  detail::check_ptr(a.V, "V");
  detail::check_ptr(a.dO, "dO");
  detail::check_ptr(a.dQ, "dQ");
  if (a.lse_in == nullptr) throw Error("attention wgmma backward: lse_in is null");
  if (Dvec == nullptr) throw Error("attention wgmma backward: workspace is null");
  const int B = int(pr.B), H = int(pr.H), Hkv = int(pr.Hkv), Sq = int(pr.Sq), Sk = int(pr.Sk);
  constexpr int D = Cfg::D;
  auto gq = detail::gtensor<T>(a.Q, Sq, D, H, B);
  auto gdo = detail::gtensor<T>(a.dO, Sq, D, H, B);
  auto gk = detail::gtensor<T>(a.K, Sk, D, Hkv, B);
  auto gv = detail::gtensor<T>(a.V, Sk, D, Hkv, B);
  const Options opt(pr);
  typename K_::Params P{
      make_tma_copy(SM90_TMA_LOAD{}, gq, typename K_::SmemQ{}, Shape<Int<Cfg::BR>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gdo, typename K_::SmemQ{}, Shape<Int<Cfg::BR>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gk, take<0, 2>(typename K_::SmemK{}), Shape<Int<Cfg::BC>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gv, take<0, 2>(typename K_::SmemK{}), Shape<Int<Cfg::BC>, Int<D>>{}, _1{}),
      B, H, Hkv, Sq, Sk, H / Hkv,
      (Sq + Cfg::BR - 1) / Cfg::BR,
      pr.causal ? 1 : 0,
      float(pr.softmax_scale()),
      float(pr.softmax_scale() * 1.4426950408889634),
      a.lse_in,
      Dvec,
      static_cast<T*>(a.dQ),
      opt.window, opt.softcap, opt.cap_k, opt.cap_c, opt.cap_t};
  auto kernel = attention_bwd_dq_wgmma_kernel<Cfg>;
  const size_t smem = bwd_dq_smem_bytes<Cfg>();
  DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  dim3 grid(unsigned(P.m_blocks), unsigned(H), unsigned(B));
  kernel<<<grid, K_::THREADS, smem, stream>>>(P);
  DETFUSE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detfuse::attention::wg
