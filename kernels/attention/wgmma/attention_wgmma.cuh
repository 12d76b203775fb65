// Hopper (sm_90a) attention forward on wgmma and TMA, warp-specialized in the
// manner of FlashAttention-3 (read to learn, not copied):
//
//   warpgroup 0   producer: one thread issues the TMA loads, Q once (its own
//                 mbarrier) and then K and V tiles, key blocks from the last to
//                 the first, into two STAGES-deep rings (CUTLASS
//                 PipelineTmaAsync: full barriers with transaction counts,
//                 empty barriers released by the 256 consumer threads); the
//                 warpgroup gives registers away (setmaxnreg 24).
//   warpgroups 1-2 consumers (setmaxnreg 240), one TiledMMA of two warpgroups
//                 along M: each owns 64 of the BR = 128 query rows. Per key block:
//                 S = Q K^T by wgmma SS (fp32 accumulators), masking (keys >= Sk,
//                 causal) on the blocks that need it, the online softmax in
//                 registers (running max, rescale of O and the running sum, exp2
//                 with the softmax scale folded into log2 e), P rounded to bf16
//                 in registers and O += P V by wgmma RS (P is the A operand from
//                 registers, V read MN-major from the same shared tile through a
//                 transposed view). The two warpgroups run independently, so one
//                 one's softmax overlaps the other's wgmma.
//   epilogue      O normalised once (1 / rowsum; 0 for a row that saw no key),
//                 written bf16 straight from the accumulators, LSE = scale * max +
//                 ln(sum) in fp32 (-inf for a row that saw no key).
//
// Persistent (Cfg::PERSISTENT, ps1): grid = min(tiles, SMs); each CTA walks the
// tiles blockIdx.x + k gridDim.x in the order of fwd_tile_scheduler.h, the
// producer carrying its K/V ring position from tile to tile and reloading Q
// once the consumers signal (q_empty) that their last Q K^T of a tile is done;
// with QSTAGES = 2 Q is double-buffered and loaded a whole K/V tail earlier.
//
// Softcap and sliding window (problem.h) are run-time options, no template
// flags: the softcap is one uniform branch per key block around a loop that
// replaces each raw score s by (c / scale) tanh(scale s / c) (so everything
// after it, which multiplies by scale, is unchanged); tanh is formed as
// 1 - 2 / (1 + 2^(2 x log2 e)) with ex2.approx and rcp.approx (absolute error
// ~3e-7; tanh.approx.f32, one MUFU op instead of two, has a relative error of
// ~2^-11, which moves the LSE by up to ~5e-4 of the cap: more than the 1e-4
// LSE tolerance of the tests). The window narrows the key blocks a CTA loads
// ([n_min, n_max): the producer never loads a block no row of the CTA sees)
// and adds one term to the edge-block mask.
//
// TMA descriptors are 4-D over [B, H, S, d] (innermost first: d, S, H, B), so a
// tile past a head's last row is zero-filled by the hardware and never reads
// the next head. Rows >= Sq are computed on zeros and not written; keys >= Sk
// are masked to -inf.
//
// Every wgmma accumulator fragment here is the 64 x N layout of one warpgroup:
// value v of a thread (warp w of its warpgroup, lane l) sits at row
// 16 w + l / 4 + 8 ((v / 2) % 2) and column 8 (v / 4) + 2 (l % 4) + v % 2. The
// register A operand of the RS wgmma has the same order per 16 columns, so P is
// handed over value by value.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/wgmma/attention_wgmma.h"
#include "kernels/attention/wgmma/fwd_tile_scheduler.h"
#include "kernels/common/cuda_check.h"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace detfuse::attention::wg {

using namespace cute;

template <class Cfg>
struct Fwd {
  using T = cutlass::bfloat16_t;
  static constexpr int D = Cfg::D, BR = Cfg::BR, BC = Cfg::BC, ST = Cfg::STAGES, QS = Cfg::QSTAGES;
  static constexpr int THREADS = 384;
  static constexpr int kConsumers = 256;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 128 * (24 + 2 * 240) <= 64K registers
  static constexpr uint32_t kTileBytes = uint32_t(BC) * D * sizeof(T);
  static constexpr uint32_t kQBytes = uint32_t(BR) * D * sizeof(T);
  static constexpr int kQElems = BR * D;  // one Q buffer (a multiple of 1024 bytes)

