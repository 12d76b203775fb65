// The backward's dQ writes (FlashAttention-3's dQ path roles, read to learn,
// not copied): the kv kernel's consumers hand scale * dS K over (TMA dQ: into
// the fp32 shared tile(s); the other strategies: fp32 atomics, the ordered
// read-modify-write behind the semaphore, or the partials slab), the writer
// warp adds each tile into the tile-blocked accumulator with one
// cp.reduce.async.bulk (ordered: once the semaphore says the key blocks before
// this one have added theirs, then counts its own add; the first add of a tile,
// turn 0, is a plain bulk copy, so the ordered accumulator is never zeroed), and
// the convert kernel un-permutes the accumulator into dQ (ordered: zeros where
// the tile's semaphore says that no key block added).
#pragma once

#include <cuda/ptx>

#include <cstdio>

#include "kernels/attention/wgmma/bwd_kernel_traits.cuh"
#include "kernels/attention/wgmma/bwd_tile_scheduler.cuh"
#include "kernels/attention/wgmma/named_barriers.h"
#include "kernels/attention/wgmma/wgmma_helpers.cuh"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

namespace detfuse::attention::wg {

using namespace cute;

// The writer's bulk write of a tile part: a reduce-add, or (ordered, turn 0:
// the tile's first write) a plain copy. The sum is the same bits except for a
// sign of zero (x, not +0 + x, when x = -0): the convert adds +0 to every
// value, which gives the accumulator-from-zero bits in both cases.
__device__ __forceinline__ void dq_bulk_write(float* dst, const float* src, uint32_t bytes, bool first) {
  if (first)
    cuda::ptx::cp_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared, dst, src, bytes);
  else
    cuda::ptx::cp_reduce_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_add, dst, src,
                                    bytes);
}

template <class K_>
struct BwdDqWriter {
  using Params = typename K_::Params;
  using SharedStorage = typename K_::SharedStorage;
  using Sched = BwdKvScheduler<K_>;

