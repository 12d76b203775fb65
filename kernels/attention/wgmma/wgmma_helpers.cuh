// Device helpers shared by the Hopper attention forward (attention_wgmma.cuh)
// and backward (attention_wgmma_bwd.cuh, which reaches them through
// attention_wgmma.cuh): MUFU approximations, the softcap and its gradient
// factor, named barriers, one warpgroup-wide wgmma product, the window's first
// key block and the host side of the run-time options.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/wgmma/attention_wgmma.h"

#include <cute/tensor.hpp>

namespace detfuse::attention::wg {

using namespace cute;

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

// The first consumer thread of this thread's warpgroup (ctid: the index among
// the consumer threads), the warpgroup read from lane 0 (__shfl_sync): the same
// value for every thread of the warpgroup, and provably so for ptxas. A wgmma
// thread slice taken at it partitions shared-memory operands (descriptors) as
// one taken at ctid does (they depend only on the warpgroup), and ptxas then
// builds the descriptors in uniform registers; taken at ctid they are built in
// ordinary registers and moved with R2UR before every HGMMA (session 17, ncu of
// the d128 forward: 16.9 M R2UR and 11.9 M more UMOV than FlashAttention-4's
// forward, whose cycles follow its instruction count). Not for partition_C or
// anything else that places a thread's own values: those need ctid.
__device__ __forceinline__ int wg_slice_thread(int ctid) { return __shfl_sync(0xffffffffu, ctid / 128, 0) * 128; }

// threadIdx.x read again (asm volatile: not merged with an earlier read, so a
// value derived from it need not stay live across a loop; it is recomputed).
__device__ __forceinline__ uint32_t reread_tid() {
  uint32_t x;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(x));
  return x;
}

// bar.sync / bar.arrive on named barrier `id` (0 is __syncthreads) with
// `threads` threads; the ids are named in named_barriers.h.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// The shared prologue of the forward, kv and dq kernels: the parameters of
// a TMA pipeline (cutlass::PipelineTmaAsync) whose producer is thread
// `producer` of warpgroup 0 (the rest of it takes no part) and whose consumers
// are the other warpgroups' `consumers` threads, `bytes` a stage.
template <class Pipeline>
__device__ __forceinline__ typename Pipeline::Params tma_pipeline_params(int tid, int producer, int consumers,
                                                                        uint32_t bytes) {
  typename Pipeline::Params pp;
  pp.role = tid / 128 == 0 ? (tid == producer ? Pipeline::ThreadCategory::Producer
                                              : Pipeline::ThreadCategory::NonParticipant)
                           : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = tid == producer;
  pp.num_consumers = consumers;
  pp.transaction_bytes = bytes;
  return pp;
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

}  // namespace detfuse::attention::wg
