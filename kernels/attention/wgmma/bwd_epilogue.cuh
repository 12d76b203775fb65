// The backward's epilogues (FlashAttention-3's epilogue_bwd role, read to
// learn, not copied): the kv kernel's dK * scale and dV in bf16 (keys < Sk)
// from the consumers' fp32 accumulators, the partials strategy's zeros in
// the slot rows of the query blocks a key block skips, and the dq kernel's
// dQ * scale in bf16 (rows < Sq). Value v of a thread's 64 x D accumulator
// sits at row (key / query) 8 ((v / 2) % 2) on from its first and column
// 8 (v / 4) + col_lane + v % 2 (attention_wgmma.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention/wgmma/bwd_kernel_traits.cuh"
#include "kernels/attention/wgmma/bwd_tile_scheduler.cuh"
#include "kernels/attention/wgmma/wgmma_helpers.cuh"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

namespace detfuse::attention::wg {

using namespace cute;

template <class K_>
struct BwdKvEpilogue {
  using Params = typename K_::Params;
  using SharedStorage_ = typename K_::SharedStorage;

  __device__ __forceinline__ static void zero_partials(const Params& p, int m_begin, int m_stop, int ctid) {
    constexpr int D = K_::D, BR = K_::BR;
    // Partials: rows of the query blocks this key block skips (causal:
    // before m_begin, window: from m_stop on) hold zeros in its slot, so
    // the fixed-order sum reads only written values.
    const int64_t lo = min(int64_t(m_begin) * BR, int64_t(p.Sq));
    const int64_t hi = max(lo, min(int64_t(m_stop) * BR, int64_t(p.Sq)));
    for (int g = 0; g < p.group; ++g) {
      float4* z = reinterpret_cast<float4*>(
          p.dq + ((int64_t(blockIdx.y) * p.kb_count + blockIdx.x) * p.group + g) * p.Sq * D);
      for (int64_t i = ctid; i < lo * D / 4; i += 256) z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int64_t i = hi * D / 4 + ctid; i < int64_t(p.Sq) * D / 4; i += 256) z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }

  // dK * scale and dV in bf16, keys key0, key0 + 8 of kv head hk of batch b if
  // < Sk. hs (Params::splits > 1): hk counts the splits of kv head hk / splits;
  // the parts go through dkv_acc in split order first (add_parts), the last
  // split's sum is the one rounded. K_::kStagedDkv (d64, d128's se1 twin):
  // staged (store_staged); else each thread's 4-byte pairs straight from the
  // accumulators (store_direct).
  template <class Acc>
  __device__ __forceinline__ static void store(const Params& p, SharedStorage_& ss, const Acc& tdKacc,
                                               const Acc& tdVacc, int hk, int b, int key0, int col_lane) {
    if constexpr (K_::kHs) {
      if (p.splits > 1) {
        add_parts(p, tdKacc, tdVacc, key0, col_lane);
        return;
      }
    }
    // Session 34 (H100, `detfuse bench`, fwd+bwd ms, old / new in one call, experiments/attention_bench_log.md):
    // staged at 4,32,32,4096,64 causal 2.336 / 2.349 against 2.401 / 2.403; at d128 causal 3.961 / 3.970
    // against 4.051 / 4.055 but non-causal 6.996 / 6.987 against 6.902 / 6.877 (the issue's weakest row).
    // So staged at d64; at d128 the se1 twin (BwdKvSeConfig) stages, the others store directly, and the
    // heuristic chooses by causal.
    if constexpr (K_::kStagedDkv)
      store_staged(p, ss, tdKacc, tdVacc, hk, b, key0, col_lane);
    else
      store_direct(p, tdKacc, tdVacc, hk, b, key0, col_lane);
  }

