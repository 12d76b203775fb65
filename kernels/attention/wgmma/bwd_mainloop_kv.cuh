// The backward kv kernel's mainloop (FlashAttention-3's mainloop_bwd_sm90
// role, read to learn, not copied): pds2's LSE / D loads (thread 64, bulk
// copies into a third ring) and the consumer warpgroups' walk of the pds
// variants over the query blocks (`consume_pds`: P^T and dS^T through shared
// memory, pds1 / pds2 / pds3 and their sp1, sp2, dc1, rs1, pb1 forms): S^T = K Q^T
// and dP^T = V dO^T, P^T, dV += P^T dO, dS^T = P^T (dP^T - D), dK += dS^T Q,
// the dQ part dS K handed to bwd_dq_writer.cuh; the consumers' walk without
// pds (`consume`, since session 20) and its dQ product (`dq_product_ds`).
// Thread 0's K, V, Q, dO loads stay in the kernel (attention_wgmma_bwd.cuh):
// as a function here it changed the PTX (README "Structure: the backward in
// role files").
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include <cuda/ptx>

#include "kernels/attention/wgmma/bwd_dq_writer.cuh"
#include "kernels/attention/wgmma/bwd_epilogue.cuh"
#include "kernels/attention/wgmma/bwd_kernel_traits.cuh"
#include "kernels/attention/wgmma/bwd_softmax.cuh"
#include "kernels/attention/wgmma/bwd_tile_scheduler.cuh"
#include "kernels/attention/wgmma/wgmma_helpers.cuh"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace detfuse::attention::wg {

using namespace cute;

namespace detail {
// x, opaque to the compiler's loop-invariant code motion (a volatile move):
// what is computed from it is recomputed where it is used. pds3's P^T / dS^T
// store addresses (16 swizzled 8-query chunks x 2 key rows, hoisted out of the
// query-block loop) were spilled (116 bytes); recomputed per block from one
// opaque base they cost a few integer operations and no registers across the loop.
__device__ __forceinline__ int opaque(int x) {
  int y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
// A 64 x 64 (per warpgroup) product of two K-major bf16 shared-memory tiles
// into fp32, its first k step (scale-d false) written with write-only
// accumulator operands: a fresh accumulator needs no instruction before it.
// (Through cute's atom, whose operands are read-write, the compiler zeroes
// the uninitialized accumulator with 32 moves at the top of the trip, and
// sp1 / sp2 have the previous block's dK in flight there: ptxas then
// serializes every wgmma of the kernel, C7514 / C7515.) Same operands,
// layouts and order of products as wg_gemm<true, false>; the asm is cute's
// SS atom for m64n64k16 bf16 (K-major A and B, scales 1) with "=f" outputs
// and the scale-d predicate false. Checked on the device by
// AttentionWgmmaBwdGpu.SpBitwiseEqualsPds2 (the same bits as pds2).
template <class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wg_gemm_fresh_n64(TiledMma& mma, TA const& tA, TB const& tB, TC& tC) {
  static_assert(decltype(size(tC))::value == 32, "64 x 64 fp32 per warpgroup: 32 registers a thread");
  static_assert(decltype(size<0>(tA))::value == 1 && decltype(size<1>(tA))::value == 1, "one descriptor per k step");
  warpgroup_arrive();
  const uint64_t da = tA(0, 0, 0), db = tB(0, 0, 0);
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n"
      "}\n"
      : "=f"(tC(0)), "=f"(tC(1)), "=f"(tC(2)), "=f"(tC(3)), "=f"(tC(4)), "=f"(tC(5)), "=f"(tC(6)), "=f"(tC(7)),
        "=f"(tC(8)), "=f"(tC(9)), "=f"(tC(10)), "=f"(tC(11)), "=f"(tC(12)), "=f"(tC(13)), "=f"(tC(14)),
        "=f"(tC(15)), "=f"(tC(16)), "=f"(tC(17)), "=f"(tC(18)), "=f"(tC(19)), "=f"(tC(20)), "=f"(tC(21)),
        "=f"(tC(22)), "=f"(tC(23)), "=f"(tC(24)), "=f"(tC(25)), "=f"(tC(26)), "=f"(tC(27)), "=f"(tC(28)),
        "=f"(tC(29)), "=f"(tC(30)), "=f"(tC(31))
      : "l"(da), "l"(db), "r"(0));
  mma.accumulate_ = GMMA::ScaleOut::One;
  CUTLASS_PRAGMA_UNROLL
  for (int k = 1; k < size<2>(tA); ++k) cute::gemm(mma, tA(_, _, k), tB(_, _, k), tC);
  warpgroup_commit_batch();
  warpgroup_fence_operand(tC);
}
// rs1: the k steps of half HQ (0, 1) of a register-sourced product into an
// existing accumulator (one wgmma group): the two halves issued in order sum
// the k steps as wg_gemm<false, true> does.
template <int HQ, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wg_gemm_rs_half(TiledMma& mma, TA& tA, TB const& tB, TC& tC) {
  constexpr int kHalf = decltype(size<2>(tA))::value / 2;
  warpgroup_fence_operand(tA);
  warpgroup_fence_operand(tC);
  warpgroup_arrive();
  mma.accumulate_ = GMMA::ScaleOut::One;
  CUTLASS_PRAGMA_UNROLL
  for (int k = 0; k < kHalf; ++k) cute::gemm(mma, tA(_, _, HQ * kHalf + k), tB(_, _, HQ * kHalf + k), tC);
  warpgroup_commit_batch();
  warpgroup_fence_operand(tC);
  warpgroup_fence_operand(tA);
}
// rs1: values v, v + 1 of a bf16 A fragment (value v of the 64 x BR C
// fragment of S^T or dP^T is value v of the A fragment of a K = BR product).
template <class TA>
__device__ __forceinline__ void set_a_pair(TA& tA, int v, __nv_bfloat162 two) {
  using T = typename TA::value_type;
  tA(v) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[0]);
  tA(v + 1) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[1]);
}
// pb3 and later (pb2 until session 32): a bf16 A fragment (compact, 16-byte aligned register array) as
// 32-bit words, word v / 2 holding values v, v + 1: the view cute's RS wgmma
// reads it through (recast to its uint32_t registers). Written as words, no
// bf16 value lives in a 16-bit register of its own (set_a_pair's halves cost
// ptxas a PRMT each, and an unpack later).
template <class TA>
__device__ __forceinline__ uint32_t* a_words(TA& tA) {
  static_assert(sizeof(typename TA::value_type) == 2, "bf16 fragment");
  return reinterpret_cast<uint32_t*>(raw_pointer_cast(tA.data()));
}
__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 two) { return *reinterpret_cast<const uint32_t*>(&two); }
// stmatrix x4 (m8n8, b16) of words w[0 .. 3] at the shared-memory address
// addr (this lane's row of matrix lane / 8; pds4's dS^T: dst4_stsm).
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t* w) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]),
               "r"(w[2]), "r"(w[3]));
}
}  // namespace detail

template <class K_>
struct BwdKvMainloop {
  using T = typename K_::T;
  using Params = typename K_::Params;
  using SharedStorage = typename K_::SharedStorage;
  using Pipeline = typename K_::Pipeline;
  using PipelineState = typename K_::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using Sched = BwdKvScheduler<K_>;

  // pds2 (thread 64, iters > 0): LSE and D of each (query head, query block),
  // in the Q / dO order.
  template <class PipeL>
  __device__ __forceinline__ static void load_lse(const Params& p, SharedStorage& ss, PipeL& pipe_l, int hk, int b,
                                                  int m_begin) {
    [[maybe_unused]] constexpr int D = K_::D, BR = K_::BR;
    // LSE and D of each (query head, query block), in the Q / dO order.
    auto sl = cutlass::make_producer_start_state<typename K_::PipelineL>();
    for (int g = 0; g < p.group; ++g) {
      const int64_t bhm = (int64_t(b) * p.H + hk * p.group + g) * p.m_blocks;
#pragma unroll 1
      for (int u = Sched::u_first(ss, m_begin, ss.m_stop); u != Sched::u_end(ss, m_begin, ss.m_stop);
           u += Sched::u_step(p)) {
        const int m = Sched::walk_m(p, u);
        pipe_l.producer_acquire(sl);
        uint64_t* bar = pipe_l.producer_get_barrier(sl);
        SM90_BULK_COPY_G2S::copy(p.lse2s + (bhm + m) * BR, bar, &ss.lse2[0][sl.index()][0],
                                 int32_t(BR * sizeof(float)));
        SM90_BULK_COPY_G2S::copy(p.dvecs + (bhm + m) * BR, bar, &ss.dvec[0][sl.index()][0],
                                 int32_t(BR * sizeof(float)));
        ++sl;
      }
    }
  }

