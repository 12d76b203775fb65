// Hopper (sm_90a) attention forward on wgmma and TMA, warp-specialized in the
// manner of FlashAttention-3 (read to learn, not copied):
//
//   warpgroup 0   producer: one thread issues the TMA loads, Q once (its own
//                 mbarrier) and then K and V tiles, key blocks from the last to
//                 the first, into two STAGES-deep rings (CUTLASS
//                 PipelineTmaAsync: full barriers with transaction counts,
//                 empty barriers released by the consumer threads); the
//                 warpgroup gives registers away (setmaxnreg 24; 32 with
//                 three consumer warpgroups).
//   warpgroups 1-2 consumers (setmaxnreg 240), one TiledMMA of two warpgroups
//                 along M: each owns 64 of the BR = 128 query rows (BR = 192,
//                 d64: warpgroups 1-3 at setmaxnreg 160, three along M,
//                 Fwd::kConsumerWGs; FlashAttention-3 / -4's sm90 tile at
//                 d <= 64). Per key block:
//                 S = Q K^T by wgmma SS (fp32 accumulators), masking (keys >= Sk,
//                 causal) on the blocks that need it, the online softmax in
//                 registers (running max, rescale of O and the running sum, exp2
//                 with the softmax scale folded into log2 e), P rounded to bf16
//                 in registers and O += P V by wgmma RS (P is the A operand from
//                 registers, V read MN-major from the same shared tile through a
//                 transposed view). The warpgroups run independently, so one's
//                 softmax overlaps the others' wgmma.
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
//
// Structure (FlashAttention-3's hopper/ split; kernels/attention/wgmma/README.md
// "Structure"): fwd_kernel_traits.cuh (Fwd<Cfg>: tiles, MMAs, shared storage,
// TMA types, Params), fwd_tile_scheduler.h (the tiles of a CTA),
// fwd_mainloop.cuh (key blocks, the producer's loads, a consumer's MMAs on a
// tile), fwd_softmax.cuh (mask, online softmax, P), fwd_epilogue.cuh (O and
// LSE stores), named_barriers.h (the barrier ids), wgmma_helpers.cuh (device
// helpers shared with the backward). This file: the kernel (its prologue and
// the role dispatch) and the launcher.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/attention/wgmma/attention_wgmma.h"
#include "kernels/attention/wgmma/fwd_epilogue.cuh"
#include "kernels/attention/wgmma/fwd_kernel_traits.cuh"
#include "kernels/attention/wgmma/fwd_mainloop.cuh"
#include "kernels/attention/wgmma/fwd_softmax.cuh"
#include "kernels/attention/wgmma/fwd_tile_scheduler.h"
#include "kernels/attention/wgmma/named_barriers.h"
#include "kernels/attention/wgmma/wgmma_helpers.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace detfuse::attention::wg {

using namespace cute;