  // S = Q K^T: M 64 per warpgroup, N = BC keys, K = D; both operands K-major.
  using MmaQK = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BC>, Int<D>>>(),
                                        Layout<Shape<_2, _1, _1>>{}));
  // O += P V: M 64, N = D, K = BC; P from registers (K-major), V MN-major.
  using MmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, Int<D>, Int<BC>>, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));

  // 128-byte swizzled tiles (64 bf16 = one swizzle row along d), as TMA writes
  // them and wgmma reads them.
  using Atom = GMMA::Layout_K_SW128_Atom<T>;
  using SmemQ = decltype(tile_to_shape(Atom{}, Shape<Int<BR>, Int<D>>{}));
  using SmemK = decltype(tile_to_shape(Atom{}, Shape<Int<BC>, Int<D>, Int<ST>>{}));
  using SmemV = SmemK;
  // V seen as (d, key, stage): the B operand of P V, MN-major in shared memory.
  using SmemVt =
      decltype(composition(SmemV{}, make_layout(Shape<Int<D>, Int<BC>, Int<ST>>{}, Stride<Int<BC>, _1, Int<BC * D>>{})));

  using Pipeline = cutlass::PipelineTmaAsync<ST>;
  using PipelineState = typename Pipeline::PipelineState;

  // TMA_O: the O tile of the epilogue (BR x D, the layout of Q), as a base so
  // the other configurations' storage is unchanged (empty base).
  struct OBuf {
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> o;
  };
  struct NoOBuf {};
  struct SharedStorage : std::conditional_t<Cfg::TMA_O, OBuf, NoOBuf> {
    cute::array_aligned<T, QS * cosize_v<SmemQ>, 1024> q;  // QS buffers of kQElems
    cute::array_aligned<T, cosize_v<SmemK>, 1024> k;
    cute::array_aligned<T, cosize_v<SmemV>, 1024> v;
    typename Pipeline::SharedStorage pipe_k;
    typename Pipeline::SharedStorage pipe_v;
    alignas(8) uint64_t q_bar[QS];
    alignas(8) uint64_t q_empty[QS];  // persistent: the consumers are done with that Q buffer
  };

  // Global tensors (S, d, heads, B) with d contiguous.
  using GShape = Shape<int32_t, int32_t, int32_t, int32_t>;
  using GStride = Stride<int64_t, _1, int64_t, int64_t>;
  using GTensor = decltype(make_tensor(make_gmem_ptr(static_cast<T const*>(nullptr)), GShape{}, GStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, SmemQ{}, Shape<Int<BR>, Int<D>>{}, _1{}));
  using TmaKV =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, take<0, 2>(SmemK{}), Shape<Int<BC>, Int<D>>{}, _1{}));
  // TMA_O: the store of one O tile (rows past Sq are clipped by the tensor map).
  using GTensorO = decltype(make_tensor(make_gmem_ptr(static_cast<T*>(nullptr)), GShape{}, GStride{}));
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{}, GTensorO{}, SmemQ{}, Shape<Int<BR>, Int<D>>{}, _1{}));
  struct NoTmaO {};
  using TmaOField = std::conditional_t<Cfg::TMA_O, TmaO, NoTmaO>;

  struct Params {
    TmaQ tma_q;
    TmaKV tma_k;
    TmaKV tma_v;
    int B, H, Hkv, Sq, Sk, group;  // group = H / Hkv
    int m_blocks;
    int causal;
    float scale;       // softmax scale (natural)
    float scale_log2;  // scale * log2(e)
    T* O;
    float* lse;
    int window;        // 0: off (also when >= Sk: it hides nothing then)
    int softcap;       // 0: off; else cap_* below (detail::softcap_raw)
    float cap_k, cap_c;
    FwdTileOrder order;  // persistent: the tile order (fwd_tile_scheduler.h)
    TmaOField tma_o;     // TMA_O: the O store
  };
};