  // The consumers' walk of the pds variants (Cfg::PDS, TMA dQ; FlashAttention-4's
  // sm90 schedule): per query block, S^T = K Q^T and dP^T = V dO^T (SS, their
  // accumulators local to the step), P^T to shared memory (bf16) and dV += P^T
  // dO (SS) issued; dS^T = P^T (dP^T - D) to shared memory, then dK += dS^T Q
  // and dQ part = dS K (SS, dS through the transposed view), so the S^T and
  // dP^T registers are dead before the dQ accumulator is live. dQ is handed to
  // the writer warp as in the other TMA variants. Registers at the peak: dV, dK
  // (D / 2 each), S^T, dP^T (BR / 2 each) per thread.
  // sp1, sp2 (K_::kSp, FlashAttention-3's order): dQ issued before dK and only
  // the dQ part waited on; dK stays in flight into the next block (the Q stage
  // released there, after its S^T wait); S^T and dP^T start from write-only
  // accumulators (wg_gemm_fresh_n64). sp2 (K_::kSp2): the dQ part, scaled, is
  // handed to the writer warp in the next block, right after its S^T issue:
  // block m's part is carried (tdQcarry) into block m + 1 and handed over there
  // once S^T (m + 1) is in flight behind dK (m); the last block's after the
  // walk. The scaling (the same single multiply as the other variants' tile
  // stores) is done before the back edge, so the carried registers are
  // defined by FMULs: read there from the accumulator itself (or from plain
  // moves of it, which ptxas propagates), ptxas cannot tell the dQ product of
  // the previous trip has completed and injects a wait for every product in
  // flight (C7517).
  // dc1 (K_::kDc, on sp1): each warpgroup's dQ part over its own 64 keys (the
  // d = 64 K split) into its own dQ tile, its dS^T rows ordered by its own
  // barrier: nothing in the walk waits for the other warpgroup.
  // rs1 (K_::kRs, pds3 or pds2 at d = 128): P^T and dS^T also converted to bf16 A fragments in
  // registers; dV and dK read them there (RS), P^T is never stored and dK is
  // issued before the dS^T barrier (which only dQ then waits for).
  // pb1 (K_::kPb, ew2 pds3 at d = 64 or pds2 at d = 128): P^T rounded to
  // bf16 into dV's A fragment right after the exp and dV issued from
  // registers at once; dS^T from the bf16 P^T, stored for dQ and dK's A
  // fragment (pb_dv_ds); ew2's step end with dK RS.
  template <class PipeL, class Acc>
  __device__ __forceinline__ static void consume_pds(const Params& p, SharedStorage& ss, Pipeline& pipe_q,
                                                     Pipeline& pipe_do, PipeL& pipe_l, int n_block, int hk, int b,
                                                     int m_begin, Acc& tdVacc, Acc& tdKacc) {
    using T = typename K_::T;
    using PipelineState = typename K_::PipelineState;
    constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;
    const int ctid = int(threadIdx.x) - 128;
    const int lane = ctid % 32, wq = (ctid % 128) / 32, wg = ctid / 128, t = ctid % 128;
    const int kl0 = wg * 64 + wq * 16 + lane / 4;  // keys kl0, kl0 + 8 of the block (this thread's rows)
    const int key0 = n_block * BC + kl0;
    const int col_lane = 2 * (lane % 4);
    const int diag_off = p.Sk - p.Sq;
    // The walk's end from shared memory (kept in a register from the kernel's
    // start, across setmaxnreg, ptxas spilled it).
    const int m_stop = ss.m_stop;

    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemK{});
    Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename K_::SmemK{});
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename K_::SmemQ{});
    Tensor sdO = make_tensor(make_smem_ptr(ss.dO.data()), typename K_::SmemQ{});
    Tensor sQt = make_tensor(make_smem_ptr(ss.q.data()), typename K_::SmemQt{});
    Tensor sdOt = make_tensor(make_smem_ptr(ss.dO.data()), typename K_::SmemQt{});
    Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemKt{});
    Tensor sPt = make_tensor(make_smem_ptr(ss.pt()), typename K_::SmemPt{});    // (BC, BR)
    __nv_bfloat16* const pt_base = reinterpret_cast<__nv_bfloat16*>(ss.pt());

    typename K_::MmaSdP mma_sdp;
    typename K_::MmaKVss mma_kv;
    typename K_::MmaDQpds mma_dq;
    // pb2 / pb3: the operand slices at the warpgroup's first thread, warp-uniform
    // (detail::wg_slice_thread: descriptors in uniform registers); every fragment
    // below is either such an operand or shaped only (partition_fragment_C).
    const int slice = K_::kWgUniform ? detail::wg_slice_thread(ctid) : ctid;
    auto thr_sdp = mma_sdp.get_thread_slice(slice);
    auto thr_kv = mma_kv.get_thread_slice(slice);
    Tensor tSrK = thr_sdp.partition_fragment_A(sK);  // (MMA, 1, D/16)
    Tensor tSrV = thr_sdp.partition_fragment_A(sV);
    Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);  // (MMA, 1, D/16, ST)
    Tensor tSrdO = thr_sdp.partition_fragment_B(sdO);
    Tensor tKVrP = thr_kv.partition_fragment_A(sPt);  // (MMA, 1, BR/16)
    Tensor sdSt = make_tensor(make_smem_ptr(ss.ds.data()), typename K_::SmemPt2{});  // (BC, BR, 2)
    Tensor sdS = make_tensor(make_smem_ptr(ss.ds.data()), typename K_::SmemPtT2{});  // (BR, BC, 2) view
    Tensor tKVrdS = thr_kv.partition_fragment_A(sdSt);                               // (MMA, 1, BR/16, 2)
    Tensor tKVrdO = thr_kv.partition_fragment_B(sdOt);  // (MMA, 1, BR/16, ST)
    Tensor tKVrQ = thr_kv.partition_fragment_B(sQt);
    // rs1: the register-sourced form of the dV, dK products (B as above).
    typename K_::MmaKV mma_kvr;
    auto thr_kvr = mma_kvr.get_thread_slice(slice);
    Tensor tKVRrdO = thr_kvr.partition_fragment_B(sdOt);  // (MMA, 1, BR/16, ST)
    Tensor tKVRrQ = thr_kvr.partition_fragment_B(sQt);

    PipelineState st;
    [[maybe_unused]] typename K_::PipelineL::PipelineState stl;  // pds3: the one-stage LSE / D ring
    int it = 0;
    // sp1: the Q stage of the block before, held until its dK product (in
    // flight across the loop's back edge) has completed.
    [[maybe_unused]] PipelineState st_q_held;
    float tdQcarry[K_::kDqPerThread];  // sp2: block m's dQ part, scaled (above)
    for (int g = 0; g < p.group; ++g) {
      const int h = hk * p.group + g;
      const int64_t bh = int64_t(b) * p.H + h;
      for (int u = Sched::u_first(ss, m_begin, m_stop); u != Sched::u_end(ss, m_begin, m_stop); u += Sched::u_step(p), ++it) {
        const int m = Sched::walk_m(p, u);
        const int q0 = m * BR, buf = it % 2;
        // LSE (log2 units, +inf where P must be 0) and D of the BR rows: loaded
        // by warpgroup 0, one copy for both (double-buffered: the other buffer
        // may still be read by the previous block's slower warps). pds2: in
        // the LSE / D ring already (thread 64's bulk copies).
        float ld_lse = INFINITY, ld_d = 0.f;
        if (!K_::kPds2 && wg == 0 && t < BR && q0 + t < p.Sq) {
          const float x = __ldg(p.lse + bh * p.Sq + q0 + t);
          ld_lse = x == -INFINITY ? INFINITY : x * 1.4426950408889634f;
          ld_d = __ldg(p.Dvec + bh * p.Sq + q0 + t);
        }
        Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<BC>, Int<BR>>{});
        Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<BC>, Int<BR>>{});
        static_assert(decltype(size(tSrS))::value == BR / 2, "64 x BR scores per warpgroup");
        // rs1: P^T and dS^T as A fragments (bf16; value v is value v of the C
        // fragment tSrS: the k16 A fragment of a 64 x 16 slice is the C
        // fragment of its two 8-column groups, see the kernel's tPr).
        [[maybe_unused]] Tensor tPr = make_tensor<T>(partition_shape_A(mma_kvr, Shape<Int<BC>, Int<BR>>{}));
        [[maybe_unused]] Tensor tdSr = make_tensor<T>(partition_shape_A(mma_kvr, Shape<Int<BC>, Int<BR>>{}));
        pipe_q.consumer_wait(st);
        if constexpr (K_::kSp)  // fresh accumulators: see wg_gemm_fresh_n64 (the previous dK is in flight)
          detail::wg_gemm_fresh_n64(mma_sdp, tSrK, tSrQ(_, _, _, st.index()), tSrS);
        else
          detail::wg_gemm<true, false>(mma_sdp, tSrK, tSrQ(_, _, _, st.index()), tSrS);
        // sp2: the previous block's dQ part, with dK (m - 1) and S^T (m) in flight
        // (dP^T not yet: its 32 registers on top would be 224 live).
        if constexpr (K_::kSp2) {
          if (it > 0) BwdDqWriter<K_>::hand_carry(ss, tdQcarry, ctid, it - 1);
        }
        pipe_do.consumer_wait(st);
        if constexpr (K_::kSp)
          detail::wg_gemm_fresh_n64(mma_sdp, tSrV, tSrdO(_, _, _, st.index()), tSrdP);
        else
          detail::wg_gemm<true, false>(mma_sdp, tSrV, tSrdO(_, _, _, st.index()), tSrdP);
        if constexpr (!K_::kPds2) {
          if (wg == 0 && t < BR) {
            ss.lse2[0][buf][t] = ld_lse;
            ss.dvec[0][buf][t] = ld_d;
          }
          detail::named_sync(K_::kBarLse, 256);
        }
        if constexpr (K_::kLOne)
          pipe_l.consumer_wait(stl);  // this block's LSE and D
        else if constexpr (K_::kPds2)
          pipe_l.consumer_wait(st);
        const int sb = K_::kLOne ? 0 : K_::kPds2 ? st.index() : buf;
        const float* lse2 = ss.lse2[0][sb];
        const float* dd = ss.dvec[0][sb];
        // pds2: dS^T tile of this block's parity (the other may still be read
        // by the other warpgroup's dQ product of the previous block). dc1: one
        // tile, each warpgroup reading only its own rows: its dK (m - 1), the
        // last product to read them, is retired by the S^T wait before the stores.
        const int dsb = K_::kPds2 && !K_::kDc ? buf : 0;
        __nv_bfloat16* const ds_base = reinterpret_cast<__nv_bfloat16*>(ss.ds.data()) + dsb * (BC * BR);
        warpgroup_wait<1>();  // S^T done (sp1: and, issued before it, the previous block's dK)
        if constexpr (K_::kSp) {
          // The previous block's Q stage: its S^T and dK products have completed.
          if (it > 0) pipe_q.consumer_release(st_q_held);
        }
        if (p.softcap) {
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < BR / 2; ++v) tSrS(v) = detail::softcap_raw(tSrS(v), p.cap_k, p.cap_c);
        }
        const bool need_mask = n_block * BC + BC > p.Sk || (p.causal && n_block * BC + BC - 1 > q0 + diag_off) ||
                               (p.window > 0 && n_block * BC <= q0 + BR - 1 + diag_off - p.window);
        scores_to_p(p, tSrS, lse2, need_mask, q0, key0, col_lane, diag_off);
        if constexpr (K_::kRs) {
          // rs1: dP^T waited on first, then per half of the queries (rs_half).
          warpgroup_wait<0>();  // dP^T done
          rs_half<0>(p, tSrS, tSrdP, tPr, tdSr, ds_base, lse2, dd, kl0, col_lane, mma_kvr, tKVRrdO, tKVRrQ,
                     st.index(), tdVacc, tdKacc);
          rs_half<1>(p, tSrS, tSrdP, tPr, tdSr, ds_base, lse2, dd, kl0, col_lane, mma_kvr, tKVRrdO, tKVRrQ,
                     st.index(), tdVacc, tdKacc);
        } else if constexpr (K_::kPbFa) {
          fa_ds_dv(p, tSrS, tSrdP, tPr, tdSr, ds_base, lse2, dd, kl0, col_lane, mma_kvr, tKVRrdO, st.index(), tdVacc);
        } else if constexpr (K_::kPb) {
          pb_dv_ds(p, tSrS, tSrdP, tPr, tdSr, ds_base, lse2, dd, kl0, col_lane, mma_kvr, tKVRrdO, st.index(), tdVacc);
        } else {
          pt_dv_ds(p, tSrS, tSrdP, pt_base, ds_base, lse2, dd, kl0, col_lane, wg, mma_kv, tKVrP, tKVrdO, st.index(),
                   tdVacc);
        }
        cutlass::arch::fence_view_async_shared();
        if constexpr (K_::kDc) {
          own_rows_sync(wg);  // dc1: dK and dQ of this warpgroup read its own 64 dS^T rows only
        } else {
          detail::named_sync(K_::kBarDs, 256);  // both warpgroups' dS^T: dQ reads every key
        }
        if constexpr (K_::kLOne) {
          // Every consumer warp has read this block's LSE and D (P, softcap,
          // dS: before the barrier above; the release is one thread per
          // warpgroup, so not before it): the next block's may come.
          pipe_l.consumer_release(stl);
          ++stl;
        }
        Tensor tKVrdSb = tKVrdS(_, _, _, dsb);
        if constexpr (!K_::kSp && !K_::kRs && K_::kEw < 2)
          detail::wg_gemm<false, false>(mma_kv, tKVrdSb, tKVrQ(_, _, _, st.index()), tdKacc);
        // (pds4: the part transposed, D x BR: dQ^T = K^T dS^T.)
        Tensor tdQacc = partition_fragment_C(
            mma_dq, std::conditional_t<K_::kDqT, Shape<Int<D>, Int<BR>>, Shape<Int<BR>, Int<D>>>{});
        static_assert(decltype(size(tdQacc))::value == K_::kDqPerThread, "dQ part per thread");
        dq_product(mma_dq, sdS, sKt, tdQacc, dsb, slice, t, wg);
        if constexpr (K_::kEw == 2) {
          // ew2 (FlashAttention-4's order): dK after dQ; dV and the dQ part
          // waited on, the dO stage released, the dQ part handed to the writer
          // warp while dK runs; then dK, and the Q stage released (the LSE /
          // D stage: pds3 after the dS^T barrier above, pds2 with dO).
          if constexpr (K_::kPb)  // pb1: dK from the dS^T A fragment (read until the wait below)
            detail::wg_gemm<false, true>(mma_kvr, tdSr, tKVRrQ(_, _, _, st.index()), tdKacc);
          else
            detail::wg_gemm<false, false>(mma_kv, tKVrdSb, tKVrQ(_, _, _, st.index()), tdKacc);
          warpgroup_wait<1>();  // dV, dQ part done (dK may run); pb: P^T's A fragment free
          pipe_do.consumer_release(st);
          if constexpr (!K_::kLOne) pipe_l.consumer_release(st);
          BwdDqWriter<K_>::hand_tile(p, ss, tdQacc, ctid, wg, t, it, buf);
          warpgroup_wait<0>();  // dK done: the Q stage and dS^T tile dsb's last reader
          pipe_q.consumer_release(st);
          ++st;
          continue;
        }
        if constexpr (K_::kSp) {
          // dK after dQ (FlashAttention-3's order): the dQ part is waited on,
          // dK is not: the tensor pipe has it while this block's dQ part goes
          // to the writer warp and the next block's S^T, dP^T are issued.
          detail::wg_gemm<false, false>(mma_kv, tKVrdSb, tKVrQ(_, _, _, st.index()), tdKacc);
          warpgroup_wait<1>();  // dV, dQ part done (dK may run)
          // The dO stage and this block's LSE / D are free (dP^T and dV done,
          // the dS^T stores made); the Q stage once dK is done (next block).
          pipe_do.consumer_release(st);
          if constexpr (!K_::kPds3) pipe_l.consumer_release(st);
          st_q_held = st;
        } else {
          warpgroup_wait<0>();  // dV, dK, dQ part done: the Q and dO stages, P^T and dS^T are free
          pipe_q.consumer_release(st);
          pipe_do.consumer_release(st);
          if constexpr (K_::kPds2 && !K_::kLOne) pipe_l.consumer_release(st);
        }
        if constexpr (K_::kSp2) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < K_::kDqPerThread; ++i) tdQcarry[i] = tdQacc(i) * p.scale;
          ++st;
          continue;  // block it's dQ part: handed over in the next block (or after the walk)
        }
        BwdDqWriter<K_>::hand_tile(p, ss, tdQacc, ctid, wg, t, it, buf);  // (dc1: the warpgroup's own tile)
        ++st;
      }
    }
    if constexpr (K_::kSp2) BwdDqWriter<K_>::hand_carry(ss, tdQcarry, ctid, it - 1);  // the last block's dQ part (the caller walks >= 1 block)
    if constexpr (K_::kSp) warpgroup_wait<0>();  // the last block's dK, before the epilogue reads it
  }

  // The consumers' walk without pds (owning, atomic, partials, ordered and
  // their TMA forms): per (query head, query block) S^T = K Q^T and dP^T = V
  // dO^T, LSE and D through shared memory, P^T in registers (bf16) and dV +=
  // P^T dO from them, dS^T = P^T (dP^T - D) in registers and dK += dS^T Q;
  // with dQ, its part dS K (dq_product_ds) added by BwdDqWriter::add. In the
  // kernel until session 20 (issue 16 item 4, no kernel function over ~200
  // lines): as a function here the PTX of these kernels changed; the pds
  // kernels' did not (README "Structure: the backward in role files").
  // ctid, lane, wq: the thread's index among the consumers, its lane and warp
  // in the warpgroup; key0: its keys key0, key0 + 8; col_lane: its column in
  // each 8 (the kernel's values, which its epilogue uses too).
  template <class Acc>
  __device__ __forceinline__ static void consume(const Params& p, SharedStorage& ss, Pipeline& pipe_q,
                                                 Pipeline& pipe_do, int n_block, int hk, int b, int m_begin,
                                                 int m_stop, int ctid, int lane, int wq, int key0, int col_lane,
                                                 Acc& tdVacc, Acc& tdKacc) {
    constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;
    const int diag_off = p.Sk - p.Sq;

    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemK{});
    Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename K_::SmemK{});
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename K_::SmemQ{});
    Tensor sdO = make_tensor(make_smem_ptr(ss.dO.data()), typename K_::SmemQ{});
    typename K_::MmaSdP mma_sdp;
    typename K_::MmaKV mma_kv;
    auto thr_sdp = mma_sdp.get_thread_slice(ctid);
    auto thr_kv = mma_kv.get_thread_slice(ctid);
    Tensor sQt = make_tensor(make_smem_ptr(ss.q.data()), typename K_::SmemQt{});
    Tensor sdOt = make_tensor(make_smem_ptr(ss.dO.data()), typename K_::SmemQt{});
    Tensor tSrK = thr_sdp.partition_fragment_A(sK);    // (MMA, 1, D/16)
    Tensor tSrV = thr_sdp.partition_fragment_A(sV);
    Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);    // (MMA, 1, D/16, ST)
    Tensor tSrdO = thr_sdp.partition_fragment_B(sdO);
    Tensor tKVrdO = thr_kv.partition_fragment_B(sdOt);  // (MMA, 1, BR/16, ST)
    Tensor tKVrQ = thr_kv.partition_fragment_B(sQt);
    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<BC>, Int<BR>>{});
    Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<BC>, Int<BR>>{});
    static_assert(decltype(size(tSrS))::value == BR / 2, "64 x BR scores per warpgroup");
    Tensor tPr = make_tensor<T>(partition_shape_A(mma_kv, Shape<Int<BC>, Int<BR>>{}));
    Tensor tdSr = make_tensor<T>(partition_shape_A(mma_kv, Shape<Int<BC>, Int<BR>>{}));
    static_assert(decltype(size(tPr))::value == BR / 2, "P^T fragment matches the score fragment");

    PipelineState st;
    int it = 0;
    for (int g = 0; g < p.group; ++g) {
      const int h = hk * p.group + g;
      const int64_t bh = int64_t(b) * p.H + h;
      for (int m = Sched::m_first(m_begin, m_stop); m != Sched::m_end(m_begin, m_stop); m += Sched::kMStep, ++it) {
        const int q0 = m * BR;
        // LSE (log2 units; +inf where P must be 0: rows >= Sq or LSE = -inf)
        // and D of the block's BR rows, one value per thread of the
        // warpgroup, through shared memory (buffer it % 2: the other one may
        // still be read by a slower warp of the previous block).
        const int wg = ctid / 128, t = ctid % 128, buf = it % 2;
        float ld_lse = INFINITY, ld_d = 0.f;  // thread t < BR: query q0 + t (BR <= 128)
        if (t < BR && q0 + t < p.Sq) {
          const float x = __ldg(p.lse + bh * p.Sq + q0 + t);
          ld_lse = x == -INFINITY ? INFINITY : x * 1.4426950408889634f;
          ld_d = __ldg(p.Dvec + bh * p.Sq + q0 + t);
        }
        pipe_q.consumer_wait(st);
        detail::wg_gemm<true, false>(mma_sdp, tSrK, tSrQ(_, _, _, st.index()), tSrS);
        pipe_do.consumer_wait(st);
        detail::wg_gemm<true, false>(mma_sdp, tSrV, tSrdO(_, _, _, st.index()), tSrdP);
        if (t < BR) {
          ss.lse2[wg][buf][t] = ld_lse;
          ss.dvec[wg][buf][t] = ld_d;
        }
        detail::named_sync(K_::kBarLse + wg, 128);
        const float* lse2 = ss.lse2[wg][buf];
        const float* dd = ss.dvec[wg][buf];
        warpgroup_wait<1>();  // S^T done
        if (p.softcap) {
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < BR / 2; ++v) tSrS(v) = detail::softcap_raw(tSrS(v), p.cap_k, p.cap_c);
        }
        const bool need_mask = n_block * BC + BC > p.Sk ||
                               (p.causal && n_block * BC + BC - 1 > q0 + diag_off) ||
                               (p.window > 0 && n_block * BC <= q0 + BR - 1 + diag_off - p.window);
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < BR / 2; ++v) {
          const int j = 8 * (v / 4) + col_lane + (v % 2);  // query column within the block
          float e = detail::ex2(fmaf(tSrS(v), p.scale_log2, -lse2[j]));
          if (need_mask) {
            // Key - query offsets outside (lo, hi] are masked (hi: causal, lo: window).
            const int key = key0 + 8 * ((v / 2) % 2);
            const int dlt = key - (q0 + 8 * (v / 4) + col_lane + (v % 2));
            const int hi = p.causal ? diag_off : INT_MAX;
            const int lo = p.window > 0 ? diag_off - p.window : INT_MIN;
            if (key >= p.Sk || dlt > hi || dlt <= lo) e = 0.f;
          }
          tSrS(v) = e;
        }
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < BR / 2; v += 2) {
          const __nv_bfloat162 two = __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
          tPr(v) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[0]);
          tPr(v + 1) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[1]);
        }
        detail::wg_gemm<false, true>(mma_kv, tPr, tKVrdO(_, _, _, st.index()), tdVacc);
        // P^T (in bf16 for dV already) times 1 - t^2: dS^T = (P^T (1 - t^2))
        // (dP^T - D) below, unchanged.
        BwdKvSoftmax<BR>::softcap_grad(p, tSrS, lse2, col_lane);
        warpgroup_wait<1>();  // dP^T done (dV may still run)
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < BR / 2; v += 2) {
          const float2 d2 = *reinterpret_cast<const float2*>(dd + 8 * (v / 4) + col_lane);
          const __nv_bfloat162 two =
              __floats2bfloat162_rn(tSrS(v) * (tSrdP(v) - d2.x), tSrS(v + 1) * (tSrdP(v + 1) - d2.y));
          tdSr(v) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[0]);
          tdSr(v + 1) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[1]);
        }
        detail::wg_gemm<false, true>(mma_kv, tdSr, tKVrQ(_, _, _, st.index()), tdKacc);
        if constexpr (K_::DQS != DqStrategy::kNone) {
          // The A registers of an in-flight wgmma may not be read (PTX), so
          // dV and dK complete first; the Q and dO stages are free then.
          warpgroup_wait<0>();
          pipe_q.consumer_release(st);
          pipe_do.consumer_release(st);
          typename K_::MmaDQ mma_dq;
          Tensor tdQacc = partition_fragment_C(mma_dq, Shape<Int<BR>, Int<D>>{});
          static_assert(decltype(size(tdQacc))::value == K_::kDqPerThread, "dQ part per thread");
          dq_product_ds(ss, mma_dq, tdSr, tdQacc, key0 - n_block * BC, col_lane, ctid, wg);
          BwdDqWriter<K_>::add(p, ss, tdQacc, ctid, wg, wq, lane, col_lane, n_block, g, bh, m, q0, it);
        } else {
          warpgroup_wait<0>();  // dV and dK done: the Q and dO tiles and P, dS registers are free
          pipe_q.consumer_release(st);
          pipe_do.consumer_release(st);
        }
        warpgroup_fence_operand(tPr);
        warpgroup_fence_operand(tdSr);
        ++st;
      }
    }
  }

  // pds2: this warpgroup's 128 threads (its own rows of P^T, dc1 of dS^T
  // too, stored), barrier kBarLse or kBarP (constant ids: one in a register
  // was a spilled register).
  __device__ __forceinline__ static void own_rows_sync(int wg) {
    if (wg == 0)
      detail::named_sync(K_::kBarLse, 128);
    else
      detail::named_sync(K_::kBarP, 128);
  }

  // The mask as a pass of its own (ew1 / ew2 after the exp, fill 0; pb5
  // before it, fill -inf): the thread's values at masked keys set to fill.
  template <class TS>
  __device__ __forceinline__ static void mask_pass(const Params& p, TS& tSrS, float fill, int q0, int key0,
                                                   int col_lane, int diag_off) {
    const int hi = p.causal ? diag_off : INT_MAX;
    const int lo = p.window > 0 ? diag_off - p.window : INT_MIN;
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < K_::BR / 2; ++v) {
      const int key = key0 + 8 * ((v / 2) % 2);
      const int dlt = key - (q0 + 8 * (v / 4) + col_lane + (v % 2));
      if (key >= p.Sk || dlt > hi || dlt <= lo) tSrS(v) = fill;
    }
  }

  // P^T = exp2(S^T scale log2 e - LSE) over the 64 x BR scores (fp32, in
  // place; lse2: the block's LSE in log2 units, +inf where P must be 0), 0 at
  // the masked keys where need_mask (keys >= Sk; key - query offsets outside
  // (lo, hi], hi: causal, lo: window). ew1 / ew2: exp2 over the whole tile
  // without a branch, then the mask as a pass of its own on the blocks that
  // need it (P = 0 where masked: the value the base's per-element test gives;
  // the exp2 of a masked score is computed and dropped). (Softcap and
  // need_mask stay in the caller: computed here, the machine code changed.)
  template <class TS>
  __device__ __forceinline__ static void scores_to_p(const Params& p, TS& tSrS, const float* lse2, bool need_mask,
                                                     int q0, int key0, int col_lane, int diag_off) {
    constexpr int BR = K_::BR;
    if constexpr (K_::kExpInLoop) {
      // pb5: only the mask here, the masked scores to -inf (exp2 of -inf is
      // the 0 pb3's mask writes; fa_ds_dv takes the exp).
      if (need_mask) mask_pass(p, tSrS, -INFINITY, q0, key0, col_lane, diag_off);
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < 4 * K_::kExpFirst; ++v)  // pb6: the first half's exp
        tSrS(v) = detail::ex2(fmaf(tSrS(v), p.scale_log2, -lse2[8 * (v / 4) + col_lane + (v % 2)]));
      if constexpr (K_::kLogitFirst) {
        // pb10: the exp's argument of every score (-inf stays -inf: scale_log2 >
        // 0), LSE read once per 8-query chunk pair; fa_ds_dv takes the EX2.
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < BR / 2; v += 2) {
          const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * (v / 4) + col_lane);
          tSrS(v) = fmaf(tSrS(v), p.scale_log2, -l2.x);
          tSrS(v + 1) = fmaf(tSrS(v + 1), p.scale_log2, -l2.y);
        }
      }
    } else if constexpr (K_::kEw) {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; ++v)
        tSrS(v) = detail::ex2(fmaf(tSrS(v), p.scale_log2, -lse2[8 * (v / 4) + col_lane + (v % 2)]));
      if (need_mask) mask_pass(p, tSrS, 0.f, q0, key0, col_lane, diag_off);
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; ++v) {
        const int j = 8 * (v / 4) + col_lane + (v % 2);  // query column within the block
        float e = detail::ex2(fmaf(tSrS(v), p.scale_log2, -lse2[j]));
        if (need_mask) {
          const int key = key0 + 8 * ((v / 2) % 2);
          const int dlt = key - (q0 + j);
          const int hi = p.causal ? diag_off : INT_MAX;
          const int lo = p.window > 0 ? diag_off - p.window : INT_MIN;
          if (key >= p.Sk || dlt > hi || dlt <= lo) e = 0.f;
        }
        tSrS(v) = e;
      }
    }
  }

  // The offset in a P^T / dS^T tile of this thread's value pair in 8-query
  // chunk k, key row kl0 + 8 h: pds3 two 64-query swizzle atoms (pt3_offset,
  // from the thread's base / sw), pds2 (BR = 64) one (pt_offset). (pds4's
  // SmemDsT4 tile takes its dS^T by stmatrix since session 44: fa_ds_dv,
  // K_::dst4_stsm; its pair offsets, K_::dst4_pair, are the layout test's.)
  __device__ __forceinline__ static int ds_pair_offset(int base, int sw, int kl0, int col_lane, int k, int h) {
    static_assert(!K_::kPds4, "pds4: dS^T by stmatrix (fa_ds_dv)");
    if constexpr (K_::kPds3)
      return pt3_offset<K_::BC>(base, sw, k, h);
    else
      return K_::pt_offset(kl0, 8 * k + col_lane) + 8 * 64 * h;
  }
  // The thread's base / sw of ds_pair_offset (pds3; per block, opaque:
  // see detail::opaque), 0 for pds2.
  __device__ __forceinline__ static void ds_base_sw(int kl0, int col_lane, int& base, int& sw) {
    static_assert(!K_::kPds4, "pds4: dS^T by stmatrix (fa_ds_dv)");
    if constexpr (K_::kPds3) {
      base = detail::opaque(kl0 * 64 + col_lane);
      sw = detail::opaque((kl0 & 7) << 3);
    }
  }

  // The dS^T loops' D read-ahead (ew1, pb1-pb3): D of the thread's query
  // columns in 8-query chunk k (both key rows of the thread use it) read
  // kDAhead chunks before the dS^T stores of chunk k, so the loads stay ahead
  // of the stores in program order and the compiler neither reloads D after
  // a store nor waits for each load at its use (the base: an LDS right before
  // every FADD, twice per chunk). d_ahead: the first kDAhead reads (the
  // caller's, before its dP^T wait, under which they run); ds_chunks: the walk,
  // f(k, h, v, d2) for key row h of chunk k (value pair v = 4 k + 2 h).
  // (pds4: two chunks ahead. With four, the 16 read-ahead registers beside
  // S^T, dP^T, dV, dK (208) made ptxas serialize every wgmma of the kernel,
  // C7512 "insufficient register resources", with 0 bytes spilled.)
  static constexpr int kDAhead = K_::kPds4 ? 2 : 4;
  __device__ __forceinline__ static void d_ahead(float2 (&dpre)[kDAhead], const float* dd, int col_lane) {
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < kDAhead; ++k) dpre[k] = *reinterpret_cast<const float2*>(dd + 8 * k + col_lane);
  }
  template <class F>
  __device__ __forceinline__ static void ds_chunks(float2 (&dpre)[kDAhead], const float* dd, int col_lane, F&& f) {
    constexpr int kChunks = K_::BR / 8;
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < kChunks; ++k) {
      const float2 d2 = dpre[k % kDAhead];
      if (k + kDAhead < kChunks) dpre[k % kDAhead] = *reinterpret_cast<const float2*>(dd + 8 * (k + kDAhead) + col_lane);
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) f(k, h, 4 * k + 2 * h, d2);
    }
  }

  // rs1, half hq of the queries (the first, then the second half of the k
  // steps of the K = BR products; dP^T waited on before the first): P^T and
  // dS^T (from P^T in fp32, softcap's factor) rounded to bf16 into the A
  // fragments tPr / tdSr, dS^T also stored to its tile for dQ (pds3's / pds2's
  // layout) as formed, before dK is issued (the A registers of a wgmma in
  // flight may not be read); then dV and dK issued on that half from the
  // registers (Q / dO stage s; no P^T store, no barrier; only dQ waits for the
  // dS^T barrier). Registers at the peak: S^T, dP^T, dV, dK (192 fp32, as
  // pds3 / pds2), each value pair freeing 4 of them for 2, and the first
  // half's products run while the second half is formed. Each accumulator
  // still sums its k steps in ascending order: the base's bits (pds3 at d =
  // 64, pds2 at d = 128). (dV issued on all of P^T before dS^T was formed put
  // P^T's 32 registers on top of the 192: 284 bytes spilled. hq a compile-time
  // constant: through a loop index the fragments were indexed at run time,
  // 768 bytes of stack.)
  template <int hq, class TS, class TP, class MmaKVR, class TB, class Acc>
  __device__ __forceinline__ static void rs_half(const Params& p, TS& tSrS, TS& tSrdP, TP& tPr, TP& tdSr,
                                                 __nv_bfloat16* ds_base, const float* lse2, const float* dd, int kl0,
                                                 int col_lane, MmaKVR& mma_kvr, TB& tKVRrdO, TB& tKVRrQ, int s,
                                                 Acc& tdVacc, Acc& tdKacc) {
    constexpr int BR = K_::BR;
    [[maybe_unused]] const int base = detail::opaque(kl0 * 64 + col_lane);
    [[maybe_unused]] const int sw = detail::opaque((kl0 & 7) << 3);
    CUTLASS_PRAGMA_UNROLL
    for (int v = hq * BR / 4; v < (hq + 1) * BR / 4; v += 2) {
      const int j = 8 * (v / 4) + col_lane;
      const float2 d2 = *reinterpret_cast<const float2*>(dd + j);
      float p0 = tSrS(v), p1 = tSrS(v + 1);
      detail::set_a_pair(tPr, v, __floats2bfloat162_rn(p0, p1));
      if (p.softcap) {
        p0 *= detail::softcap_grad(p0, lse2[j], p.cap_t);
        p1 *= detail::softcap_grad(p1, lse2[j + 1], p.cap_t);
      }
      const __nv_bfloat162 ds2 = __floats2bfloat162_rn(p0 * (tSrdP(v) - d2.x), p1 * (tSrdP(v + 1) - d2.y));
      const int at = ds_pair_offset(base, sw, kl0, col_lane, v / 4, (v / 2) % 2);
      *reinterpret_cast<__nv_bfloat162*>(ds_base + at) = ds2;
      detail::set_a_pair(tdSr, v, ds2);
    }
    detail::wg_gemm_rs_half<hq>(mma_kvr, tPr, tKVRrdO(_, _, _, s), tdVacc);
    detail::wg_gemm_rs_half<hq>(mma_kvr, tdSr, tKVRrQ(_, _, _, s), tdKacc);
  }

  // Not rs1: P^T (bf16) to its tile, dV += P^T dO issued (Q / dO stage s),
  // softcap's factor, then dS^T to its tile (ds_base).
  template <class TS, class MmaKV, class TA, class TB, class Acc>
  __device__ __forceinline__ static void pt_dv_ds(const Params& p, TS& tSrS, TS& tSrdP, __nv_bfloat16* pt_base,
                                                  __nv_bfloat16* ds_base, const float* lse2, const float* dd, int kl0,
                                                  int col_lane, int wg, MmaKV& mma_kv, TA& tKVrP, TB& tKVrdO, int s,
                                                  Acc& tdVacc) {
    constexpr int BR = K_::BR, BC = K_::BC;
    // P^T (bf16) to this warpgroup's rows of the tile: values v, v + 1 are
    // queries j, j + 1 of one key, one 32-bit store (4 lanes fill 16 bytes
    // of a row, the swizzle spreads the 8 rows of a warp over the banks).
    // (Addresses from the tile bases in shared memory, swizzled by hand:
    // through cute's swizzled pointer they became generic 64-bit stores.)
    // Keys kl0 + 8 are 512 elements on (the swizzle reads row % 8 only):
    // one address per 8-query chunk.
    if constexpr (K_::kPds3) {
      const int base = detail::opaque(kl0 * 64 + col_lane), sw = detail::opaque((kl0 & 7) << 3);
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; v += 2)
        *reinterpret_cast<__nv_bfloat162*>(pt_base + pt3_offset<BC>(base, sw, v / 4, (v / 2) % 2)) =
            __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; v += 2)
        *reinterpret_cast<__nv_bfloat162*>(pt_base + K_::pt_offset(kl0, 8 * (v / 4) + col_lane) +
                                           8 * 64 * ((v / 2) % 2)) = __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
    }
    cutlass::arch::fence_view_async_shared();  // generic-proxy stores before the wgmma reads
    if constexpr (K_::kPds2) {
      own_rows_sync(wg);  // each warpgroup's dV product reads its own 64 rows of P^T only
    } else {
      detail::named_sync(K_::kBarP, 256);
    }
    detail::wg_gemm<false, false>(mma_kv, tKVrP, tKVrdO(_, _, _, s), tdVacc);
    if constexpr (K_::kEw) {
      // ew1: D read ahead of the dS^T stores (d_ahead, ds_chunks).
      float2 dpre[kDAhead];
      d_ahead(dpre, dd, col_lane);
      BwdKvSoftmax<BR>::softcap_grad(p, tSrS, lse2, col_lane);  // P^T times 1 - t^2 (as the other kv kernels)
      warpgroup_wait<1>();  // dP^T done (dV may still run)
      [[maybe_unused]] int base = 0, sw = 0;
      if constexpr (K_::kPds3) base = detail::opaque(kl0 * 64 + col_lane), sw = detail::opaque((kl0 & 7) << 3);
      ds_chunks(dpre, dd, col_lane, [&](int k, int h, int v, float2 d2) {
        *reinterpret_cast<__nv_bfloat162*>(ds_base + ds_pair_offset(base, sw, kl0, col_lane, k, h)) =
            __floats2bfloat162_rn(tSrS(v) * (tSrdP(v) - d2.x), tSrS(v + 1) * (tSrdP(v + 1) - d2.y));
      });
      return;
    }
    BwdKvSoftmax<BR>::softcap_grad(p, tSrS, lse2, col_lane);  // P^T times 1 - t^2 (as the other kv kernels)
    warpgroup_wait<1>();  // dP^T done (dV may still run)
    if constexpr (K_::kPds3) {
      const int base = detail::opaque(kl0 * 64 + col_lane), sw = detail::opaque((kl0 & 7) << 3);
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; v += 2) {
        const float2 d2 = *reinterpret_cast<const float2*>(dd + 8 * (v / 4) + col_lane);
        *reinterpret_cast<__nv_bfloat162*>(ds_base + pt3_offset<BC>(base, sw, v / 4, (v / 2) % 2)) =
            __floats2bfloat162_rn(tSrS(v) * (tSrdP(v) - d2.x), tSrS(v + 1) * (tSrdP(v + 1) - d2.y));
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; v += 2) {
        const int j = 8 * (v / 4) + col_lane;
        const float2 d2 = *reinterpret_cast<const float2*>(dd + j);
        *reinterpret_cast<__nv_bfloat162*>(ds_base + K_::pt_offset(kl0, j) + 8 * 64 * ((v / 2) % 2)) =
            __floats2bfloat162_rn(tSrS(v) * (tSrdP(v) - d2.x), tSrS(v + 1) * (tSrdP(v + 1) - d2.y));
      }
    }

  }

  // pb1 (K_::kPb, ew2 pds3): P^T rounded to bf16 pair by pair into dV's A
  // fragment tPr (value v of the S^T C fragment is value v of the A
  // fragment: set_a_pair, as rs1) and into a copy pc, the fp32 S^T dead
  // after it; dV += P^T dO issued at once from registers (no P^T store, no
  // fence, no barrier). The A registers of a wgmma in flight may be neither
  // written nor read before its wait (PTX: undefined), so dS^T is formed from
  // the copy (in the PTX; ptxas puts both in the same physical registers),
  // which is only read: dP^T waited on (dV may run), then per 8-query chunk
  // dS^T = P_bf16 (dP^T - D) rounded to bf16 (softcap: P_bf16 times 1 - t^2,
  // rounded to bf16 again, first), stored to its pds3 tile for dQ and set into
  // dK's A fragment tdSr (D read ahead of the stores as ew1). Registers at the
  // peak: P^T 32 (A; the copy coalesced), dP^T 64, dV 32, dK 32, the dS^T
  // fragment growing as dP^T is consumed (S^T's 64 fp32 gone before dP^T is
  // waited on).
  template <class TS, class TP, class MmaKVR, class TB, class Acc>
  __device__ __forceinline__ static void pb_dv_ds(const Params& p, TS& tSrS, TS& tSrdP, TP& tPr, TP& tdSr,
                                                  __nv_bfloat16* ds_base, const float* lse2, const float* dd, int kl0,
                                                  int col_lane, MmaKVR& mma_kvr, TB& tKVRrdO, int s, Acc& tdVacc) {
    constexpr int BR = K_::BR;
    static_assert(K_::kPds3 || (K_::kPds2 && BR == 64), "pb1: pds3's or pds2's dS^T tile");
    static_assert(!K_::kWgUniform, "pb1 only (pb2, its word-fragment form, was retired in session 32)");
    uint32_t pc[BR / 4];  // P^T pairs (bf16x2), the copy dS^T is formed from
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < BR / 2; v += 2) {
      const __nv_bfloat162 two = __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
      detail::set_a_pair(tPr, v, two);
      pc[v / 2] = detail::bf16x2_bits(two);
    }
    detail::wg_gemm<false, true>(mma_kvr, tPr, tKVRrdO(_, _, _, s), tdVacc);  // dV issued, P^T in registers
    float2 dpre[kDAhead];
    d_ahead(dpre, dd, col_lane);
    warpgroup_wait<1>();  // dP^T done (dV may still run)
    [[maybe_unused]] const int base = detail::opaque(kl0 * 64 + col_lane), sw = detail::opaque((kl0 & 7) << 3);
    // dS^T per pair from the copy, which is only read: softcap's factor 1 - t^2
    // (t from the bf16 P, as the other kv kernels from the fp32 one; the product
    // rounded to bf16 again) is taken inside the loop. (Session 15 rewrote the
    // copy with it while dV was in flight: dV wrong, ~1e37 and not repeatable,
    // on the H200; session 16 fenced tPr after the wait: still wrong, and 138
    // bytes spilled; the factor before the dV issue spilled as well.)
    auto ds_loop = [&](auto cap) {
      constexpr bool kCap = decltype(cap)::value;
      ds_chunks(dpre, dd, col_lane, [&](int k, int h, int v, float2 d2) {
        float2 pf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pc[v / 2]));
        if constexpr (kCap) {
          const int j = 8 * k + col_lane;
          pf = __bfloat1622float2(__floats2bfloat162_rn(pf.x * detail::softcap_grad(pf.x, lse2[j], p.cap_t),
                                                        pf.y * detail::softcap_grad(pf.y, lse2[j + 1], p.cap_t)));
        }
        const __nv_bfloat162 ds2 = __floats2bfloat162_rn(pf.x * (tSrdP(v) - d2.x), pf.y * (tSrdP(v + 1) - d2.y));
        *reinterpret_cast<__nv_bfloat162*>(ds_base + ds_pair_offset(base, sw, kl0, col_lane, k, h)) = ds2;
        detail::set_a_pair(tdSr, v, ds2);
      });
    };
    if (p.softcap)
      ds_loop(cute::true_type{});
    else
      ds_loop(cute::false_type{});
  }

  // pb3 (K_::kPbFa, FlashAttention-4's mma_one_m_block): after the exp, dP^T
  // waited on (the S^T wait was the caller's), then per 8-query chunk P^T's
  // pair rounded to bf16 into dV's A fragment and dS^T = P^T (dP^T - D) from
  // the fp32 P^T (softcap: times 1 - t^2 first, as rs_half), rounded to bf16,
  // stored to its pds3 / pds2 tile for dQ and kept as dK's A fragment (D read ahead
  // of the stores as ew1); dV += P^T dO issued from registers once the loop
  // is done. No unpack of P (pb1 forms dS^T from the bf16 copy, since
  // dV is in flight on the fragment); dV does not overlap the loop.
  // Registers at the peak: S^T and dP^T (64 each), dV, dK (32 each), the two
  // A fragments growing as S^T and dP^T are consumed. pb5 (kExpInLoop): each
  // chunk's exp at the head of its step of the loop (the LSE pairs read ahead
  // as D), the scores masked to -inf by scores_to_p. pb10 (kLogitFirst): the
  // exp's argument formed by scores_to_p (before the dP^T wait), only the EX2 here.
  template <class TS, class TP, class MmaKVR, class TB, class Acc>
  __device__ __forceinline__ static void fa_ds_dv(const Params& p, TS& tSrS, TS& tSrdP, TP& tPr, TP& tdSr,
                                                  __nv_bfloat16* ds_base, const float* lse2, const float* dd, int kl0,
                                                  int col_lane, MmaKVR& mma_kvr, TB& tKVRrdO, int s, Acc& tdVacc) {
    static_assert(K_::kPds2 && K_::kWgUniform, "pb3: pds3's or pds2's dS^T tile, the fragments as words");
    uint32_t* const pw = detail::a_words(tPr);
    uint32_t* const dw = detail::a_words(tdSr);
    if constexpr (K_::kDvSplit) {
      // pb6: the first half's P^T into dV's A fragment and that half of dV
      // issued before the dP^T wait (ptxas moved an exp merely placed before
      // the wait past it; a wgmma issued from its results it cannot move).
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < 4 * K_::kExpFirst; v += 2)
        pw[v / 2] = detail::bf16x2_bits(__floats2bfloat162_rn(tSrS(v), tSrS(v + 1)));
      detail::wg_gemm_rs_half<0>(mma_kvr, tPr, tKVRrdO(_, _, _, s), tdVacc);
    }
    float2 dpre[kDAhead];
    d_ahead(dpre, dd, col_lane);
    [[maybe_unused]] float2 lpre[kDAhead];  // pb5 / pb6: the LSE pairs of the loop's exps, read ahead as D
    if constexpr (K_::kExpInLoop && !K_::kLogitFirst) d_ahead(lpre, lse2 + 8 * K_::kExpFirst, col_lane);
    warpgroup_wait<K_::kDvSplit ? 1 : 0>();  // dP^T done (pb6: dV's first half may run)
    [[maybe_unused]] int base = 0, sw = 0;
    [[maybe_unused]] uint32_t stsm_at = 0;  // pds4: this lane's stmatrix row, slice 0 (dst4_stsm)
    if constexpr (K_::kPds4)
      stsm_at = static_cast<uint32_t>(__cvta_generic_to_shared(
          ds_base + detail::opaque(K_::dst4_stsm(kl0 & ~7, int(threadIdx.x) % 32))));
    else
      ds_base_sw(kl0, col_lane, base, sw);
    auto ds_loop = [&](auto cap) {
      constexpr bool kCap = decltype(cap)::value;
      ds_chunks(dpre, dd, col_lane, [&](int k, int h, int v, float2 d2) {
        if constexpr (K_::kExpInLoop) {
          if constexpr (K_::kLogitFirst) {  // pb10: the argument formed before the dP^T wait
            tSrS(v) = detail::ex2(tSrS(v));
            tSrS(v + 1) = detail::ex2(tSrS(v + 1));
          } else if (k >= K_::kExpFirst) {  // pb5 / pb6: this chunk's exp, among the dS^T arithmetic
            const int i = (k - K_::kExpFirst) % kDAhead;
            const float2 l2 = lpre[i];
            tSrS(v) = detail::ex2(fmaf(tSrS(v), p.scale_log2, -l2.x));
            tSrS(v + 1) = detail::ex2(fmaf(tSrS(v + 1), p.scale_log2, -l2.y));
            if (h == 1 && k + kDAhead < K_::BR / 8)
              lpre[i] = *reinterpret_cast<const float2*>(lse2 + 8 * (k + kDAhead) + col_lane);
          }
        }
        float p0 = tSrS(v), p1 = tSrS(v + 1);
        if (k >= K_::kExpFirst) pw[v / 2] = detail::bf16x2_bits(__floats2bfloat162_rn(p0, p1));
        if constexpr (kCap) {
          const int j = 8 * k + col_lane;
          p0 *= detail::softcap_grad(p0, lse2[j], p.cap_t);
          p1 *= detail::softcap_grad(p1, lse2[j + 1], p.cap_t);
        }
        const __nv_bfloat162 ds2 = __floats2bfloat162_rn(p0 * (tSrdP(v) - d2.x), p1 * (tSrdP(v + 1) - d2.y));
        dw[v / 2] = detail::bf16x2_bits(ds2);
        if constexpr (K_::kPds4) {
          // A 16-query slice complete (words 4 s .. 4 s + 3): one stmatrix, 2 s + 1 = k.
          if (h == 1 && k % 2 == 1) detail::stsm_x4(stsm_at + 256u * uint32_t(k / 2), dw + 4 * (k / 2));
        } else {
          *reinterpret_cast<__nv_bfloat162*>(ds_base + ds_pair_offset(base, sw, kl0, col_lane, k, h)) = ds2;
        }
      });
    };
    if (p.softcap)
      ds_loop(cute::true_type{});
    else
      ds_loop(cute::false_type{});
    if constexpr (K_::kDvSplit)
      detail::wg_gemm_rs_half<1>(mma_kvr, tPr, tKVRrdO(_, _, _, s), tdVacc);  // pb6: dV's second half
    else
      detail::wg_gemm<false, true>(mma_kvr, tPr, tKVRrdO(_, _, _, s), tdVacc);  // dV issued, P^T in registers
  }

  // pds: the dQ part = dS K from dS^T tile dsb (through its transposed view).
  // slice: the thread the operand slice is taken at where both warpgroups
  // share the product (ctid, or pb2 / pb3's warp-uniform wg_slice_thread).
  template <class MmaDQ, class TdS, class TKt, class TdQ>
  __device__ __forceinline__ static void dq_product(MmaDQ& mma_dq, TdS& sdS, TKt& sKt, TdQ& tdQacc, int dsb, int slice,
                                                    int t, int wg) {
    [[maybe_unused]] constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;
    if constexpr (K_::kDqT) {
      // pds4: dQ^T = K^T dS^T, K^T (D x BC, the MN-major view of the K tile)
      // split by columns over the warpgroups, dS^T tile dsb (SmemDsT4) whole.
      auto thr_dq = mma_dq.get_thread_slice(slice);
      Tensor sdSt4 = make_tensor(make_smem_ptr(raw_pointer_cast(sdS.data())), typename K_::SmemDsT4{});  // (BR, BC, 2)
      Tensor tQrK = thr_dq.partition_fragment_A(sKt);     // (MMA, 1, BC/16)
      Tensor tQrdS = thr_dq.partition_fragment_B(sdSt4);  // (MMA, 1, BC/16, 2)
      Tensor tQrdSb = tQrdS(_, _, _, dsb);
      detail::wg_gemm<true, false>(mma_dq, tQrK, tQrdSb, tdQacc);
    } else if constexpr (K_::kDqWhole) {
      // d = 128: N split (each warpgroup D / 2 columns); pds3: M split (each
      // warpgroup 64 queries); every key either way.
      auto thr_dq = mma_dq.get_thread_slice(slice);
      Tensor tQrdS = thr_dq.partition_fragment_A(sdS);  // (MMA, BR/64 or 1, BC/16, 2)
      Tensor tQrK = thr_dq.partition_fragment_B(sKt);
      Tensor tQrdSb = tQrdS(_, _, _, dsb);
      detail::wg_gemm<true, false>(mma_dq, tQrdSb, tQrK, tdQacc);
    } else {
      // d = 64: each warpgroup its own 64 keys (K split), summed below;
      // dc1 (d = 128): the same split, each part added by the writer warp.
      auto thr_dq = mma_dq.get_thread_slice(t);
      Tensor sdS_half = local_tile(sdS(_, _, dsb), Shape<Int<BR>, _64>{}, make_coord(0, wg));
      Tensor sKt_half = local_tile(sKt, Shape<Int<D>, _64>{}, make_coord(0, wg));
      Tensor tQrdS = thr_dq.partition_fragment_A(sdS_half);
      Tensor tQrK = thr_dq.partition_fragment_B(sKt_half);
      detail::wg_gemm<true, false>(mma_dq, tQrdS, tQrK, tdQacc);
    }

  }

  // Without pds: dS (queries x keys) to shared memory (the rows kl0, kl0 + 8
  // of this thread within the key block), then the dQ part = dS K.
  template <class MmaDQ, class TA, class TdQ>
  __device__ __forceinline__ static void dq_product_ds(SharedStorage& ss, MmaDQ& mma_dq, TA& tdSr, TdQ& tdQacc, int kl0,
                                                       int col_lane, int ctid, int wg) {
    constexpr int D = K_::D, BR = K_::BR;
    // dS (queries x keys) to shared memory for dQ = dS K.
    Tensor sdS = make_tensor(make_smem_ptr(ss.ds.data()), typename K_::SmemDS{});
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < BR / 2; ++v) {
      const int kl = kl0 + 8 * ((v / 2) % 2);
      const int ql = 8 * (v / 4) + col_lane + (v % 2);
      sdS(ql, kl) = tdSr(v);
    }
    cutlass::arch::fence_view_async_shared();  // generic-proxy stores before the wgmma reads
    detail::named_sync(K_::kBarDs, 256);
    Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemKt{});
    if constexpr (K_::kDqSplitN) {
      auto thr_dq = mma_dq.get_thread_slice(ctid);
      Tensor tQrdS = thr_dq.partition_fragment_A(sdS);
      Tensor tQrK = thr_dq.partition_fragment_B(sKt);
      detail::wg_gemm<true, false>(mma_dq, tQrdS, tQrK, tdQacc);
    } else {
      auto thr_dq = mma_dq.get_thread_slice(ctid % 128);
      Tensor sdS_half = local_tile(sdS, Shape<Int<BR>, _64>{}, make_coord(0, wg));
      Tensor sKt_half = local_tile(sKt, Shape<Int<D>, _64>{}, make_coord(0, wg));
      Tensor tQrdS = thr_dq.partition_fragment_A(sdS_half);
      Tensor tQrK = thr_dq.partition_fragment_B(sKt_half);
      detail::wg_gemm<true, false>(mma_dq, tQrdS, tQrK, tdQacc);
    }
  }
};

// pds2: LSE in log2 units (+inf where P must be 0: LSE = -inf, rows >= Sq)
// and D, padded to whole query blocks of BR ([B H][m_blocks][BR] each), so the
// kv kernel's producer brings one block's values with one aligned bulk copy.
template <int BR>
__global__ void attention_bwd_pds_stage_kernel(const float* __restrict__ lse, const float* __restrict__ Dvec,
                                               float* __restrict__ lse2, float* __restrict__ dvec, int64_t rows,
                                               int Sq, int m_blocks) {
  const int64_t padded = int64_t(m_blocks) * BR, n = rows * padded;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = idx / padded;
    const int q = int(idx % padded);
    float l = INFINITY, d = 0.f;
    if (q < Sq) {
      const float x = lse[bh * Sq + q];
      l = x == -INFINITY ? INFINITY : x * 1.4426950408889634f;
      d = Dvec[bh * Sq + q];
    }
    lse2[idx] = l;
    dvec[idx] = d;
  }
}

}  // namespace detfuse::attention::wg