// The consumers (warpgroups 1 .. kConsumerWGs, after setmaxnreg; tid: the thread's index
// in the CTA): their fragments, then per tile of the scheduler the mainloop's
// MMAs (when the tile has key blocks) and the epilogue.
template <class Cfg, class Sched, class TK>
__device__ __forceinline__ void fwd_consumers(const typename Fwd<Cfg>::Params& p, typename Fwd<Cfg>::SharedStorage& ss,
                                              const Sched& sched, typename Fwd<Cfg>::Pipeline& pipe_k,
                                              typename Fwd<Cfg>::Pipeline& pipe_v, TK& sK, int tid) {
  using K_ = Fwd<Cfg>;
  using T = typename K_::T;
  using PipelineState = typename K_::PipelineState;
  using Mainloop = FwdMainloop<Cfg>;
  using Epilogue = FwdEpilogue<Cfg>;
  constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;
  constexpr int QS = K_::QS;

  // Three consumer warpgroups get 160 registers each, and S, P and O take 128
  // of them in the overlapped key-block loop: values used only per tile (the
  // thread's row, column, lane; the tile's coordinates for the epilogue) are
  // recomputed where needed instead of kept live across the loop (with them
  // live, ptxas spills; README "Three consumer warpgroups").
  constexpr bool kReread = K_::kConsumerWGs == 3;
  const int ctid = tid - 128;          // 0 .. kConsumers - 1 in the consumer warpgroups' MMA
  const int lane = tid % 32;
  const int wq = (ctid % 128) / 32;    // warp within the warpgroup
  const int col_lane = 2 * (lane % 4);

  typename K_::MmaQK mma_qk;
  typename K_::MmaPV mma_pv;
  // Shared-memory operands sliced at the warpgroup's first thread: their
  // descriptors in uniform registers (detail::wg_slice_thread); the epilogue's
  // partition_C takes the thread's own slice. Not in the persistent loop
  // without the overlap (bc176 ps1, the one such configuration): there ptxas
  // spilled 4 / 16 bytes with them, none without.
  constexpr bool kUniformSlices = Cfg::OVERLAP || !Cfg::PERSISTENT;
  const int wgt = kUniformSlices ? detail::wg_slice_thread(ctid) : ctid;
  auto thr_qk = mma_qk.get_thread_slice(wgt);
  auto thr_pv = mma_pv.get_thread_slice(wgt);
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

  for (int t = sched.t_first; t < sched.t_end; t += sched.t_step) {
    const FwdTile tile = sched.tile(t);
    const int m_block = tile.m_block, h = tile.h, b = tile.b;
    int n_min, n_max;
    Mainloop::key_blocks(p, m_block, n_min, n_max);
    // Three consumer warpgroups (kReread): the thread's index read from
    // %tid.x again (c0), so no coordinate of it stays live across the key blocks.
    const int c0 = kReread ? int(detail::reread_tid()) - 128 : ctid;
    const int row0 = kReread ? m_block * BR + (c0 / 128) * 64 + ((c0 % 128) / 32) * 16 + (c0 % 32) / 4
                             : m_block * BR + (ctid / 128) * 64 + wq * 16 + lane / 4;  // rows row0, row0 + 8
    // This tile's Q buffer (its wgmma descriptors; one buffer: always the same).
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + (q_iter % QS) * K_::kQElems), typename K_::SmemQ{});
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);  // (MMA, 1, D/16) descriptors

    clear(tOrO);
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};  // this thread's partial sums (its 2 columns of each 8)
    FwdSoftmax<Cfg> softmax{row_max, row_sum};
    // diag: the block's first row's last visible key.
    const FwdMask<Cfg> mask{m_block * BR + (p.Sk - p.Sq), row0, kReread ? 2 * (c0 % 4) : col_lane};

    if (n_max > n_min) {
      Mainloop::mma(p, ss, pipe_k, pipe_v, st, q_iter, n_min, n_max, ctid, mma_qk, mma_pv, tSrQ, tSrK, tOrV, tSrS,
                    tOrP, tOrO, softmax, mask);
    }
    if constexpr (kReread) {
      // The tile again from t (made opaque: not the values from before the
      // loop) and the thread's coordinates from %tid.x.
      int te = t;
      asm volatile("" : "+r"(te));
      const FwdTile et = sched.tile(te);
      const int ce = int(detail::reread_tid()) - 128, le = ce % 32;
      const int re = et.m_block * BR + (ce / 128) * 64 + ((ce % 128) / 32) * 16 + le / 4;
      Epilogue::store(p, ss, mma_pv.get_thread_slice(ce), tOrO, softmax, et.m_block, et.h, et.b, re, le, 2 * (le % 4),
                      ce);
    } else {
      Epilogue::store(p, ss, mma_pv.get_thread_slice(ctid), tOrO, softmax, m_block, h, b, row0, lane, col_lane, ctid);
    }
  }
  if constexpr (kReread) {
    Epilogue::finish(int(detail::reread_tid()) - 128);
  } else {
    Epilogue::finish(ctid);
  }
}

