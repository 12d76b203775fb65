// The backward's tile scheduler (FlashAttention-3's tile_scheduler role, read
// to learn, not copied): which key block, kv head and batch a kv-kernel CTA
// takes (spt1 causal: the last key block first, bwd_dq_order.h), the query
// blocks [m_begin, m_stop) it walks and in which order (the descending walk of
// the ordered dQ, or spt1's run-time order, bwd_dq_order.h), the ordered dQ's
// turn of a key block at a query block; and the query block, head, batch and
// key blocks [n_min, n_max) of a dq-kernel CTA.
#pragma once

#include <climits>

#include "kernels/attention/wgmma/bwd_dq_order.h"
#include "kernels/attention/wgmma/bwd_kernel_traits.cuh"

namespace detfuse::attention::wg {

// A kv-kernel CTA's tile: key block n_block of kv head hk of batch b (hs:
// hk counts the splits, Params::splits), the query blocks [m_begin, m_stop)
// that hold a query seeing one of its keys, the CTA's part of the key block
// (hs, ws; else 0) and the steps of its walk (ws: of its part; else m_stop -
// m_begin).
struct BwdKvTile {
  int n_block, hk, b, m_begin, m_stop, part, steps;
};

template <class K_>
struct BwdKvScheduler {
  using Params = typename K_::Params;
  using SharedStorage = typename K_::SharedStorage;
  static constexpr int BR = K_::BR, BC = K_::BC;
  static constexpr bool kOrderedDq = K_::kOrderedDq, kOrderRt = K_::kOrderRt;

  // Query blocks [m_begin, m_stop) hold every query that sees some key of
  // this block: causal, query i sees key j only if j <= i + (Sk - Sq); window,
  // only if i < j - (Sk - Sq) + window. Both bounds grow with n_block, so the
  // key blocks that walk a query block m are a range [n_lo(m), n_hi(m)).
  __device__ __forceinline__ static BwdKvTile tile(const Params& p) {
    // (spt1 causal: the last key block first, bwd_dq_order.h)
    const int n_block =
        p.kb_begin + (kOrderRt ? dq_walk_key_block(p.order, int(blockIdx.x), p.kb_count) : int(blockIdx.x));
    int unit = p.unit_begin + int(blockIdx.y), part = 0, hkv = p.Hkv;
    if constexpr (K_::kHs) {
      // hs: hk counts the splits of kv head hk / splits (virtual kv heads),
      // the part is hk % splits; ws (walk_step > 1): the unit is (batch, kv
      // head, part), the part fastest.
      if (p.walk_step > 1) {
        part = unit % p.splits;
        unit /= p.splits;
      } else {
        hkv = p.Hkv * p.splits;
      }
    }
    const int hk = unit % hkv, b = unit / hkv;
    if constexpr (K_::kHs) {
      if (p.walk_step == 1) part = hk % p.splits;
    }
    int m_begin = 0, m_stop = p.m_blocks;
    if (p.causal) {
      const int first_q = n_block * BC - (p.Sk - p.Sq);
      m_begin = first_q <= 0 ? 0 : first_q / BR;
    }
    if (p.window > 0) {
      const int last_k = min(n_block * BC + BC, p.Sk) - 1;
      const int last_q = last_k - (p.Sk - p.Sq) + p.window - 1;  // the last query that sees last_k
      m_stop = last_q < 0 ? 0 : min(p.m_blocks, last_q / BR + 1);
    }
    m_begin = min(m_begin, m_stop);  // the walks below stop at m_stop (or start below it)
    int steps = m_stop - m_begin;
    if constexpr (K_::kHs) {
      if (p.walk_step > 1) steps = dq_walk_steps(walk(p, n_block, m_begin, m_stop, part), p.walk_step);
    }
    return BwdKvTile{n_block, hk, b, m_begin, m_stop, part, steps};
  }

  // Thread 0, at the start: the walk's end for the 24-register roles and,
  // kOrderRt, the walk and the turn base (bwd_dq_order.h) in shared memory.
  __device__ __forceinline__ static void init_walk(const Params& p, SharedStorage& ss, int n_block, int m_begin,
                                                   int m_stop, int part) {
    ss.m_stop = m_stop;
    if constexpr (kOrderRt) {
      const DqWalk w = walk(p, n_block, m_begin, m_stop, part);
      ss.u_first = w.u_first;
      ss.u_end = w.u_end;
      ss.turn_base = dq_turn_base(p.order, n_block, p.m_blocks, p.kb_count, p.turn_base0);
    }
  }

  // kOrderRt: the walk of key block n_block over [m_begin, m_stop) in the
  // launch's order (bwd_dq_order.h dq_walk); ws (walk_step > 1): of part `part`.
  __device__ __forceinline__ static DqWalk walk(const Params& p, int n_block, int m_begin, int m_stop, int part) {
    const DqWalk w = dq_walk(p.order, n_block, m_begin, m_stop, p.m_blocks, p.kb_count);
    if constexpr (K_::kHs) {
      if (p.walk_step > 1) return dq_walk_part(w, part, p.walk_step);
    }
    return w;
  }