namespace detail {

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float lg2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The softcap on a raw score s (before the softmax scale): returns
// (c / scale) tanh(scale s / c) = cc (1 - 2 / (1 + 2^(s k))) with
// k = 2 scale log2(e) / c and cc = c / scale (SoftcapConsts), so a caller that
// multiplies by scale afterwards gets c tanh(scale s / c). ex2 of a large
// argument is +inf and rcp(inf) = 0: +-cc at the ends, never NaN.
__device__ __forceinline__ float softcap_raw(float s, float k, float cc) {
  return fmaf(-2.f * cc, rcp(1.f + ex2(s * k)), cc);
}

// The backward's softcap factor 1 - t^2 for an element with probability P =
// 2^(s scale log2 e - lse2) (s = softcap_raw's output, lse2 = LSE log2 e): t =
// s scale / c = (log2 P + lse2) / (c log2 e), cap_t = 1 / (c log2 e); clamped
// to [-1, 1] against rounding. P = 0 (masked, underflowed, or a row without a
// visible key, lse2 = +inf) gives 0, never NaN.
__device__ __forceinline__ float softcap_grad(float P, float lse2, float cap_t) {
  const float t = fminf(1.f, fmaxf(-1.f, (lg2(P) + lse2) * cap_t));
  return P > 0.f ? fmaf(-t, t, 1.f) : 0.f;
}

// Named barriers (ids 1 and 2; 0 is __syncthreads) for the ping-pong turns.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// One warpgroup-wide product C (+)= A B over all k blocks of the operands,
// committed as one batch (the caller waits). kRegA: A is a register fragment
// (RS), else shared-memory descriptors (SS).
template <bool kZeroInit, bool kRegA, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wg_gemm(TiledMma& mma, TA& tA, TB const& tB, TC& tC) {
  if constexpr (kRegA) warpgroup_fence_operand(tA);
  warpgroup_fence_operand(tC);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTLASS_PRAGMA_UNROLL
  for (int k = 0; k < size<2>(tA); ++k) {
    cute::gemm(mma, tA(_, _, k), tB(_, _, k), tC);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(tC);
  if constexpr (kRegA) warpgroup_fence_operand(tA);
}

}  // namespace detail

// The first key block of bc keys holding key first_key (the first key the
// first row of a query block sees in its window), at most n_max.
__host__ __device__ __forceinline__ int window_first_block(int first_key, int bc, int n_max) {
  return first_key <= 0 ? 0 : (first_key / bc < n_max ? first_key / bc : n_max);
}

// The host side of the options: the window that matters (>= Sk hides no key:
// query i's window starts at i + Sk - Sq - window + 1 <= 0) and the softcap
// constants of detail::softcap_raw.
struct Options {
  int window = 0;
  int softcap = 0;
  float cap_k = 0.f, cap_c = 0.f;
  float cap_t = 0.f;  // the backward's 1 / (softcap log2 e) (detail::softcap_grad)
  explicit Options(const AttentionProblem& pr) {
    window = pr.window > 0 && pr.window < pr.Sk ? int(pr.window) : 0;
    if (pr.softcap > 0) {
      softcap = 1;
      cap_k = float(2.0 * pr.softmax_scale() * 1.4426950408889634 / pr.softcap);
      cap_c = float(pr.softcap / pr.softmax_scale());
      cap_t = float(1.0 / (pr.softcap * 1.4426950408889634));
    }
  }
};

template <class Cfg>
__global__ void __launch_bounds__(384, 1) attention_fwd_wgmma_kernel(const __grid_constant__ typename Fwd<Cfg>::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K_ = Fwd<Cfg>;
  using T = typename K_::T;
  using Pipeline = typename K_::Pipeline;
  using PipelineState = typename K_::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;
  constexpr bool kPersistent = Cfg::PERSISTENT;
  constexpr int QS = K_::QS;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K_::SharedStorage*>(smem_raw);

  const int tid = threadIdx.x;
  const int warp_group = tid / 128;

  // The tiles of this CTA: persistent, t = blockIdx.x + k gridDim.x in the
  // order of fwd_tile_scheduler.h; else the one tile of (blockIdx.x, y, z),
  // causal: the longest query blocks (the last) start first.
  const int t_first = kPersistent ? int(blockIdx.x) : 0;
  const int t_end = kPersistent ? p.order.tiles() : 1;
  const int t_step = kPersistent ? int(gridDim.x) : 1;
  auto tile_of = [&](int t) -> FwdTile {
    if constexpr (kPersistent) {
      return p.order(t);
    } else {
      return FwdTile{p.causal ? p.m_blocks - 1 - int(blockIdx.x) : int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
    }
  };
  // Key blocks [n_min, n_max) of query block m_block: every key some row of the
  // block may see (causal: up to the last row's diagonal; window: from the
  // first row's window start; below n_min no row of the block sees a key).
  auto key_blocks = [&](int m_block, int& n_min, int& n_max) {
    n_max = (p.Sk + BC - 1) / BC;
    if (p.causal) {
      const int last_row = min((m_block + 1) * BR, p.Sq) - 1;
      const int last_key = last_row + (p.Sk - p.Sq);  // |.| < 2^31: Sq, Sk <= 2^30
      n_max = last_key < 0 ? 0 : min(n_max, last_key / BC + 1);
    }
    n_min = p.window > 0 ? window_first_block(m_block * BR + (p.Sk - p.Sq) - p.window + 1, BC, n_max) : 0;
  };

  if (tid == 0) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    for (int j = 0; j < QS; ++j) {
      Barrier::init(&ss.q_bar[j], 1);
      // Q empty: every consumer thread arrives once its last Q K^T of a tile is done.
      if constexpr (kPersistent) cutlass::arch::ClusterBarrier::init(&ss.q_empty[j], K_::kConsumers);
    }
  }
  typename Pipeline::Params pp;
  pp.role = warp_group == 0 ? (tid == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::NonParticipant)
                            : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = tid == 0;
  pp.num_consumers = K_::kConsumers;
  pp.transaction_bytes = K_::kTileBytes;
  Pipeline pipe_k(ss.pipe_k, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_v(ss.pipe_v, pp, Shape<_1, _1, _1>{});
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename K_::SmemV{});

  if (warp_group == 0) {
    // ------------------------------------------------------------ producer
    cutlass::arch::warpgroup_reg_dealloc<K_::kProducerRegs>();
    if (tid == 0) {
      Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
      Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      PipelineState st = cutlass::make_producer_start_state<Pipeline>();
      int q_iter = 0;  // tiles with keys so far (Q buffer q_iter % QS, phase (q_iter / QS) % 2)
      for (int t = t_first; t < t_end; t += t_step) {
        const FwdTile tile = tile_of(t);
        int n_min, n_max;
        key_blocks(tile.m_block, n_min, n_max);
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
  } else {
    // ----------------------------------------------------------- consumers
    cutlass::arch::warpgroup_reg_alloc<K_::kConsumerRegs>();
    const int ctid = tid - 128;          // 0..255 in the two-warpgroup MMA
    const int lane = tid % 32;
    const int wq = (ctid % 128) / 32;    // warp within the warpgroup
    const int col_lane = 2 * (lane % 4);

    typename K_::MmaQK mma_qk;
    typename K_::MmaPV mma_pv;
    auto thr_qk = mma_qk.get_thread_slice(ctid);
    auto thr_pv = mma_pv.get_thread_slice(ctid);
    Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename K_::SmemVt{});
    Tensor tSrK = thr_qk.partition_fragment_B(sK);   // (MMA, 1, D/16, ST)
    Tensor tOrV = thr_pv.partition_fragment_B(sVt);  // (MMA, 1, BC/16, ST)
    Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<BR>, Int<D>>{});
    static_assert(decltype(size(tOrO))::value == D / 2, "64 x D accumulator per warpgroup");
    // P in bf16 as the register A operand of P V (same value order).
    Tensor tOrP = make_tensor<T>(partition_shape_A(mma_pv, Shape<Int<BR>, Int<BC>>{}));
    static_assert(decltype(size(tOrP))::value == BC / 2, "P fragment matches the score fragment");
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<BR>, Int<BC>>{});
    static_assert(decltype(size(tSrS))::value == BC / 2, "64 x BC scores per warpgroup");

    PipelineState st;  // the K/V ring position, carried from tile to tile
    int q_iter = 0;    // tiles with keys so far (Q buffer q_iter % QS, phase (q_iter / QS) % 2)
    // The last Q K^T of the tile is done: the producer may load Q into this buffer again.
    auto release_q = [&]() {
      if constexpr (kPersistent) cutlass::arch::ClusterBarrier::arrive(&ss.q_empty[q_iter % QS]);
    };

    for (int t = t_first; t < t_end; t += t_step) {
      const FwdTile tile = tile_of(t);
      const int m_block = tile.m_block, h = tile.h, b = tile.b;
      int n_min, n_max;
      key_blocks(m_block, n_min, n_max);
      const int row0 = m_block * BR + (ctid / 128) * 64 + wq * 16 + lane / 4;  // rows row0, row0 + 8
      // This tile's Q buffer (its wgmma descriptors; one buffer: always the same).
      Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + (q_iter % QS) * K_::kQElems), typename K_::SmemQ{});
      Tensor tSrQ = thr_qk.partition_fragment_A(sQ);  // (MMA, 1, D/16) descriptors