  template <class Acc>
  __device__ __forceinline__ static void store_direct(const Params& p, const Acc& tdKacc, const Acc& tdVacc, int hk,
                                                      int b, int key0, int col_lane) {
    constexpr int D = K_::D;
    const int64_t base = (int64_t(b) * p.Hkv + hk) * p.Sk;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r;
      if (key < p.Sk) {
        __nv_bfloat16* krow = reinterpret_cast<__nv_bfloat16*>(p.dK) + (base + key) * D;
        __nv_bfloat16* vrow = reinterpret_cast<__nv_bfloat16*>(p.dV) + (base + key) * D;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < D / 8; ++j) {
          const int v = 4 * j + 2 * r;
          *reinterpret_cast<__nv_bfloat162*>(krow + 8 * j + col_lane) =
              __floats2bfloat162_rn(tdKacc(v) * p.scale, tdKacc(v + 1) * p.scale);
          *reinterpret_cast<__nv_bfloat162*>(vrow + 8 * j + col_lane) =
              __floats2bfloat162_rn(tdVacc(v), tdVacc(v + 1));
        }
      }
    }
  }

  // Staged (session 33): the values go through the key block's K and V tiles in
  // shared memory (free once both warpgroups' last products are done, one
  // named barrier over the 256 consumers; the producer loads K, V once a CTA and
  // only when it has a walk) and leave as 16-byte stores of whole rows: per
  // thread D / 16 of dK and of dV instead of D / 2 4-byte stores that each wrote
  // 16 bytes of eight rows (ncu, row 4: the store was the largest per-CTA cost
  // of the d64 kv kernel, `lg` throttle). Same values, same rounding. dK and dV
  // are 16-byte aligned: the launch refuses them otherwise (detail::check_ptr).
  template <class Acc>
  __device__ __forceinline__ static void store_staged(const Params& p, SharedStorage_& ss, const Acc& tdKacc,
                                                      const Acc& tdVacc, int hk, int b, int key0, int col_lane) {
    constexpr int D = K_::D, BC = K_::BC, kChunks = D / 8;  // 16-byte chunks a row
    static_assert(BC == 128 && K_::kConsumers == 256, "two consumer warpgroups of 64 keys each");
    // Row-major [BC][D] bf16, chunk c of row r at chunk c ^ (r % 8): the 4-byte writes of a quad's eight rows
    // and the 16-byte reads of a row land in distinct banks.
    auto at = [](int r, int c) { return r * D * 2 + ((c ^ (r % 8)) * 16); };
    char* sk = reinterpret_cast<char*>(ss.k.data());
    char* sv = reinterpret_cast<char*>(ss.v.data());
    const int r0 = key0 % BC;  // the thread's first row in the key block
    detail::named_sync(K_::kBarDs, 256);  // every consumer past its last product reading K, V
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + 8 * r;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < D / 8; ++j) {
        const int v = 4 * j + 2 * r;
        const int o = at(row, j) + col_lane * 2;
        *reinterpret_cast<__nv_bfloat162*>(sk + o) =
            __floats2bfloat162_rn(tdKacc(v) * p.scale, tdKacc(v + 1) * p.scale);
        *reinterpret_cast<__nv_bfloat162*>(sv + o) = __floats2bfloat162_rn(tdVacc(v), tdVacc(v + 1));
      }
    }
    detail::named_sync(K_::kBarDs, 256);
    const int64_t base = (int64_t(b) * p.Hkv + hk) * p.Sk;
    const int key_base = key0 - r0;  // n_block * BC
    // (the thread read again, as add_parts does: an argument kept live over the mainloop made ptxas spill)
    const int ctid = int(detail::reread_tid()) - 128;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < BC * kChunks / 256; ++i) {
      const int idx = i * 256 + ctid, row = idx / kChunks, c = idx % kChunks;
      const int key = key_base + row;
      if (key < p.Sk) {
        const int64_t g = (base + key) * D + c * 8;
        const int o = at(row, c);
        *reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(p.dK) + g) = *reinterpret_cast<const uint4*>(sk + o);
        *reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(p.dV) + g) = *reinterpret_cast<const uint4*>(sv + o);
      }
    }
  }

  // hs, ws: part s of (batch b, kv head, key block n_block) (hs: kv head
  // hk / splits, s = hk % splits; ws: kv head hk, s the unit's part) waits
  // until the parts before it have added theirs (its semaphore == s), then:
  // part 0 writes its dK, dV part into dkv_acc, a middle part adds its own to
  // it, the last adds its own to the sum so far (acc + own: the sum in part
  // order, ((p0 + p1) + p2) + ...) and writes dK * scale, dV in bf16; the
  // others release the next part (semaphore s + 1). The semaphore and the
  // barrier are the ordered dQ's (K_::Ordered: thread 0 spins with acquire,
  // named barrier kBarDs over the 256 consumers, release after it). Part s - 1
  // is the unit before s (blockIdx.y - 1): its blocks started before s's, and
  // it waits for no later part: no cycle. The tile and the consumer thread are
  // read again here (kept live over the mainloop as arguments, they made
  // ptxas spill ~1 KB in the pb1 kernel).
  template <class Acc>
  __device__ __forceinline__ static void add_parts(const Params& p, const Acc& tdKacc, const Acc& tdVacc, int key0,
                                                   int col_lane) {
    constexpr int D = K_::D;
    const BwdKvTile t = BwdKvScheduler<K_>::tile(p);
    const int ctid = int(detail::reread_tid()) - 128;
    const int n_block = t.n_block, b = t.b;
    const int s = t.part, hkr = p.walk_step == 1 ? t.hk / p.splits : t.hk;
    const int nkb = (p.Sk + K_::BC - 1) / K_::BC;
    const int flag = (b * p.Hkv + hkr) * nkb + n_block;
    if (s > 0) K_::Ordered::wait_eq(p.dkv_sem, ctid, flag, s);
    const bool last = s == p.splits - 1;
    const int64_t base = (int64_t(b) * p.Hkv + hkr) * p.Sk;
    const int64_t vofs = int64_t(p.B) * p.Hkv * p.Sk * D;  // dV's parts after dK's
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r;
      if (key < p.Sk) {
        float* krow = p.dkv_acc + (base + key) * D + col_lane;
        float* vrow = krow + vofs;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < D / 8; ++j) {
          const int v = 4 * j + 2 * r;
          float2 k2 = make_float2(tdKacc(v), tdKacc(v + 1)), v2 = make_float2(tdVacc(v), tdVacc(v + 1));
          if (s > 0) {
            // (from L2: this SM's L1 may hold an older split's copy of the line)
            const float2 ka = __ldcg(reinterpret_cast<const float2*>(krow + 8 * j));
            const float2 va = __ldcg(reinterpret_cast<const float2*>(vrow + 8 * j));
            k2 = make_float2(ka.x + k2.x, ka.y + k2.y);
            v2 = make_float2(va.x + v2.x, va.y + v2.y);
          }
          if (last) {
            __nv_bfloat16* kout = reinterpret_cast<__nv_bfloat16*>(p.dK) + (base + key) * D + col_lane;
            __nv_bfloat16* vout = reinterpret_cast<__nv_bfloat16*>(p.dV) + (base + key) * D + col_lane;
            *reinterpret_cast<__nv_bfloat162*>(kout + 8 * j) = __floats2bfloat162_rn(k2.x * p.scale, k2.y * p.scale);
            *reinterpret_cast<__nv_bfloat162*>(vout + 8 * j) = __floats2bfloat162_rn(v2.x, v2.y);
          } else {
            __stcg(reinterpret_cast<float2*>(krow + 8 * j), k2);
            __stcg(reinterpret_cast<float2*>(vrow + 8 * j), v2);
          }
        }
      }
    }
    if (!last) K_::Ordered::arrive_inc(p.dkv_sem, ctid, flag, 1);
  }
};

template <class K_>
struct BwdDqEpilogue {

  // dQ * scale in bf16, rows row0, row0 + 8 of head bh if < Sq.
  template <class Acc>
  __device__ __forceinline__ static void store(const typename K_::Params& p, const Acc& tdQacc, int64_t bh, int row0,
                                               int col_lane) {
    constexpr int D = K_::D;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row < p.Sq) {
        __nv_bfloat16* qrow = reinterpret_cast<__nv_bfloat16*>(p.dQ) + (bh * p.Sq + row) * D;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < D / 8; ++j) {
          const int v = 4 * j + 2 * r;
          *reinterpret_cast<__nv_bfloat162*>(qrow + 8 * j + col_lane) =
              __floats2bfloat162_rn(tdQacc(v) * p.scale, tdQacc(v + 1) * p.scale);
        }
      }
    }
  }
};

}  // namespace detfuse::attention::wg