  // The query blocks a CTA walks, [m_begin, m_blocks): m = m_first, m_first +
  // kMStep, ... != m_end. Ascending, except ordered dQ: descending, so that
  // every key block starts on the last query block, which all of them see.
  // Ascending, a causal key block n would start at its first visible block
  // ~2n and wait there behind key blocks 0 .. n-1, holding its SM while key
  // block 0 walks every query block (measured: causal ordered as slow as
  // non-causal). (An index loop with m computed from it cost ptxas ~100 more
  // bytes of spills in the atomic kernels.)
  static constexpr int kMStep = kOrderedDq ? -1 : 1;
  __device__ static int m_first(int m_begin, int m_blocks) { return kOrderedDq ? m_blocks - 1 : m_begin; }
  __device__ static int m_end(int m_begin, int m_blocks) { return kOrderedDq ? m_begin - 1 : m_blocks; }
  // spt1 (issue 16, bwd_dq_order.h): the ordered pds2 / pds3 / sp1 kernels take the
  // order at run time (Params::order; 0 is the walk above, bit for bit). Every
  // role walks u = u_first, u_first + u_step, ... != u_end (written to shared
  // memory by thread 0 at the start: the producer and the writer run on 24
  // registers), u_step 1, and works on m = walk_m(u). The other kernels keep the loop
  // above unchanged (an index loop cost the atomic kernels spills; measured:
  // the walk cost ordered rs1 d64 52 / 60 bytes of spills, so rs1, and sp2
  // and dc1, which have no spt1 name either, keep it too).
  // The walk (see kOrderRt): its first and end u, its step and the query block of u.
  __device__ static int u_first(const SharedStorage& ss, int m_begin, int m_stop) {
    if constexpr (kOrderRt) return ss.u_first; else return m_first(m_begin, m_stop);
  }
  __device__ static int u_end(const SharedStorage& ss, int m_begin, int m_stop) {
    if constexpr (kOrderRt) return ss.u_end; else return m_end(m_begin, m_stop);
  }
  __device__ static int u_step(const Params& p) {
    if constexpr (K_::kWs) return p.walk_step;  // ws: its part's steps
    if constexpr (kOrderRt) return 1; else return kMStep;
  }
  __device__ static int walk_m(const Params& p, int u) {
    if constexpr (kOrderRt) return dq_walk_m(u, p.m_blocks); else return u;
  }
  // Ordered dQ: the semaphore value of query block m (step u of the walk) at
  // which key block n adds its part (times kDqAdds); kOrderRt: every order's
  // turn as dq_turn_at's line (bwd_dq_order.h), no branch on the order.
  __device__ static int dq_turn(const Params& p, const SharedStorage& ss, int n, int m, int u) {
    if constexpr (kOrderRt)
      return dq_turn_at(p.turn_a, p.turn_b, p.turn_mul, p.turn_sh32, p.turn_cap, ss.turn_base, u);
    else
      return n - n_lo(p, m);
  }

  // The first key block that walks query block m (ordered dQ: the key blocks
  // n_lo(m) .. n - 1 add their parts before key block n). Without a window
  // every key block up to the last that sees m walks it: 0. With one, the
  // first row of m sees keys from m BR + Sk - Sq - window + 1 on, the first
  // key of the range of key blocks whose m_stop exceeds m.
  __device__ static int n_lo(const Params& p, int m) {
    return p.window > 0 ? window_first_block(m * BR + (p.Sk - p.Sq) - p.window + 1, BC, 1 << 30) : 0;
  }
};

// A dq-kernel CTA's tile: query block m_block of head h (kv head hk) of batch
// b, key blocks [n_min, n_max).
struct BwdDqTile {
  int m_block, h, b, hk, n_min, n_max;
};

template <class K_>
struct BwdDqScheduler {
  static constexpr int BR = K_::BR, BC = K_::BC;

  // Causal: the last query block (the most key blocks) first.
  template <class Params>
  __device__ __forceinline__ static BwdDqTile tile(const Params& p) {
    const int m_block = p.causal ? p.m_blocks - 1 - int(blockIdx.x) : int(blockIdx.x);
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    int n_max = (p.Sk + BC - 1) / BC;
    if (p.causal) {
      const int last_row = min((m_block + 1) * BR, p.Sq) - 1;
      const int last_key = last_row + (p.Sk - p.Sq);
      n_max = last_key < 0 ? 0 : min(n_max, last_key / BC + 1);
    }
    // Window: key blocks [n_min, n_max), as the forward.
    const int n_min =
        p.window > 0 ? window_first_block(m_block * BR + (p.Sk - p.Sq) - p.window + 1, BC, n_max) : 0;
    return BwdDqTile{m_block, h, b, hk, n_min, n_max};
  }
};

}  // namespace detfuse::attention::wg