      clear(tOrO);
      float row_max[2] = {-INFINITY, -INFINITY};
      float row_sum[2] = {0.f, 0.f};  // this thread's partial sums (its 2 columns of each 8)

      const int diag = m_block * BR + (p.Sk - p.Sq);  // the block's first row's last visible key
      // Softcap (uniform branch), then keys >= Sk, (causal) keys after a row's
      // last visible key and (window) keys at or before its diagonal - window to
      // -inf, on the blocks that hold any (uniform branch).
      auto mask = [&](auto& tSrS, int n) {
        if (p.softcap) {
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < BC / 2; ++v) tSrS(v) = detail::softcap_raw(tSrS(v), p.cap_k, p.cap_c);
        }
        const int key0 = n * BC;
        if (key0 + BC > p.Sk || (p.causal && key0 + BC - 1 > diag) ||
            (p.window > 0 && key0 <= diag + BR - 1 - p.window)) {
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < BC / 2; ++v) {
            const int col = key0 + 8 * (v / 4) + col_lane + (v % 2);
            const int row = row0 + 8 * ((v / 2) % 2);
            if (col >= p.Sk || (p.causal && col > row + (p.Sk - p.Sq)) ||
                (p.window > 0 && col <= row + (p.Sk - p.Sq) - p.window))
              tSrS(v) = -INFINITY;
          }
        }
      };
      // Online softmax over one block: new running max, the correction of the
      // previous blocks' O and sum (returned in corr, the sum already scaled),
      // and S replaced by exp2((S - max) * scale * log2 e).
      auto softmax = [&](auto& tSrS, float (&corr)[2]) {
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
      };
      auto rescale_o = [&](const float (&corr)[2]) {
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < D / 2; ++v) tOrO(v) *= corr[(v / 2) % 2];
      };
      auto to_p = [&](const auto& tSrS) {
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < BC / 2; v += 2) {
          const __nv_bfloat162 two = __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
          tOrP(v) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[0]);
          tOrP(v + 1) = T::bitcast(reinterpret_cast<const uint16_t*>(&two)[1]);
        }
      };

      if (n_max > n_min) {
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
            mask(tSrS, n);
            float corr[2];
            softmax(tSrS, corr);
            rescale_o(corr);
            to_p(tSrS);
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
            mask(tSrS, n);
            float corr[2];
            softmax(tSrS, corr);  // O is zero: nothing to rescale
            to_p(tSrS);
          }
          // Ping-pong: warpgroup c waits on named barrier 1 + c before issuing
          // and then lets the other one go (arrive on 2 - c). Both run the same
          // n_max - n_min - 1 turns; the second primes the first's barrier once
          // and skips its last arrive, so every barrier phase completes (in the
          // persistent kernel too: the second warpgroup primes the next tile
          // only after its last turn here, which waited for the first's last).
          const int cwg = ctid / 128;
          if constexpr (Cfg::PINGPONG) {
            if (cwg == 1 && n_max - n_min >= 2) detail::named_arrive(1, 256);
          }
          for (int n = n_max - 2; n >= n_min; --n) {
            PipelineState prev = st;
            ++st;
            pipe_k.consumer_wait(st);
            pipe_v.consumer_wait(prev);
            if constexpr (Cfg::PINGPONG) detail::named_sync(1 + cwg, 256);
            detail::wg_gemm<true, false>(mma_qk, tSrQ, tSrK(_, _, _, st.index()), tSrS);
            detail::wg_gemm<false, true>(mma_pv, tOrP, tOrV(_, _, _, prev.index()), tOrO);
            if constexpr (Cfg::PINGPONG) {
              if (!(cwg == 1 && n == n_min)) detail::named_arrive(2 - cwg, 256);
            }
            warpgroup_wait<1>();  // S done, P V may still run
            pipe_k.consumer_release(st);
            if (n == n_min) release_q();
            mask(tSrS, n);
            float corr[2];
            softmax(tSrS, corr);
            warpgroup_wait<0>();  // P V done: O and the P registers are free
            pipe_v.consumer_release(prev);
            warpgroup_fence_operand(tOrP);
            rescale_o(corr);
            to_p(tSrS);
          }
          pipe_v.consumer_wait(st);
          detail::wg_gemm<false, true>(mma_pv, tOrP, tOrV(_, _, _, st.index()), tOrO);
          warpgroup_wait<0>();
          pipe_v.consumer_release(st);
          ++st;
        }
        ++q_iter;
      }

      // Epilogue: full row sums, normalise, write O (bf16) and LSE straight
      // from the registers (persistent: under the next tile's loads).
      const int64_t bh = int64_t(b) * p.H + h;
      if constexpr (Cfg::TMA_O) {
        // O through the shared tile and one TMA store. The previous tile's
        // store must have read the tile: its issuing thread waits, then all
        // 256 consumers pass named barrier 3 (1 and 2 are the ping-pong's).
        if (ctid == 0) tma_store_wait<0>();
        detail::named_sync(3, K_::kConsumers);
        Tensor sO = make_tensor(make_smem_ptr(ss.o.data()), typename K_::SmemQ{});
        Tensor tOsO = thr_pv.partition_C(sO);  // the accumulator's (row, col) in the tile
        static_assert(decltype(size(tOsO))::value == D / 2, "one shared element per accumulator value");
        float inv[2];
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < 2; ++r) {
          float s = row_sum[r];
          s += __shfl_xor_sync(0xffffffffu, s, 1);
          s += __shfl_xor_sync(0xffffffffu, s, 2);
          const bool seen = s > 0.f;
          inv[r] = seen ? 1.f / s : 0.f;
          const int row = row0 + 8 * r;
          if (row < p.Sq && lane % 4 == 0) p.lse[bh * p.Sq + row] = seen ? row_max[r] * p.scale + logf(s) : -INFINITY;
        }
        // Values v, v + 1 are columns c, c + 1 (c even) of one row: adjacent
        // in the 128-byte swizzle (it permutes 16-byte chunks), one 4-byte store.
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < D / 2; v += 2) {
          const float iv = inv[(v / 2) % 2];
          *reinterpret_cast<__nv_bfloat162*>(raw_pointer_cast(&tOsO(v))) =
              __floats2bfloat162_rn(tOrO(v) * iv, tOrO(v + 1) * iv);
        }
        cutlass::arch::fence_view_async_shared();  // the generic-proxy writes, seen by TMA
        detail::named_sync(3, K_::kConsumers);
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
        float s = row_sum[r];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
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
      }  // TMA_O
    }
    // TMA_O: the shared O tile must stay until the last store has read it.
    if constexpr (Cfg::TMA_O) {
      if (ctid == 0) tma_store_wait<0>();
    }
  }