// The kernel: shared memory, the barriers and pipelines, then the roles.
template <class Cfg>
__global__ void __launch_bounds__(Fwd<Cfg>::THREADS, 1)
    attention_fwd_wgmma_kernel(const __grid_constant__ typename Fwd<Cfg>::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K_ = Fwd<Cfg>;
  using Pipeline = typename K_::Pipeline;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr bool kPersistent = Cfg::PERSISTENT;
  constexpr int QS = K_::QS;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K_::SharedStorage*>(smem_raw);

  const int tid = threadIdx.x;
  const int warp_group = tid / 128;

  // The tiles of this CTA (fwd_tile_scheduler.h).
  const FwdTileScheduler<kPersistent, typename K_::Params> sched(p);

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
  const typename Pipeline::Params pp = detail::tma_pipeline_params<Pipeline>(tid, 0, K_::kConsumers, K_::kTileBytes);
  Pipeline pipe_k(ss.pipe_k, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_v(ss.pipe_v, pp, Shape<_1, _1, _1>{});
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename K_::SmemV{});

  if (warp_group == 0) {
    // ------------------------------------------------------------ producer
    cutlass::arch::warpgroup_reg_dealloc<K_::kProducerRegs>();
    if (tid == 0) FwdMainloop<Cfg>::load(p, ss, sched, pipe_k, pipe_v, sK, sV);
  } else {
    // ----------------------------------------------------------- consumers
    cutlass::arch::warpgroup_reg_alloc<K_::kConsumerRegs>();
    fwd_consumers<Cfg>(p, ss, sched, pipe_k, pipe_v, sK, tid);
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
  int sms = 0, grid_ctas = 1, l2 = 0;
  // DETFUSE_FWD_GROUP=N (A/B runs; causal, read at every launch) takes groups of N heads as a test's own
  // group does: no search (persistent: round robin unless DETFUSE_FWD_SNAKE says otherwise).
  if (const char* g = pr.causal && group <= 0 ? std::getenv("DETFUSE_FWD_GROUP") : nullptr; g && std::atoi(g) > 0)
    group = std::atoi(g);
  if (Cfg::PERSISTENT || (pr.causal && group <= 0 && opt.window <= 0)) {
    int device = 0;
    DETFUSE_CUDA_CHECK(cudaGetDevice(&device));
    const DeviceInfo& dev = cached_device(device);  // (queried once per process)
    sms = dev.sm_count, l2 = dev.l2_bytes;
  }
  // The L2 rule's group (or the test's, or DETFUSE_FWD_GROUP's).
  const int l2_group = group > 0 ? std::min(group, H * B)
                                 : fwd_l2_head_group(l2, int64_t(2) * Sk * D * int64_t(sizeof(T)), H / Hkv, int64_t(H) * B);
  if constexpr (Cfg::PERSISTENT) {
    if (int64_t(m_blocks) * H * B > int64_t(INT32_MAX))
      throw Error("attention wgmma persistent forward: more than 2^31 - 1 tiles (can_run refuses this)");
    // One CTA per SM (the shared memory allows no second), never more CTAs than tiles.
    grid_ctas = int(std::max<int64_t>(1, std::min<int64_t>(ctas > 0 && ctas < sms ? ctas : sms, order.tiles())));
    order.group = l2_group;
    // Causal: the group size and the snake by the model of the CTAs' loads (fwd_causal_order: the
    // L2 rule's group or a smaller one, round robin or a snake; the L2 rule's group in round robin
    // where a window makes the model's loads wrong). Tests and A/B runs force the order (read at
    // every launch): DETFUSE_FWD_SNAKE=0 round robin over the L2 rule's groups (or a test's own
    // group), 1 the snake over one group of every head (or the test's own group), 2 the snake over
    // the L2 rule's groups (or the test's own). The bits do not depend on the order (each tile is
    // computed alone).
    if (pr.causal) {
      const char* force = std::getenv("DETFUSE_FWD_SNAKE");
      if (force != nullptr) {
        const int mode = std::atoi(force);
        if (mode >= 1) order.snake = 1;
        if (mode == 1 && group <= 0) order.group = H * B;
      } else if (group <= 0 && opt.window <= 0) {
        const FwdOrderChoice c = fwd_causal_order(order, grid_ctas, Cfg::BR, Cfg::BC, Sq, Sk,
                                                  int64_t(B) * Hkv * 2 * Sk * D * int64_t(sizeof(T)), l2, H / Hkv);
        order.group = c.group, order.snake = c.snake;
      }
    }
  } else if (pr.causal) {
    // The one-tile CTAs in groups of heads, longest first over each group, by the list schedule's model
    // (fwd_lpt_group; with a window, whose loads the model gets wrong, and before it: head after head,
    // group 1). DETFUSE_FWD_GROUP=N forces groups of N (1: the order before).
    if (int64_t(m_blocks) * H * B > int64_t(INT32_MAX))
      throw Error("attention wgmma causal forward: more than 2^31 - 1 tiles (can_run refuses this)");
    if (group > 0) {
      order.group = l2_group;
    } else if (opt.window <= 0) {
      FwdTileOrder l2_groups = order;
      l2_groups.group = l2_group;
      order.group = fwd_lpt_group(l2_groups, sms, Cfg::BR, Cfg::BC, Sq, Sk);
    }
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
  if constexpr (Cfg::PERSISTENT) grid = dim3(unsigned(grid_ctas), 1u, 1u);
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