  // The writer warp (TMA dQ: warp 1 of the producer warpgroup, iters > 0):
  // one bulk add per (query head, query block), in the consumers' order (dc1:
  // two, warpgroup 0's tile then warpgroup 1's).
  __device__ __forceinline__ static void run(const Params& p, SharedStorage& ss, int n_block, int hk, int b,
                                             int m_begin, int iters, int tid) {
    constexpr int D = K_::D, BR = K_::BR;
    const int lane = tid % 32;
    int it = 0;
    for (int g = 0; g < p.group; ++g) {
      const int64_t bh = int64_t(b) * p.H + hk * p.group + g;
      for (int u = Sched::u_first(ss, m_begin, ss.m_stop); u != Sched::u_end(ss, m_begin, ss.m_stop);
           u += Sched::u_step(p), ++it) {
        if constexpr (K_::kWq) {
          run_halves(p, ss, n_block, bh, u, it, iters, lane);
          continue;
        }
        const int m = Sched::walk_m(p, u);
        for (int w = 0; w < K_::kDqAdds; ++w) {
          const int buf = K_::kDc ? w : it % K_::kDqBufs;
          // Ordered: the turn waited for before the tile is (FlashAttention-4's
          // order since session 32; before, after the full barrier): the
          // semaphore's round trip runs while the consumers form the part.
          bool first = false;  // lane 0: this key block writes the tile first (turn 0)
          if constexpr (K_::kOrderedDq) {
            if (lane == 0) first = wait_turn(p, ss, n_block, bh, m, u, w);
          }
          detail::named_sync(K_::kBarFull + buf, K_::kBarDqThreads);
          if (lane == 0) {
            int* flag = p.sem + bh * p.m_blocks + m;
            dq_bulk_write(p.dq + (bh * p.m_blocks + m) * (BR * D), &ss.dqs[buf][0], uint32_t(BR * D * sizeof(float)),
                          first);
            cuda::ptx::cp_async_bulk_commit_group();
            if constexpr (K_::kPds2) {
              // The tile read: the consumers may write it again (released
              // below, before the semaphore: with one tile at d = 128 they
              // would otherwise wait for the whole add to land in L2).
              cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{});
            } else if constexpr (K_::kOrderedDq) {
              // Done writing (not only reading): then the next key block may add.
              cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});
              cuda::ptx::fence_proxy_async(cuda::ptx::space_global);
              asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(flag) : "memory");
            } else {
              cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{});
            }
          }
          __syncwarp();
          // The consumers wait for buffer buf again at iteration it + kDqBufs
          // (dc1: it + 1, each warpgroup its own tile).
          if (it + K_::kDqBufs / K_::kDqAdds < iters) detail::named_arrive(K_::kBarEmpty + buf, K_::kBarDqThreads);
          if constexpr (K_::kPds2 && K_::kOrderedDq) {
            if (lane == 0) {
              // Done writing (not only reading): then the next add may
              // come (dc1: this key block's other part, or the next key block).
              // (recomputed, m too: the writer runs on 24 registers; measured: m kept
              // from above cost pds2 d64 spt1 4 / 12 bytes of spills)
              int* flag = p.sem + bh * p.m_blocks + Sched::walk_m(p, u);
              cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});
              cuda::ptx::fence_proxy_async(cuda::ptx::space_global);
              asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(flag) : "memory");
            }
          }
        }
      }
    }
    if (lane == 0) cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});  // before the CTA exits
  }

  // Lane 0, after run (its bulk writes waited for; or a CTA that walks
  // nothing): counts this CTA in its unit's p.dq_done, after its dQ writes,
  // for the overlapped convert (DqConvertWait). The unit read again from
  // %ctaid.y through a volatile move: blockIdx.y, which the tile's decoding
  // reads at the start, was otherwise held the whole kernel (measured: the hs
  // pds4 pb5 kernel 4 -> 40 bytes of spill stores).
  __device__ __forceinline__ static void count_done(const Params& p) {
    int unit;
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(unit));
    int* count = p.dq_done + p.unit_begin + unit;
    cuda::ptx::fence_proxy_async(cuda::ptx::space_global);  // the bulk writes before the count
    asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(count) : "memory");
  }

  // Ordered (lane 0): spins until the semaphore of query block m of head bh
  // says that key blocks n_lo(m) .. n_block - 1 have added theirs (dc1: two
  // adds each, warpgroup 0's of this key block before 1's: add w of the key
  // block's kDqAdds), then orders our bulk adds after theirs. Returns whether
  // this is the tile's first write (turn 0).
  __device__ __forceinline__ static bool wait_turn(const Params& p, SharedStorage& ss, int n_block, int64_t bh,
                                                   int m, int u, int w) {
    const int* flag = p.sem + bh * p.m_blocks + m;
    const int turn = K_::kDqAdds * Sched::dq_turn(p, ss, n_block, m, u) + w;
    int seen;
    do {
      asm volatile("ld.global.acquire.gpu.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    } while (seen != turn);
    cuda::ptx::fence_proxy_async(cuda::ptx::space_global);  // our bulk add after theirs
    return turn == 0;
  }

  // wq1: step it's two halves of the dQ tile (warpgroup w's part in half w),
  // each as soon as its warpgroup has written it: half 0, then half 1, each
  // read by its own bulk add, then its warpgroup told (its empty barrier).
  // Ordered: the key block's turn waited for once, before half 0's add; the
  // semaphore counts one add per key block, once both halves have landed
  // (the halves are disjoint, so each element's adds keep the key-block order).
  __device__ __forceinline__ static void run_halves(const Params& p, SharedStorage& ss, int n_block, int64_t bh,
                                                    int u, int it, int iters, int lane) {
    constexpr int D = K_::D, BR = K_::BR, HALF = BR * D / 2;
    const int m = Sched::walk_m(p, u);
    bool first = false;  // lane 0: this key block writes the tile first (ordered, turn 0)
    // Ordered: the turn waited for before either half is (as run).
    if constexpr (K_::kOrderedDq) {
      if (lane == 0) first = wait_turn(p, ss, n_block, bh, m, u, 0);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int w = 0; w < 2; ++w) {
      detail::named_sync(K_::kBarFull + w, K_::kBarDqThreads);
      if (lane == 0) {
        dq_bulk_write(p.dq + (bh * p.m_blocks + m) * (BR * D) + w * HALF, &ss.dqs[0][w * HALF],
                      uint32_t(HALF * sizeof(float)), first);
        cuda::ptx::cp_async_bulk_commit_group();
        cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{});  // half w read: its warpgroup may write it
      }
      __syncwarp();
      if (it + 1 < iters) detail::named_arrive(K_::kBarEmpty + w, K_::kBarDqThreads);
    }
    if constexpr (K_::kOrderedDq) {
      if (lane == 0) {
        // Both halves written (not only read): then the next key block may add.
        int* flag = p.sem + bh * p.m_blocks + m;
        cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});
        cuda::ptx::fence_proxy_async(cuda::ptx::space_global);
        asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(flag) : "memory");
      }
    }
  }

  // Without pds, after the dQ part = dS K of query block m (rows q0 ..) of head
  // bh (group member g), step it of the walk: both warpgroups' dS read, then
  // the part added by the strategy (TMA: into shared tile it % 2 for the
  // writer warp; atomic; ordered behind the semaphore; partials into this key
  // block's slot). wq, lane, col_lane: this thread's fragment coordinates.
  template <class TdQ>
  __device__ __forceinline__ static void add(const Params& p, SharedStorage& ss, TdQ& tdQacc, int ctid, int wg,
                                             int wq, int lane, int col_lane, int n_block, int g, int64_t bh, int m,
                                             int q0, int it) {
    constexpr int D = K_::D;
    warpgroup_wait<0>();  // dQ part done
    // Both warpgroups have read dS before the next block writes it
    // (ordered: and thread 0 has seen key blocks n_lo(m) .. n_block - 1
    // add their parts to this query block: the key blocks that walk
    // it are a range, m_begin and m_stop growing with n; n_lo = 0
    // without a window).
    const int flag = int(bh * p.m_blocks + m);
    if constexpr (K_::DQS == DqStrategy::kOrdered)
      K_::Ordered::wait_eq(p.sem, ctid, flag, n_block - Sched::n_lo(p, m));
    else
      detail::named_sync(K_::kBarDs, 256);
    if constexpr (K_::kTma) {
      if constexpr (!K_::kDqSplitN) {
        // d = 64: warpgroup 1's part added to warpgroup 0's (as ordered).
        float* xch = reinterpret_cast<float*>(ss.ds.data());
        if (wg == 1) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2)
            *reinterpret_cast<float2*>(xch + K_::dq_tile_offset(ctid - 128, i)) =
                make_float2(tdQacc(i), tdQacc(i + 1));
        }
        detail::named_sync(K_::kBarDs, 256);
        if (wg == 0) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2) {
            const float2 o = *reinterpret_cast<const float2*>(xch + K_::dq_tile_offset(ctid, i));
            tdQacc(i) += o.x;
            tdQacc(i + 1) += o.y;
          }
        }
        detail::named_sync(K_::kBarDs, 256);  // read before the next query block writes dS there
      }
      const int buf = it % 2;
      if (it >= 2) detail::named_sync(K_::kBarEmpty + buf, K_::kBarDqThreads);  // the writer read it
      if (K_::kDqSplitN || wg == 0) {
        float* tile = ss.dqs[buf];
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tdQacc); i += 2)
          *reinterpret_cast<float2*>(tile + K_::dq_tile_offset(ctid, i)) =
              make_float2(tdQacc(i) * p.scale, tdQacc(i + 1) * p.scale);
      }
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // visible to the bulk copy
      detail::named_arrive(K_::kBarFull + buf, K_::kBarDqThreads);
    }
    // Atomic, ordered: this head's rows of the accumulator. Partials:
    // this key block's slot of the slab, rows (head of the group, query).
    float* dq = K_::DQS != DqStrategy::kPartials
                    ? p.dq + bh * p.Sq * D
                    : p.dq + ((int64_t(blockIdx.y) * p.kb_count + blockIdx.x) * p.group + g) * p.Sq * D;
    // K_::dq_row / dq_col of this thread, from the values it holds
    // in registers already (recomputing from ctid costs ptxas ~100
    // more bytes of spills in these kernels).
    auto row_of = [&](int i) { return wq * 16 + lane / 4 + 8 * ((i / 2) % 2); };
    auto col_of = [&](int i) { return (K_::kDqSplitN ? wg * (D / 2) : 0) + 8 * (i / 4) + col_lane; };
    if constexpr (K_::kTma) {
      // added by the writer warp
    } else if constexpr (K_::DQS == DqStrategy::kOrdered) {
      if constexpr (!K_::kDqSplitN) {
        // d = 64: warpgroup 1 hands its part to warpgroup 0 through the
        // dS buffer (both have read dS: 64 x 64 fp32 = its 16 KB), which
        // adds it to its own in a fixed order and alone updates dQ.
        float* xch = reinterpret_cast<float*>(ss.ds.data());
        if (wg == 1) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2)
            *reinterpret_cast<float2*>(xch + row_of(i) * D + col_of(i)) =
                make_float2(tdQacc(i), tdQacc(i + 1));
        }
        detail::named_sync(K_::kBarDs, 256);
        if (wg == 0) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2) {
            const float2 o = *reinterpret_cast<const float2*>(xch + row_of(i) * D + col_of(i));
            tdQacc(i) += o.x;
            tdQacc(i + 1) += o.y;
          }
        }
      }
      if (K_::kDqSplitN || wg == 0) {
        // Read-modify-write through L2 (cg: the previous key block's
        // stores, not a stale L1 line), eight float2 loads in flight
        // before their stores (one at a time would be a round trip each).
        constexpr int kChunk = 8;
        static_assert(K_::kDqPerThread % (2 * kChunk) == 0, "whole chunks");
        CUTLASS_PRAGMA_UNROLL
        for (int i0 = 0; i0 < size(tdQacc); i0 += 2 * kChunk) {
          float2 cur[kChunk];
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < kChunk; ++j) {
            const int i = i0 + 2 * j;
            cur[j] = q0 + row_of(i) < p.Sq
                         ? __ldcg(reinterpret_cast<const float2*>(dq + int64_t(q0 + row_of(i)) * D + col_of(i)))
                         : make_float2(0.f, 0.f);
          }
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < kChunk; ++j) {
            const int i = i0 + 2 * j;
            if (q0 + row_of(i) < p.Sq)
              __stcg(reinterpret_cast<float2*>(dq + int64_t(q0 + row_of(i)) * D + col_of(i)),
                     make_float2(fmaf(tdQacc(i), p.scale, cur[j].x), fmaf(tdQacc(i + 1), p.scale, cur[j].y)));
          }
        }
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(tdQacc); i += 2) {
        const int r = row_of(i), c = col_of(i);
        if (q0 + r < p.Sq) {
          const float2 val = make_float2(tdQacc(i) * p.scale, tdQacc(i + 1) * p.scale);
          float2* at = reinterpret_cast<float2*>(dq + int64_t(q0 + r) * D + c);
          if constexpr (K_::DQS == DqStrategy::kAtomic)
            atomicAdd(at, val);
          else
            *at = val;
        }
      }
    }
    // Ordered: the next key block may add (release after all 256 stores).
    if constexpr (K_::DQS == DqStrategy::kOrdered) K_::Ordered::arrive_inc(p.sem, ctid, flag, 1);
  }

  // pds: this block's (step it, parity buf) dQ part to the shared tile, and
  // the writer warp told (consumer thread ctid, t its thread in warpgroup wg).
  template <class TdQ>
  __device__ __forceinline__ static void hand_tile(const Params& p, SharedStorage& ss, TdQ& tdQacc, int ctid,
                                                   int wg, int t, int it, int buf) {
    const int qb = K_::kDc ? wg : K_::kPds2 ? it % K_::kDqBufs : buf;
    if constexpr (K_::kPds2) {
      // No barrier here: the next block writes the other dS^T tile, and
      // this one again only after both warpgroups have passed the next
      // block's dS^T barrier (so both have finished this block's dQ product).
      // The writer warp has read tile qb (iteration it - kDqBufs; dc1: it - 1).
      // (wq1: half wg of the one tile, behind barriers of its own.)
      if (it >= K_::kDqBufs / K_::kDqAdds) {
        if constexpr (K_::kWq)
          wg_barrier<true>(K_::kBarEmpty, ctid);
        else
          detail::named_sync(K_::kBarEmpty + qb, K_::kBarDqThreads);
      }
      float* tile = ss.dqs[K_::kWq ? 0 : qb];  // (wq1: warpgroup wg's half by dq_tile_offset)
      if constexpr (K_::kDqWhole || K_::kDc) {
        const int wt = K_::kDc ? t : ctid;  // dc1: each tile written by its warpgroup's 128 threads
        // pb2 / pb3 (kDqLate): unscaled, the convert pass scales the sum.
        auto scaled = [&](float x) {
          if constexpr (K_::kDqLate)
            return x;
          else
            return x * p.scale;
        };
        if constexpr (K_::kDq4) {  // pb7: 128-bit stores (dq_tile_offset: groups of 4)
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 4)
            *reinterpret_cast<float4*>(tile + K_::dq_tile_offset(wt, i)) =
                make_float4(scaled(tdQacc(i)), scaled(tdQacc(i + 1)), scaled(tdQacc(i + 2)), scaled(tdQacc(i + 3)));
        } else {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2)
            *reinterpret_cast<float2*>(tile + K_::dq_tile_offset(wt, i)) =
                make_float2(scaled(tdQacc(i)), scaled(tdQacc(i + 1)));
        }
      } else if (wg == 1) {
        // d = 64: warpgroup 1's scaled part first, then warpgroup 0 adds
        // its own in place (thread t of each at the same offsets): a fixed
        // order, scale wg1 + scale wg0 rounded once (fmaf).
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tdQacc); i += 2)
          *reinterpret_cast<float2*>(tile + K_::dq_tile_offset(t, i)) =
              make_float2(tdQacc(i) * p.scale, tdQacc(i + 1) * p.scale);
        detail::named_arrive(K_::kBarXch + qb, 256);
      } else {
        detail::named_sync(K_::kBarXch + qb, 256);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tdQacc); i += 2) {
          float2* at = reinterpret_cast<float2*>(tile + K_::dq_tile_offset(t, i));
          const float2 o = *at;
          *at = make_float2(fmaf(tdQacc(i), p.scale, o.x), fmaf(tdQacc(i + 1), p.scale, o.y));
        }
      }
    } else {
      detail::named_sync(K_::kBarDs, 256);  // both have read dS^T before the next block writes it
      if constexpr (!K_::kDqSplitN) {
        // d = 64: warpgroup 1's part added to warpgroup 0's through the dS^T
        // tile (64 x 64 fp32 = its 16 KB; both have read it).
        float* xch = reinterpret_cast<float*>(ss.ds.data());
        if (wg == 1) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2)
            *reinterpret_cast<float2*>(xch + K_::dq_tile_offset(t, i)) = make_float2(tdQacc(i), tdQacc(i + 1));
        }
        detail::named_sync(K_::kBarDs, 256);
        if (wg == 0) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2) {
            const float2 o = *reinterpret_cast<const float2*>(xch + K_::dq_tile_offset(t, i));
            tdQacc(i) += o.x;
            tdQacc(i + 1) += o.y;
          }
        }
        detail::named_sync(K_::kBarDs, 256);  // read before the next query block writes dS^T there
      }
      // The writer warp has read buffer buf (iteration it - 2) before it is written again.
      if (it >= 2) detail::named_sync(K_::kBarEmpty + buf, K_::kBarDqThreads);
      if (K_::kDqSplitN || wg == 0) {
        float* tile = ss.dqs[buf];
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tdQacc); i += 2)
          *reinterpret_cast<float2*>(tile + K_::dq_tile_offset(ctid, i)) =
              make_float2(tdQacc(i) * p.scale, tdQacc(i + 1) * p.scale);
      }
    }
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // visible to the bulk copy
    if constexpr (K_::kWq)
      wg_barrier<false>(K_::kBarFull, ctid);
    else
      detail::named_arrive(K_::kBarFull + qb, K_::kBarDqThreads);
  }

  // wq1: warpgroup ctid / 128's barrier base + ctid / 128 (sync, or arrive),
  // its 128 threads and the writer warp, the id recomputed at each use from
  // ctid (live there for the tile offsets) through a volatile shift. Measured
  // (ptxas, sp1 d128 ew1 wq1, ordered / atomic spill stores / loads): the ids
  // hoisted out of the walk, 8 / 20 and 4 / 16 bytes (two registers held);
  // constant ids behind a branch on wg, 36 / 40; recomputed from wg (a volatile
  // move), 0 / 0 and 4 / 16; from ctid, 0 / 0 both.
  template <bool kSync>
  __device__ __forceinline__ static void wg_barrier(int base, int ctid) {
    int w;
    asm volatile("shr.u32 %0, %1, 7;" : "=r"(w) : "r"(ctid));
    if constexpr (kSync)
      detail::named_sync(base + w, K_::kBarDqThreads);
    else
      detail::named_arrive(base + w, K_::kBarDqThreads);
  }

  // sp2: step itd's dQ part, scaled and carried in registers, to its tile.
  __device__ __forceinline__ static void hand_carry(SharedStorage& ss, const float (&tdQcarry)[K_::kDqPerThread],
                                                    int ctid, int itd) {
    const int qb = itd % K_::kDqBufs;
    // The writer warp has read tile qb (iteration itd - kDqBufs).
    if (itd >= K_::kDqBufs) detail::named_sync(K_::kBarEmpty + qb, K_::kBarDqThreads);
    float* tile = ss.dqs[qb];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < K_::kDqPerThread; i += 2)
      *reinterpret_cast<float2*>(tile + K_::dq_tile_offset(ctid, i)) =
          make_float2(tdQcarry[i], tdQcarry[i + 1]);
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // visible to the bulk copy
    detail::named_arrive(K_::kBarFull + qb, K_::kBarDqThreads);
  }
};