#endif
}

template <class Cfg>
size_t fwd_smem_bytes() {
  return sizeof(typename Fwd<Cfg>::SharedStorage);
}

template <class Cfg>
void launch_fwd_impl(const AttentionProblem& pr, const AttentionArgs& a, cudaStream_t stream, int ctas, int group) {
  using K_ = Fwd<Cfg>;
  using T = typename K_::T;
  for (auto [ptr, name] : {std::pair<const void*, const char*>{a.Q, "Q"}, {a.K, "K"}, {a.V, "V"}, {a.O, "O"}}) {
    if (ptr == nullptr) throw Error(std::string("attention wgmma forward: ") + name + " is null");
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      throw Error(std::string("attention wgmma forward: ") + name + " must be 16-byte aligned (TMA)");
  }
  if (a.lse == nullptr) throw Error("attention wgmma forward: lse is null");

  const int B = int(pr.B), H = int(pr.H), Hkv = int(pr.Hkv), Sq = int(pr.Sq), Sk = int(pr.Sk);
  constexpr int D = Cfg::D;
  auto gq = make_tensor(make_gmem_ptr(static_cast<T const*>(a.Q)), make_shape(Sq, D, H, B),
                        make_stride(int64_t(D), _1{}, int64_t(Sq) * D, int64_t(H) * Sq * D));
  auto gk = make_tensor(make_gmem_ptr(static_cast<T const*>(a.K)), make_shape(Sk, D, Hkv, B),
                        make_stride(int64_t(D), _1{}, int64_t(Sk) * D, int64_t(Hkv) * Sk * D));
  auto gv = make_tensor(make_gmem_ptr(static_cast<T const*>(a.V)), make_shape(Sk, D, Hkv, B),
                        make_stride(int64_t(D), _1{}, int64_t(Sk) * D, int64_t(Hkv) * Sk * D));

  auto make_tma_o = [&]() -> typename K_::TmaOField {
    if constexpr (Cfg::TMA_O) {
      auto go = make_tensor(make_gmem_ptr(static_cast<T*>(a.O)), make_shape(Sq, D, H, B),
                            make_stride(int64_t(D), _1{}, int64_t(Sq) * D, int64_t(H) * Sq * D));
      return make_tma_copy(SM90_TMA_STORE{}, go, typename K_::SmemQ{}, Shape<Int<Cfg::BR>, Int<D>>{}, _1{});
    } else {
      return typename K_::TmaOField{};
    }
  };
  const Options opt(pr);
  const int m_blocks = (Sq + Cfg::BR - 1) / Cfg::BR;
  FwdTileOrder order;
  order.m_blocks = m_blocks, order.H = H, order.B = B, order.causal = pr.causal ? 1 : 0, order.group = 1;
  int device = 0, sms = 0;
  if constexpr (Cfg::PERSISTENT) {
    if (int64_t(m_blocks) * H * B > int64_t(INT32_MAX))
      throw Error("attention wgmma persistent forward: more than 2^31 - 1 tiles (can_run refuses this)");
    DETFUSE_CUDA_CHECK(cudaGetDevice(&device));
    DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    int l2 = 0;
    DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    order.group = group > 0 ? std::min(group, H * B)
                            : fwd_l2_head_group(l2, int64_t(2) * Sk * D * int64_t(sizeof(T)), H / Hkv, int64_t(H) * B);
  }
  typename K_::Params P{
      make_tma_copy(SM90_TMA_LOAD{}, gq, typename K_::SmemQ{}, Shape<Int<Cfg::BR>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gk, take<0, 2>(typename K_::SmemK{}), Shape<Int<Cfg::BC>, Int<D>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, gv, take<0, 2>(typename K_::SmemK{}), Shape<Int<Cfg::BC>, Int<D>>{}, _1{}),
      B, H, Hkv, Sq, Sk, H / Hkv,
      m_blocks,
      pr.causal ? 1 : 0,
      float(pr.softmax_scale()),
      float(pr.softmax_scale() * 1.4426950408889634),
      static_cast<T*>(a.O),
      a.lse,
      opt.window,
      opt.softcap,
      opt.cap_k,
      opt.cap_c,
      order,
      make_tma_o()};

  auto kernel = attention_fwd_wgmma_kernel<Cfg>;
  const size_t smem = fwd_smem_bytes<Cfg>();
  // Per launch: the attribute belongs to the function on the current device.
  DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  dim3 grid(unsigned(P.m_blocks), unsigned(H), unsigned(B));
  if constexpr (Cfg::PERSISTENT) {
    // One CTA per SM (the shared memory allows no second), never more CTAs than tiles.
    int n = ctas > 0 && ctas < sms ? ctas : sms;
    if (n > order.tiles()) n = order.tiles();
    grid = dim3(unsigned(n < 1 ? 1 : n), 1u, 1u);
  }
  kernel<<<grid, K_::THREADS, smem, stream>>>(P);
  DETFUSE_CUDA_CHECK(cudaGetLastError());
}

template <class Cfg>
void launch_fwd(const AttentionProblem& pr, const AttentionArgs& a, cudaStream_t stream) {
  launch_fwd_impl<Cfg>(pr, a, stream, 0, 0);
}

template <class Cfg>
void launch_fwd_ctas(const AttentionProblem& pr, const AttentionArgs& a, cudaStream_t stream, int ctas, int group) {
  static_assert(Cfg::PERSISTENT, "a grid cap means something for the persistent forward only");
  launch_fwd_impl<Cfg>(pr, a, stream, ctas, group);
}

}  // namespace detfuse::attention::wg