// The overlapped convert (attention_wgmma_bwd.h dq_done_bytes): count[(b Hkv +
// h / group) splits + s] reaches `expected` (the launch's key blocks) once
// every kv CTA of unit (batch, kv head, split s) has written its dQ adds; query
// head h's tiles wait for the splits units of its (batch, kv head) (hs, ws:
// the unit's split fastest). count == nullptr: the convert runs after the kv
// kernel in stream order.
struct DqConvertWait {
  const int* count;
  int H, group, splits, expected;
};

// Thread 0: until *count >= expected (acquire: the kv CTAs' adds before it;
// the caller's barrier passes them on to the CTA). A count that never comes
// (a kv CTA that did not count: a bug) traps after a minute instead of hanging.
__device__ __forceinline__ void dq_convert_wait(const int* count, int expected) {
  unsigned ns = 64;
  uint64_t t0 = 0;
  for (int seen;;) {
    asm volatile("ld.global.acquire.gpu.b32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
    if (seen >= expected) return;
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (t0 == 0) t0 = now;
    if (now - t0 > 60ull * 1000000000ull) {
      printf("detfuse attention backward: the dQ convert waited a minute for the kv kernel's count (%d of %d)\n",
             seen, expected);
      __trap();
    }
    __nanosleep(ns);
    ns = ns < 2048 ? 2 * ns : ns;
  }
}

// TMA dQ: the tile-blocked accumulator [B H][m_blocks][BR D] (dq_tile_offset
// order, scale applied; K_::kDqLate (pb2 / pb3): unscaled, each value times
// `scale` here, rounded to fp32, before its bf16 rounding) to dQ [B, H, Sq,
// D] in bf16, rows < Sq. One tile per
// block-loop step: 16-byte loads of the tile in its fragment order, each value
// rounded to bf16 (the only arithmetic) into a row-major shared tile at its
// (dq_row, dq_col), then 16-byte stores of whole rows (8 bf16 each; element
// stores where dQ is not 16-byte aligned). Offsets 2 k and 2 k + 1 are values
// i, i + 1 (i even) of one thread: columns c, c + 1 of one row, stored as one
// bf16 pair (pds4, kDqT: rows j, j + 1 of one column, two bf16 stores); the
// shared rows are padded by 8 bf16 (16 bytes), which spreads a warp's pairs
// over the banks (unpadded, its rows all start in bank 0).
// Ordered (sem: the tiles' semaphores, each the count of the key blocks that
// wrote the tile): a tile with count 0 was never written (the accumulator is
// not zeroed) and is dQ = 0. Overlapped (wait.count): a head's tiles once its
// kv CTAs have counted (the accumulator and semaphores then read through L2,
// never the read-only path: the kv kernel may still run), and the kernel ends
// only after the kv kernel (griddepcontrol.wait: what follows in the stream
// sees dK, dV too).
template <class Cfg>
__global__ void __launch_bounds__(256) attention_bwd_dq_tma_convert_kernel(const float* acc,
                                                                          __nv_bfloat16* __restrict__ dQ,
                                                                          int64_t tiles, int Sq, int m_blocks,
                                                                          const int* sem, bool aligned16,
                                                                          float scale, DqConvertWait wait) {
  using K_ = BwdKv<Cfg>;
  constexpr int BR = K_::BR, D = K_::D, TILE = BR * D, THREADS = 256, P = D + 8;
  static_assert(TILE % (4 * THREADS) == 0 && D % 8 == 0, "whole float4 loads and 16-byte row pieces");
  __shared__ alignas(16) __nv_bfloat16 rows[BR * P];
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (wait.count != nullptr) {
      const int64_t bh = tile / m_blocks;
      if (threadIdx.x == 0) {
        const int64_t unit0 = ((bh / wait.H) * (wait.H / wait.group) + (bh % wait.H) / wait.group) * wait.splits;
        for (int s = 0; s < wait.splits; ++s) dq_convert_wait(wait.count + unit0 + s, wait.expected);
      }
      __syncthreads();
    }
    const float4* src = reinterpret_cast<const float4*>(acc + tile * TILE);
    const bool written = sem == nullptr || __ldcg(sem + tile) != 0;
    // (pds4: two steps at a time; all ten unrolled, ptxas spilled 12 bytes at 48 registers.)
    constexpr int kSteps = TILE / (4 * THREADS), kUnroll = K_::kDqT ? 2 : kSteps;
#pragma unroll kUnroll
    for (int it = 0; it < kSteps; ++it) {
      const int q4 = it * THREADS + int(threadIdx.x);
      const float4 v = written ? __ldcs(src + q4) : make_float4(0.f, 0.f, 0.f, 0.f);
      float vals[4] = {v.x, v.y, v.z, v.w};
      if constexpr (K_::kDqLate) {
        CUTLASS_PRAGMA_UNROLL
        for (int u = 0; u < 4; ++u) vals[u] *= scale;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < 4; u += 2) {
        const int off = 4 * q4 + u;
        // dq_tile_offset inverted (i even; off + 1 is value i + 1 of thread t:
        // AttentionWgmmaPds.DqConvertPairs)
        const int t = K_::dq_tile_thread(off), i = K_::dq_tile_value(off);
        // + 0: -0 (a first write that was a copy) as +0, the sum from +0's bits
        if constexpr (K_::kDqT) {  // pds4: values i, i + 1 are rows j, j + 1 of one column
          const __nv_bfloat162 two = __floats2bfloat162_rn(__fadd_rn(vals[u], 0.f), __fadd_rn(vals[u + 1], 0.f));
          rows[K_::dq_row(t, i) * P + K_::dq_col(t, i)] = two.x;
          rows[(K_::dq_row(t, i) + 1) * P + K_::dq_col(t, i)] = two.y;
        } else {
          *reinterpret_cast<__nv_bfloat162*>(&rows[K_::dq_row(t, i) * P + K_::dq_col(t, i)]) =
              __floats2bfloat162_rn(__fadd_rn(vals[u], 0.f), __fadd_rn(vals[u + 1], 0.f));
        }
      }
    }
    __syncthreads();
    const int q0 = int(tile % m_blocks) * BR;
    const int valid = min(BR, Sq - q0);
    __nv_bfloat16* out = dQ + ((tile / m_blocks) * Sq + q0) * D;
    if (aligned16) {
      for (int c = int(threadIdx.x); c < valid * (D / 8); c += THREADS)
        reinterpret_cast<uint4*>(out)[c] =
            *reinterpret_cast<const uint4*>(&rows[c / (D / 8) * P + c % (D / 8) * 8]);
    } else {
      for (int c = int(threadIdx.x); c < valid * D; c += THREADS) out[c] = rows[c / D * P + c % D];
    }
    __syncthreads();  // the tile is read before the next one is written
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (wait.count != nullptr) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace detfuse::attention::wg
