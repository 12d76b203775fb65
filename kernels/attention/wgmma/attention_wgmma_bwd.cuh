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
#pragma once

#include <algorithm>
#include <type_traits>

#include <cuda/ptx>
#include <cutlass/barrier.h>

#include "kernels/attention/wgmma/attention_wgmma.cuh"
#include "kernels/attention/wgmma/attention_wgmma_bwd.h"
#include "kernels/attention/wgmma/bwd_dq_order.h"

namespace detfuse::attention::wg {

using namespace cute;

// ---------------------------------------------------------------- kv kernel
template <class Cfg>
struct BwdKv {
  using T = cutlass::bfloat16_t;
  static constexpr int D = Cfg::D, BR = Cfg::BR, BC = Cfg::BC, ST = Cfg::STAGES;
  static constexpr int DQ = Cfg::DQ;  // 0 none, 1 atomic, 2 partials, 3 ordered, 4/5 atomic/ordered by TMA
  static constexpr bool kTma = DQ == 4 || DQ == 5;
  static constexpr bool kOrderedDq = DQ == 3 || DQ == 5;
  static constexpr bool kPds = Cfg::PDS != 0;  // P^T, dS^T through shared memory (kv_consume_pds)
  // pds2: dS^T double-buffered by query-block parity, LSE and D brought by
  // the producer with the Q / dO stages; d = 128: one fp32 dQ tile (smem).
  // pds3 (d = 64): pds2 at BR = 128; the dQ product split by queries over
  // the two warpgroups (kDqSplitM), one fp32 dQ tile.
  static constexpr bool kPds2 = Cfg::PDS >= 2;
  static constexpr bool kPds3 = Cfg::PDS == 3;
  // sp1, sp2 (pds2): dQ before dK, dK in flight into the next query block
  // (BwdKvPdsConfig, kv_consume_pds).
  static constexpr bool kSp = Cfg::SP >= 1;
  static_assert(!kSp || (kPds2 && BR == 64), "sp1, sp2: pds2 (the 64 x 64 dP^T of wg_gemm_fresh_n64)");
  // sp2 (pds2 d128): sp1, and block m's dQ part handed to the writer warp
  // only after S^T (m + 1) has been issued (kv_consume_pds).
  static constexpr bool kSp2 = Cfg::SP == 2;
  static_assert(!kSp2 || D == 128, "sp2: d = 128 (one dQ tile written by all 256 consumers)");
  // dc1 (sp1 d128, BwdKvPdsConfig): the warpgroups decoupled. dQ split by
  // keys (each warpgroup a 64 x D part from its own 64 keys, as d = 64), one
  // fp32 dQ tile per warpgroup (tile wg), one dS^T tile (own rows), no
  // barrier over both warpgroups; the writer warp adds tile 0 then tile 1.
  static constexpr bool kDc = Cfg::DC == 1;
  static_assert(!kDc || (kSp && !kSp2 && D == 128), "dc1: sp1 at d = 128");
  // rs1 (pds3, or pds2 at d = 128; BwdKvPdsConfig): dV += P^T dO and
  // dK += dS^T Q with A from registers (MmaKV, RS): no P^T tile, dK issued
  // before the dS^T barrier; pds3: the LSE / D ring at the Q / dO depth
  // again (kLOne false).
  static constexpr bool kRs = Cfg::RS == 1;
  static_assert(!kRs || ((kPds3 || (kPds2 && D == 128)) && !kSp && !kDc), "rs1: pds3, or pds2 at d = 128");
  static constexpr int kDsBufs = kPds2 && !kDc ? 2 : 1;
  static constexpr int kDqBufs = kDc ? 2 : (kPds2 && D == 128) || kPds3 ? 1 : 2;
  // Bulk adds per query block of a CTA (the writer warp), and what the
  // ordered semaphore of a query block counts per key block.
  static constexpr int kDqAdds = kDc ? 2 : 1;
  static_assert(!kPds || BR == 64 || (kPds3 && BR == 128 && D == 64),
                "pds: P^T and dS^T rows of 64 queries (pds3: 128, two swizzle atoms; pt_offset)");
  static_assert(DQ == 0 || BR == 64 || kPds3, "dQ in the kv kernel at BR != 64: pds3 only");
  static constexpr int THREADS = 384, kConsumers = 256;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr uint32_t kTileBytes = uint32_t(BR) * D * sizeof(T);
  static constexpr uint32_t kKVBytes = 2u * BC * D * sizeof(T);

  // S^T = K Q^T and dP^T = V dO^T: M 64 keys per warpgroup, N = BR, K = D.
  using MmaSdP = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BR>, Int<D>>>(),
                                         Layout<Shape<_2, _1, _1>>{}));
  // dV += P^T dO and dK += dS^T Q: M 64 keys, N = D, K = BR; A from registers.
  using MmaKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, Int<D>, Int<BR>>, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));
  // dQ part = dS K, M = BR = 64 queries. d = 128: N = D split over the two
  // warpgroups (64 columns each: one 128-byte swizzle atom of the MN-major K
  // view), K = 128 keys. d = 64: a 32-column split would cut a swizzle atom,
  // so each warpgroup takes the 64 keys it owns (K split; both add their
  // 64 x 64 parts, twice the atomics of d = 128 per element).
  static constexpr bool kDqSplitN = D == 128 && !kDc;
  // pds3 (d = 64, BR = 128): M = 128 queries split over the two warpgroups
  // (64 each, N = 64, K = all 128 keys): each writes its own rows of the dQ
  // tile, no exchange (FlashAttention-4's AtomLayoutMdQ = 2 at d64).
  static constexpr bool kDqSplitM = kPds3;
  static constexpr bool kDqWhole = kDqSplitN || kDqSplitM;  // all 256 consumers write the tile
  using MmaDQ = std::conditional_t<
      kDqSplitN,
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D / 2>, Int<BC>>, GMMA::Major::K, GMMA::Major::MN>(),
          Layout<Shape<_1, _2, _1>>{})),
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D>, _64>, GMMA::Major::K, GMMA::Major::MN>(),
          Layout<Shape<_1, _1, _1>>{}))>;
  static constexpr int kDqPerThread = kDqSplitN ? D / 4 : D / 2;
  // TMA dQ: threads writing the shared tile (d = 64: warpgroup 0, after the
  // other's part is added; dc1: each warpgroup its own tile), each
  // kDqPerThread values; value i of thread t at (i / 2) * 2 kDqWriters + 2 t
  // + i % 2 (consecutive threads, consecutive float2: no bank conflicts).
  // Named barriers: full[b] 4 + b, empty[b] 6 + b, the 256 consumers and the
  // writer warp (dc1: tile b's warpgroup, 128 threads, and the writer warp).
  static constexpr int kDqWriters = kDqWhole ? 256 : 128;
  static_assert(DQ == 0 || kDqWriters * kDqPerThread == BR * D, "the writers cover the tile");
  static constexpr int kBarFull = 4, kBarEmpty = 6, kBarDqThreads = (kDc ? 128 : 256) + 32;
  // pds2 at d = 64: warpgroup 1 stores its scaled dQ part into the tile and
  // arrives on 8 + buf; warpgroup 0 waits there and adds its own in place.
  static constexpr int kBarXch = 8;
  __host__ __device__ static constexpr int dq_tile_offset(int t, int i) {
    return (i / 2) * 2 * kDqWriters + 2 * t + i % 2;
  }
  // Row (query in the block) and column of value i of consumer thread t's dQ
  // part (d = 128: warpgroup t / 128 holds columns [wg D/2, (wg + 1) D/2) in
  // the 64 x N layout; d = 64: every column, from its own keys).
  // pds3: warpgroup t / 128 holds queries [64 wg, 64 wg + 64), every column.
  __host__ __device__ static constexpr int dq_row(int t, int i) {
    return (kDqSplitM ? t / 128 * 64 : 0) + (t % 128) / 32 * 16 + (t % 32) / 4 + 8 * ((i / 2) % 2);
  }
  __host__ __device__ static constexpr int dq_col(int t, int i) {
    return (kDqSplitN ? t / 128 * (D / 2) : 0) + 8 * (i / 4) + 2 * (t % 4) + i % 2;
  }

  using Atom = GMMA::Layout_K_SW128_Atom<T>;
  using SmemK = decltype(tile_to_shape(Atom{}, Shape<Int<BC>, Int<D>>{}));
  using SmemKt = decltype(composition(SmemK{}, make_layout(Shape<Int<D>, Int<BC>>{}, Stride<Int<BC>, _1>{})));
  using SmemQ = decltype(tile_to_shape(Atom{}, Shape<Int<BR>, Int<D>, Int<ST>>{}));
  using SmemQt =
      decltype(composition(SmemQ{}, make_layout(Shape<Int<D>, Int<BR>, Int<ST>>{}, Stride<Int<BR>, _1, Int<BR * D>>{})));
  using SmemDS = decltype(tile_to_shape(Atom{}, Shape<Int<BR>, Int<BC>>{}));
  // pds: P^T and dS^T stored keys x queries (queries contiguous: the K-major A
  // of dV += P^T dO and dK += dS^T Q; each warpgroup's 64 keys are one
  // contiguous half), and dS (queries x keys) as the MN-major A of dQ = dS K
  // through a transposed view of the dS^T tile.
  // The other kv kernels never use these types, but they are formed for every
  // configuration: kPtBR keeps them well formed where BR is no multiple of the
  // 64-column swizzle atom (br96).
  static constexpr int kPtBR = kPds ? BR : 64;
  using SmemPt = decltype(tile_to_shape(Atom{}, Shape<Int<BC>, Int<kPtBR>>{}));
  using SmemPtT =
      decltype(composition(SmemPt{}, make_layout(Shape<Int<kPtBR>, Int<BC>>{}, Stride<Int<BC>, _1>{})));
  // The dS^T tiles stacked (pds2: two, by query-block parity; pds1 uses the
  // first only), and their transposed views: the descriptors of buffer i are
  // those of buffer 0 plus an offset, like the Q / dO stages.
  using SmemPt2 = decltype(tile_to_shape(Atom{}, Shape<Int<BC>, Int<kPtBR>, _2>{}));
  using SmemPtT2 = decltype(composition(
      SmemPt2{}, make_layout(Shape<Int<kPtBR>, Int<BC>, _2>{}, Stride<Int<BC>, _1, Int<BC * kPtBR>>{})));
  using MmaKVss = decltype(make_tiled_mma(
      GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D>, Int<kPtBR>>, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));
  using MmaDQpds = std::conditional_t<
      kDqSplitN,
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D / 2>, Int<BC>>, GMMA::Major::MN, GMMA::Major::MN>(),
          Layout<Shape<_1, _2, _1>>{})),
      std::conditional_t<
          kDqSplitM,
          decltype(make_tiled_mma(
              GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D>, Int<BC>>, GMMA::Major::MN, GMMA::Major::MN>(),
              Layout<Shape<_2, _1, _1>>{})),
          decltype(make_tiled_mma(
              GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D>, _64>, GMMA::Major::MN, GMMA::Major::MN>(),
              Layout<Shape<_1, _1, _1>>{}))>>;
  // pds named barriers over the 256 consumers: 2 (LSE and D of the query
  // block, one copy for both warpgroups), 3 (P^T stored before the dV
  // products read it; one per warpgroup, with its id in a register, was a
  // spilled register).
  // pds2: barrier 2 (warpgroup 0) and 3 (warpgroup 1) over 128 threads, each
  // warpgroup's own P^T rows stored before its dV product reads them.
  // dc1: the same two per-warpgroup barriers also order each warpgroup's
  // own dS^T rows before its dK and dQ products (no barrier 1).
  static constexpr int kBarLse = 2, kBarP = 3;
  // Element offset of (key r, query c) in an SmemPt tile: rows of 64 queries
  // (128 bytes, one GMMA::Layout_K_SW128_Atom row), atoms of 8 rows stacked
  // along the keys, and the 128-byte swizzle (16-byte chunk index XOR row % 8),
  // the tile 1024-byte aligned; pds3 (BR = 128): queries 64 .. 127 in a second
  // column of atoms, BC * 64 elements on. Keys r + 8 are 8 * 64 elements on.
  // Checked against the cute layout by tests/attention_wgmma/test_pds_layout.cu
  // on the host.
  __host__ __device__ static constexpr int pt_offset(int r, int c) {
    return (c / 64) * (BC * 64) + ((r * 64 + c % 64) ^ ((r & 7) << 3));
  }

  using Pipeline = cutlass::PipelineTmaAsync<ST>;
  using PipelineState = typename Pipeline::PipelineState;
  // The LSE / D ring (pds2, pds3): the Q / dO depth; pds3 one stage (two
  // would put the storage 108 bytes over 227 KB - 1 KB), released right after
  // the dS^T stores (its last read), so the next block's copies land under
  // this block's dK and dQ products and the next S^T, dP^T.
  static constexpr bool kLOne = kPds3 && !kRs;  // one LSE / D stage, released after the dS^T barrier
  static constexpr int kLStages = kLOne ? 1 : ST;
  using PipelineL = cutlass::PipelineTmaAsync<kLStages>;
  // Ordered dQ: thread 0 of the consumers spins on a flag (acquire) and
  // releases it after named barrier 1 over the 256 consumer threads.
  using Ordered = cutlass::GenericBarrier<cutlass::detail::NamedBarrierSync<256, 1>>;
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
  static constexpr bool kOrderRt = kOrderedDq && kPds2 && !kRs && !kDc && !kSp2;

  struct SharedStorage {
    cute::array_aligned<T, cosize_v<SmemK>, 1024> k;
    cute::array_aligned<T, cosize_v<SmemK>, 1024> v;
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> q;
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> dO;
    // dS (pds: dS^T, SmemPt, kDsBufs of them, then P^T at pt(): all 1024-byte
    // aligned, 16 KB each).
    cute::array_aligned<T, (DQ != 0 ? kDsBufs * cosize_v<SmemDS> : 8) + (kPds && !kRs ? cosize_v<SmemPt> : 0), 1024> ds;
    __host__ __device__ T* pt() { return ds.data() + kDsBufs * cosize_v<SmemDS>; }  // (rs1: none)
    __host__ __device__ T* dst(int i) { return ds.data() + i * cosize_v<SmemDS>; }  // pds dS^T tile i
    alignas(128) float dqs[kTma ? kDqBufs : 1][kTma ? BR * D : 4];  // TMA dQ: the shared tile(s)
    // Per consumer warpgroup (pds: one copy for both, to fit 227 KB at d128),
    // double-buffered: LSE (log2 units, +inf where P must be 0) and D of the
    // current query block's BR rows. pds2: one per Q / dO stage, filled by
    // the producer's bulk copies (16-byte aligned).
    alignas(16) float lse2[kPds ? 1 : 2][kPds2 ? kLStages : 2][BR];
    alignas(16) float dvec[kPds ? 1 : 2][kPds2 ? kLStages : 2][BR];
    typename Pipeline::SharedStorage pipe_q;
    typename Pipeline::SharedStorage pipe_do;
    std::conditional_t<kPds2, typename PipelineL::SharedStorage, char> pipe_l;  // pds2, pds3: LSE and D
    alignas(8) uint64_t kv_bar;
    int m_stop;  // the end of the producer's and the dQ writer's query-block walks (they run on 24
                 // registers; measured: fewer spills than with it in a register there, while the
                 // consumers keep theirs in a register: d64 atomic 8 bytes instead of 104)
    int u_first, u_end;  // kOrderRt: the walk (bwd_dq_order.h dq_walk)
    int turn_base;       // kOrderRt: dq_turn_base
  };
  // The launch asks for sizeof(SharedStorage) of dynamic shared memory; the
  // 1 KB that cuobjdump -res-usage reports as every sm_90 kernel's static
  // shared memory (even a kernel without any: it is the block's reserved
  // 1 KB, and can_run counts it, as common_reason does) leaves 226 KB.
  static_assert(sizeof(SharedStorage) + 1024 <= 227 * 1024, "kv kernel shared storage above 227 KB - 1 KB");

  using GShape = Shape<int32_t, int32_t, int32_t, int32_t>;
  using GStride = Stride<int64_t, _1, int64_t, int64_t>;
  using GTensor = decltype(make_tensor(make_gmem_ptr(static_cast<T const*>(nullptr)), GShape{}, GStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, take<0, 2>(SmemQ{}), Shape<Int<BR>, Int<D>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, SmemK{}, Shape<Int<BC>, Int<D>>{}, _1{}));

  struct Params {
    TmaQ tma_q;
    TmaQ tma_do;
    TmaK tma_k;
    TmaK tma_v;
    int B, H, Hkv, Sq, Sk, group;
    int m_blocks;  // query blocks of BR
    int causal;
    float scale, scale_log2;
    const float* lse;   // [B, H, Sq]
    const float* Dvec;  // [B, H, Sq]
    T* dK;
    T* dV;
    float* dq;  // atomic, ordered: the fp32 accumulator [B, H, Sq, D] (TMA: [B, H, m_blocks, BR * D]
                // tile-blocked, dq_tile_offset order); partials: the slab
    int* sem;   // ordered: [B, H, m_blocks] key blocks added so far, zeroed by the caller
    int kb_begin, kb_count, unit_begin;  // this launch's key blocks and (b, kv head) units
    int window, softcap;                 // Options (attention_wgmma.cuh)
    float cap_k, cap_c, cap_t;           // cap_t = 1 / (softcap log2 e)
    const float* lse2s;                  // pds2: [B, H, m_blocks, BR] LSE log2 e (+inf: P = 0)
    const float* dvecs;                  // pds2: [B, H, m_blocks, BR] D (0 past Sq)
    int order;                           // kOrderRt: DqOrder (bwd_dq_order.h); 0 otherwise
    int turn_a, turn_b, turn_cap, turn_base0;  // kOrderRt: dq_turn_line, and its c as
    unsigned turn_mul;                         // dq_div
    int turn_sh32;
  };

  // The walk (see kOrderRt): its first and end u, its step and the query block of u.
  __device__ static int u_first(const SharedStorage& ss, int m_begin, int m_stop) {
    if constexpr (kOrderRt) return ss.u_first; else return m_first(m_begin, m_stop);
  }
  __device__ static int u_end(const SharedStorage& ss, int m_begin, int m_stop) {
    if constexpr (kOrderRt) return ss.u_end; else return m_end(m_begin, m_stop);
  }
  __device__ static int u_step(const Params& p) {
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
}  // namespace detail

// pds3 (BR = 128): the element offset of (key kl0 + 8 h, query 8 k + col_lane)
// in an SmemPt tile, from base = kl0 64 + col_lane and sw = (kl0 & 7) << 3
// (both per block, detail::opaque): pt_offset with the swizzle applied to the
// chunk index only (col_lane < 8 and kl0 64 leave bits 3 .. 5 to 8 k).
template <int BC>
__host__ __device__ constexpr int pt3_offset(int base, int sw, int k, int h) {
  return (k / 8) * (BC * 64) + base + ((8 * (k % 8)) ^ sw) + 8 * 64 * h;
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
// handed to the writer warp in the next block, right after its S^T issue.
// dc1 (K_::kDc, on sp1): each warpgroup's dQ part over its own 64 keys (the
// d = 64 K split) into its own dQ tile, its dS^T rows ordered by its own
// barrier: nothing in the walk waits for the other warpgroup.
// rs1 (K_::kRs, pds3 or pds2 at d = 128): P^T and dS^T also converted to bf16 A fragments in
// registers; dV and dK read them there (RS), P^T is never stored and dK is
// issued before the dS^T barrier (which only dQ then waits for).
template <class K_, class PipeL, class Acc>
__device__ __forceinline__ void kv_consume_pds(const typename K_::Params& p, typename K_::SharedStorage& ss,
                                               typename K_::Pipeline& pipe_q, typename K_::Pipeline& pipe_do,
                                               PipeL& pipe_l, int n_block, int hk, int b, int m_begin, Acc& tdVacc, Acc& tdKacc) {
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
  auto thr_sdp = mma_sdp.get_thread_slice(ctid);
  auto thr_kv = mma_kv.get_thread_slice(ctid);
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
  auto thr_kvr = mma_kvr.get_thread_slice(ctid);
  Tensor tKVRrdO = thr_kvr.partition_fragment_B(sdOt);  // (MMA, 1, BR/16, ST)
  Tensor tKVRrQ = thr_kvr.partition_fragment_B(sQt);

  PipelineState st;
  [[maybe_unused]] typename K_::PipelineL::PipelineState stl;  // pds3: the one-stage LSE / D ring
  int it = 0;
  // sp1: the Q stage of the block before, held until its dK product (in
  // flight across the loop's back edge) has completed.
  [[maybe_unused]] PipelineState st_q_held;
  // sp2: block m's dQ part, scaled, carried into block m + 1 and handed to
  // the writer warp there once S^T (m + 1) is in flight behind dK (m); the
  // last block's after the walk. The scaling (the same single multiply as
  // the other variants' tile stores) is done before the back edge, so the
  // carried registers are defined by FMULs: read there from the accumulator
  // itself (or from plain moves of it, which ptxas propagates), ptxas cannot
  // tell the dQ product of the previous trip has completed and injects a
  // wait for every product in flight (C7517).
  float tdQcarry[K_::kDqPerThread];
  [[maybe_unused]] auto hand_dq_sp2 = [&](int itd) {
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
  };
  // pds2: this warpgroup's 128 threads (its own rows of P^T, dc1 of dS^T
  // too, stored), barrier 2 or 3 (constant ids: one in a register was a
  // spilled register).
  [[maybe_unused]] auto own_rows_sync = [&]() {
    if (wg == 0)
      detail::named_sync(K_::kBarLse, 128);
    else
      detail::named_sync(K_::kBarP, 128);
  };
  for (int g = 0; g < p.group; ++g) {
    const int h = hk * p.group + g;
    const int64_t bh = int64_t(b) * p.H + h;
    for (int u = K_::u_first(ss, m_begin, m_stop); u != K_::u_end(ss, m_begin, m_stop); u += K_::u_step(p), ++it) {
      const int m = K_::walk_m(p, u);
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
        if (it > 0) hand_dq_sp2(it - 1);
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
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; ++v) {
        const int j = 8 * (v / 4) + col_lane + (v % 2);  // query column within the block
        float e = detail::ex2(fmaf(tSrS(v), p.scale_log2, -lse2[j]));
        if (need_mask) {
          // Key - query offsets outside (lo, hi] are masked (hi: causal, lo: window).
          const int key = key0 + 8 * ((v / 2) % 2);
          const int dlt = key - (q0 + j);
          const int hi = p.causal ? diag_off : INT_MAX;
          const int lo = p.window > 0 ? diag_off - p.window : INT_MIN;
          if (key >= p.Sk || dlt > hi || dlt <= lo) e = 0.f;
        }
        tSrS(v) = e;
      }
      if constexpr (K_::kRs) {
        // rs1: dP^T waited on first, then per half of the queries (the first,
        // then the second half of the k steps of the K = BR products): P^T and
        // dS^T (from P^T in fp32, the operations of the stores below) rounded
        // to bf16 into the A fragments, dS^T also stored for dQ, dV and dK
        // issued on that half. Registers at the peak: S^T, dP^T, dV, dK (192
        // fp32, as pds3 / pds2), each value pair freeing 4 of them for 2, and
        // the first half's products run while the second half is formed. Each
        // accumulator still sums its k steps in ascending order: the base's
        // bits (pds3 at d = 64, pds2 at d = 128).
        // (dV issued on all of P^T before dS^T was formed put P^T's 32
        // registers on top of the 192: 284 bytes spilled.)
        warpgroup_wait<0>();  // dP^T done
        // (hq a compile-time constant: through a loop index the fragments were
        // indexed at run time, 768 bytes of stack.)
        auto half = [&](auto hq_c) {
          constexpr int hq = decltype(hq_c)::value;
          // dS^T also to shared memory for dQ (pds3's / pds2's layout) as
          // formed, before dK is issued: the A registers of a wgmma in flight
          // may not be read.
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
            const int at = K_::kPds3 ? pt3_offset<BC>(base, sw, v / 4, (v / 2) % 2)
                                     : K_::pt_offset(kl0, j) + 8 * 64 * ((v / 2) % 2);
            *reinterpret_cast<__nv_bfloat162*>(ds_base + at) = ds2;
            detail::set_a_pair(tdSr, v, ds2);
          }
          detail::wg_gemm_rs_half<hq>(mma_kvr, tPr, tKVRrdO(_, _, _, st.index()), tdVacc);  // no store, no barrier
          // dK from the registers now; only dQ waits for the dS^T barrier.
          detail::wg_gemm_rs_half<hq>(mma_kvr, tdSr, tKVRrQ(_, _, _, st.index()), tdKacc);
        };
        half(Int<0>{});
        half(Int<1>{});
      } else {
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
          own_rows_sync();  // each warpgroup's dV product reads its own 64 rows of P^T only
        } else {
          detail::named_sync(K_::kBarP, 256);
        }
        detail::wg_gemm<false, false>(mma_kv, tKVrP, tKVrdO(_, _, _, st.index()), tdVacc);
        if (p.softcap) {
          // P^T times 1 - t^2, t recovered from P^T and the LSE (as the other kv kernels).
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < BR / 2; ++v)
            tSrS(v) *= detail::softcap_grad(tSrS(v), lse2[8 * (v / 4) + col_lane + (v % 2)], p.cap_t);
        }
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
      cutlass::arch::fence_view_async_shared();
      if constexpr (K_::kDc) {
        own_rows_sync();  // dc1: dK and dQ of this warpgroup read its own 64 dS^T rows only
      } else {
        detail::named_sync(1, 256);  // both warpgroups' dS^T: dQ reads every key
      }
      if constexpr (K_::kLOne) {
        // Every consumer warp has read this block's LSE and D (P, softcap,
        // dS: before the barrier above; the release is one thread per
        // warpgroup, so not before it): the next block's may come.
        pipe_l.consumer_release(stl);
        ++stl;
      }
      Tensor tKVrdSb = tKVrdS(_, _, _, dsb);
      if constexpr (!K_::kSp && !K_::kRs)
        detail::wg_gemm<false, false>(mma_kv, tKVrdSb, tKVrQ(_, _, _, st.index()), tdKacc);
      Tensor tdQacc = partition_fragment_C(mma_dq, Shape<Int<BR>, Int<D>>{});
      static_assert(decltype(size(tdQacc))::value == K_::kDqPerThread, "dQ part per thread");
      if constexpr (K_::kDqWhole) {
        // d = 128: N split (each warpgroup D / 2 columns); pds3: M split (each
        // warpgroup 64 queries); every key either way.
        auto thr_dq = mma_dq.get_thread_slice(ctid);
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
      // The dQ tile (dc1: the warpgroup's own, written once per block).
      const int qb = K_::kDc ? wg : K_::kPds2 ? it % K_::kDqBufs : buf;
      if constexpr (K_::kPds2) {
        // No barrier here: the next block writes the other dS^T tile, and
        // this one again only after both warpgroups have passed the next
        // block's dS^T barrier (so both have finished this block's dQ product).
        // The writer warp has read tile qb (iteration it - kDqBufs; dc1: it - 1).
        if (it >= K_::kDqBufs / K_::kDqAdds) detail::named_sync(K_::kBarEmpty + qb, K_::kBarDqThreads);
        float* tile = ss.dqs[qb];
        if constexpr (K_::kDqWhole || K_::kDc) {
          const int wt = K_::kDc ? t : ctid;  // dc1: each tile written by its warpgroup's 128 threads
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(tdQacc); i += 2)
            *reinterpret_cast<float2*>(tile + K_::dq_tile_offset(wt, i)) =
                make_float2(tdQacc(i) * p.scale, tdQacc(i + 1) * p.scale);
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
        detail::named_sync(1, 256);  // both have read dS^T before the next block writes it
        if constexpr (!K_::kDqSplitN) {
          // d = 64: warpgroup 1's part added to warpgroup 0's through the dS^T
          // tile (64 x 64 fp32 = its 16 KB; both have read it).
          float* xch = reinterpret_cast<float*>(ss.ds.data());
          if (wg == 1) {
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < size(tdQacc); i += 2)
              *reinterpret_cast<float2*>(xch + K_::dq_tile_offset(t, i)) = make_float2(tdQacc(i), tdQacc(i + 1));
          }
          detail::named_sync(1, 256);
          if (wg == 0) {
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < size(tdQacc); i += 2) {
              const float2 o = *reinterpret_cast<const float2*>(xch + K_::dq_tile_offset(t, i));
              tdQacc(i) += o.x;
              tdQacc(i + 1) += o.y;
            }
          }
          detail::named_sync(1, 256);  // read before the next query block writes dS^T there
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
      detail::named_arrive(K_::kBarFull + qb, K_::kBarDqThreads);
      ++st;
    }
  }
  if constexpr (K_::kSp2) hand_dq_sp2(it - 1);  // the last block's dQ part (the caller walks >= 1 block)
  if constexpr (K_::kSp) warpgroup_wait<0>();  // the last block's dK, before the epilogue reads it
}

template <class Cfg>
__global__ void __launch_bounds__(384, 1) attention_bwd_kv_wgmma_kernel(const __grid_constant__ typename BwdKv<Cfg>::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K_ = BwdKv<Cfg>;
  using T = typename K_::T;
  using Pipeline = typename K_::Pipeline;
  using PipelineState = typename K_::PipelineState;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int D = K_::D, BR = K_::BR, BC = K_::BC;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K_::SharedStorage*>(smem_raw);

  const int tid = threadIdx.x;
  const int warp_group = tid / 128;
  // (spt1 causal: the last key block first, bwd_dq_order.h)
  const int n_block =
      p.kb_begin + (K_::kOrderRt ? dq_walk_key_block(p.order, int(blockIdx.x), p.kb_count) : int(blockIdx.x));
  const int unit = p.unit_begin + int(blockIdx.y);
  const int hk = unit % p.Hkv, b = unit / p.Hkv;

  // Query blocks [m_begin, m_stop) hold every query that sees some key of
  // this block: causal, query i sees key j only if j <= i + (Sk - Sq); window,
  // only if i < j - (Sk - Sq) + window. Both bounds grow with n_block, so the
  // key blocks that walk a query block m are a range [n_lo(m), n_hi(m)).
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
  const int m_count = m_stop - m_begin;
  const int iters = m_count * p.group;

  if (tid == 0) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    Barrier::init(&ss.kv_bar, 1);
    ss.m_stop = m_stop;
    if constexpr (K_::kOrderRt) {
      const DqWalk w = dq_walk(p.order, n_block, m_begin, m_stop, p.m_blocks, p.kb_count);
      ss.u_first = w.u_first;
      ss.u_end = w.u_end;
      ss.turn_base = dq_turn_base(p.order, n_block, p.m_blocks, p.kb_count, p.turn_base0);
    }
  }
  typename Pipeline::Params pp;
  pp.role = warp_group == 0 ? (tid == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::NonParticipant)
                            : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = tid == 0;
  pp.num_consumers = K_::kConsumers;
  pp.transaction_bytes = K_::kTileBytes;
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
      typename PipelineL::Params pl;
      pl.role = warp_group == 0 ? (tid == 64 ? PipelineL::ThreadCategory::Producer
                                             : PipelineL::ThreadCategory::NonParticipant)
                                : PipelineL::ThreadCategory::Consumer;
      pl.is_leader = tid == 64;
      pl.num_consumers = K_::kConsumers;
      pl.transaction_bytes = 2u * BR * sizeof(float);
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
      if (tid / 32 == 1 && iters > 0) {
        // The dQ writer: one bulk add per (query head, query block), in the
        // consumers' order (dc1: two, warpgroup 0's tile then warpgroup 1's).
        const int lane = tid % 32;
        int it = 0;
        for (int g = 0; g < p.group; ++g) {
          const int64_t bh = int64_t(b) * p.H + hk * p.group + g;
          for (int u = K_::u_first(ss, m_begin, ss.m_stop); u != K_::u_end(ss, m_begin, ss.m_stop);
               u += K_::u_step(p), ++it) {
            const int m = K_::walk_m(p, u);
            for (int w = 0; w < K_::kDqAdds; ++w) {
              const int buf = K_::kDc ? w : it % K_::kDqBufs;
              detail::named_sync(K_::kBarFull + buf, K_::kBarDqThreads);
              if (lane == 0) {
                int* flag = p.sem + bh * p.m_blocks + m;
                if constexpr (K_::kOrderedDq) {
                  // Key blocks n_lo(m) .. n_block - 1 add first (dc1: two adds
                  // each, and warpgroup 0's of this key block before 1's).
                  const int turn = K_::kDqAdds * K_::dq_turn(p, ss, n_block, m, u) + w;
                  int seen;
                  do {
                    asm volatile("ld.global.acquire.gpu.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
                  } while (seen != turn);
                  cuda::ptx::fence_proxy_async(cuda::ptx::space_global);  // our bulk add after theirs
                }
                cuda::ptx::cp_reduce_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_add,
                                                p.dq + (bh * p.m_blocks + m) * (BR * D), &ss.dqs[buf][0],
                                                uint32_t(BR * D * sizeof(float)));
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
                  int* flag = p.sem + bh * p.m_blocks + K_::walk_m(p, u);
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
    }
    if constexpr (K_::kPds2) {
      if (tid == 64 && iters > 0) {
        // LSE and D of each (query head, query block), in the Q / dO order.
        auto sl = cutlass::make_producer_start_state<typename K_::PipelineL>();
        for (int g = 0; g < p.group; ++g) {
          const int64_t bhm = (int64_t(b) * p.H + hk * p.group + g) * p.m_blocks;
#pragma unroll 1
          for (int u = K_::u_first(ss, m_begin, ss.m_stop); u != K_::u_end(ss, m_begin, ss.m_stop);
               u += K_::u_step(p)) {
            const int m = K_::walk_m(p, u);
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
    }
    if (tid == 0 && iters > 0) {
      Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
      Tensor mdO = p.tma_do.get_tma_tensor(make_shape(p.Sq, D, p.H, p.B));
      Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.Sk, D, p.Hkv, p.B));
      Tensor gK = local_tile(mK(_, _, hk, b), Shape<Int<BC>, Int<D>>{}, make_coord(n_block, 0));
      Tensor gV = local_tile(mV(_, _, hk, b), Shape<Int<BC>, Int<D>>{}, make_coord(n_block, 0));
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
          for (int u = K_::u_first(ss, m_begin, ss.m_stop); u != K_::u_end(ss, m_begin, ss.m_stop);
               u += K_::u_step(p))
            load(K_::walk_m(p, u));
        } else {
          for (int m = K_::m_first(m_begin, ss.m_stop); m != K_::m_end(m_begin, ss.m_stop); m += K_::kMStep) load(m);
        }
      }
    }
  } else {
    // ----------------------------------------------------------- consumers
    cutlass::arch::warpgroup_reg_alloc<K_::kConsumerRegs>();
    const int ctid = tid - 128;
    const int lane = tid % 32;
    const int wq = (ctid % 128) / 32;
    const int key0 = n_block * BC + (ctid / 128) * 64 + wq * 16 + lane / 4;  // keys key0, key0 + 8
    const int col_lane = 2 * (lane % 4);
    const int diag_off = p.Sk - p.Sq;

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
    Tensor tdVacc = partition_fragment_C(mma_kv, Shape<Int<BC>, Int<D>>{});
    Tensor tdKacc = partition_fragment_C(mma_kv, Shape<Int<BC>, Int<D>>{});
    static_assert(decltype(size(tdVacc))::value == D / 2, "64 x D accumulator per warpgroup");
    clear(tdVacc);
    clear(tdKacc);
    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<BC>, Int<BR>>{});
    Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<BC>, Int<BR>>{});
    static_assert(decltype(size(tSrS))::value == BR / 2, "64 x BR scores per warpgroup");
    Tensor tPr = make_tensor<T>(partition_shape_A(mma_kv, Shape<Int<BC>, Int<BR>>{}));
    Tensor tdSr = make_tensor<T>(partition_shape_A(mma_kv, Shape<Int<BC>, Int<BR>>{}));
    static_assert(decltype(size(tPr))::value == BR / 2, "P^T fragment matches the score fragment");

    if constexpr (K_::kPds) {
      if (iters > 0) {
        Barrier::wait(&ss.kv_bar, 0);
        kv_consume_pds<K_>(p, ss, pipe_q, pipe_do, pipe_l, n_block, hk, b, m_begin, tdVacc, tdKacc);
      }
    } else if (iters > 0) {
      Barrier::wait(&ss.kv_bar, 0);
      PipelineState st;
      int it = 0;
      for (int g = 0; g < p.group; ++g) {
        const int h = hk * p.group + g;
        const int64_t bh = int64_t(b) * p.H + h;
        for (int m = K_::m_first(m_begin, m_stop); m != K_::m_end(m_begin, m_stop); m += K_::kMStep, ++it) {
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
          detail::named_sync(2 + wg, 128);
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
          if (p.softcap) {
            // P^T (in bf16 for dV already) times 1 - t^2, t recovered from P^T
            // and the LSE: dS^T = (P^T (1 - t^2)) (dP^T - D) below, unchanged.
            CUTLASS_PRAGMA_UNROLL
            for (int v = 0; v < BR / 2; ++v)
              tSrS(v) *= detail::softcap_grad(tSrS(v), lse2[8 * (v / 4) + col_lane + (v % 2)], p.cap_t);
          }
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
          if constexpr (K_::DQ != 0) {
            // The A registers of an in-flight wgmma may not be read (PTX), so
            // dV and dK complete first; the Q and dO stages are free then.
            warpgroup_wait<0>();
            pipe_q.consumer_release(st);
            pipe_do.consumer_release(st);
            // dS (queries x keys) to shared memory for dQ = dS K.
            Tensor sdS = make_tensor(make_smem_ptr(ss.ds.data()), typename K_::SmemDS{});
            CUTLASS_PRAGMA_UNROLL
            for (int v = 0; v < BR / 2; ++v) {
              const int kl = key0 - n_block * BC + 8 * ((v / 2) % 2);
              const int ql = 8 * (v / 4) + col_lane + (v % 2);
              sdS(ql, kl) = tdSr(v);
            }
            cutlass::arch::fence_view_async_shared();  // generic-proxy stores before the wgmma reads
            detail::named_sync(1, 256);
            typename K_::MmaDQ mma_dq;
            Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename K_::SmemKt{});
            Tensor tdQacc = partition_fragment_C(mma_dq, Shape<Int<BR>, Int<D>>{});
            static_assert(decltype(size(tdQacc))::value == K_::kDqPerThread, "dQ part per thread");
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
            warpgroup_wait<0>();  // dQ part done
            // Both warpgroups have read dS before the next block writes it
            // (ordered: and thread 0 has seen key blocks n_lo(m) .. n_block - 1
            // add their parts to this query block: the key blocks that walk
            // it are a range, m_begin and m_stop growing with n; n_lo = 0
            // without a window).
            const int flag = int(bh * p.m_blocks + m);
            if constexpr (K_::DQ == 3)
              K_::Ordered::wait_eq(p.sem, ctid, flag, n_block - K_::n_lo(p, m));
            else
              detail::named_sync(1, 256);
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
                detail::named_sync(1, 256);
                if (wg == 0) {
                  CUTLASS_PRAGMA_UNROLL
                  for (int i = 0; i < size(tdQacc); i += 2) {
                    const float2 o = *reinterpret_cast<const float2*>(xch + K_::dq_tile_offset(ctid, i));
                    tdQacc(i) += o.x;
                    tdQacc(i + 1) += o.y;
                  }
                }
                detail::named_sync(1, 256);  // read before the next query block writes dS there
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
            float* dq = K_::DQ != 2
                            ? p.dq + bh * p.Sq * D
                            : p.dq + ((int64_t(blockIdx.y) * p.kb_count + blockIdx.x) * p.group + g) * p.Sq * D;
            // K_::dq_row / dq_col of this thread, from the values it holds
            // in registers already (recomputing from ctid costs ptxas ~100
            // more bytes of spills in these kernels).
            auto row_of = [&](int i) { return wq * 16 + lane / 4 + 8 * ((i / 2) % 2); };
            auto col_of = [&](int i) { return (K_::kDqSplitN ? wg * (D / 2) : 0) + 8 * (i / 4) + col_lane; };
            if constexpr (K_::kTma) {
              // added by the writer warp
            } else if constexpr (K_::DQ == 3) {
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
                detail::named_sync(1, 256);
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
                  if constexpr (K_::DQ == 1)
                    atomicAdd(at, val);
                  else
                    *at = val;
                }
              }
            }
            // Ordered: the next key block may add (release after all 256 stores).
            if constexpr (K_::DQ == 3) K_::Ordered::arrive_inc(p.sem, ctid, flag, 1);
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

    if constexpr (K_::DQ == 2) {
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

    // Epilogue: dK * scale and dV in bf16, keys < Sk.
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
#endif
}

// ---------------------------------------------------------------- dq kernel
template <class Cfg>
struct BwdDq {
  using T = cutlass::bfloat16_t;
  static constexpr int D = Cfg::D, BR = Cfg::BR, BC = Cfg::BC, ST = Cfg::STAGES;
  static constexpr int THREADS = 384, kConsumers = 256;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr uint32_t kTileBytes = uint32_t(BC) * D * sizeof(T);
  static constexpr uint32_t kQBytes = uint32_t(BR) * D * sizeof(T);

  // S = Q K^T and dP = dO V^T: M 64 rows per warpgroup, N = BC, K = D.
  using MmaS = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BC>, Int<D>>>(),
                                       Layout<Shape<_2, _1, _1>>{}));
  // dQ += dS K: M 64, N = D, K = BC; dS from registers, K MN-major.
  using MmaDQ = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, Int<D>, Int<BC>>, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));

  using Atom = GMMA::Layout_K_SW128_Atom<T>;
  using SmemQ = decltype(tile_to_shape(Atom{}, Shape<Int<BR>, Int<D>>{}));
  using SmemK = decltype(tile_to_shape(Atom{}, Shape<Int<BC>, Int<D>, Int<ST>>{}));
  using SmemKt =
      decltype(composition(SmemK{}, make_layout(Shape<Int<D>, Int<BC>, Int<ST>>{}, Stride<Int<BC>, _1, Int<BC * D>>{})));

  using Pipeline = cutlass::PipelineTmaAsync<ST>;
  using PipelineState = typename Pipeline::PipelineState;

  struct SharedStorage {
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> q;
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> dO;
    cute::array_aligned<T, cosize_v<SmemK>, 1024> k;
    cute::array_aligned<T, cosize_v<SmemK>, 1024> v;
    typename Pipeline::SharedStorage pipe_k;
    typename Pipeline::SharedStorage pipe_v;
    alignas(8) uint64_t q_bar;
  };

  using GShape = Shape<int32_t, int32_t, int32_t, int32_t>;
  using GStride = Stride<int64_t, _1, int64_t, int64_t>;
  using GTensor = decltype(make_tensor(make_gmem_ptr(static_cast<T const*>(nullptr)), GShape{}, GStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, SmemQ{}, Shape<Int<BR>, Int<D>>{}, _1{}));
  using TmaKV =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, take<0, 2>(SmemK{}), Shape<Int<BC>, Int<D>>{}, _1{}));

  struct Params {
    TmaQ tma_q;
    TmaQ tma_do;
    TmaKV tma_k;
    TmaKV tma_v;
    int B, H, Hkv, Sq, Sk, group;
    int m_blocks;
    int causal;
    float scale, scale_log2;
    const float* lse;
    const float* Dvec;
    T* dQ;
    int window, softcap;        // Options (attention_wgmma.cuh)
    float cap_k, cap_c, cap_t;  // cap_t = 1 / (softcap log2 e)
  };
};

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
  const int m_block = p.causal ? p.m_blocks - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;

  int n_max = (p.Sk + BC - 1) / BC;
  if (p.causal) {
    const int last_row = min((m_block + 1) * BR, p.Sq) - 1;
    const int last_key = last_row + (p.Sk - p.Sq);
    n_max = last_key < 0 ? 0 : min(n_max, last_key / BC + 1);
  }
  // Window: key blocks [n_min, n_max), as the forward.
  const int n_min = p.window > 0 ? window_first_block(m_block * BR + (p.Sk - p.Sq) - p.window + 1, BC, n_max) : 0;

  if (tid == 0) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    Barrier::init(&ss.q_bar, 1);
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
#endif
}

// TMA dQ: the tile-blocked accumulator [B H][m_blocks][BR D] (dq_tile_offset
// order, scale applied) to dQ [B, H, Sq, D] in bf16, rows < Sq.
template <class Cfg>
__global__ void attention_bwd_dq_tma_convert_kernel(const float* __restrict__ acc, __nv_bfloat16* __restrict__ dQ,
                                                    int64_t tiles, int Sq, int m_blocks) {
  using K_ = BwdKv<Cfg>;
  constexpr int BR = K_::BR, D = K_::D, NT = K_::kDqWriters, TILE = BR * D;
  const int64_t n = tiles * TILE;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tile = idx / TILE;
    const int off = int(idx % TILE);
    const int t = off % (2 * NT) / 2, i = off / (2 * NT) * 2 + off % 2;  // dq_tile_offset inverted
    const int q = int(tile % m_blocks) * BR + K_::dq_row(t, i);
    if (q < Sq) dQ[((tile / m_blocks) * Sq + q) * D + K_::dq_col(t, i)] = __float2bfloat16_rn(acc[idx]);
  }
}

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
                   int* sem, float* stage, bool spt) {
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
  if (Cfg::DQ != 0 && dq == nullptr) throw Error("attention wgmma backward: workspace is null");
  if ((Cfg::DQ == 3 || Cfg::DQ == 5) && sem == nullptr)
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
      kDqOrderDesc, 0, 0, 0, 0, 1u, 0};
  const int64_t n_kb = (pr.Sk + Cfg::BC - 1) / Cfg::BC;
  if (kb_count < 0) kb_count = n_kb - kb_begin;
  if (units < 0) units = pr.B * pr.Hkv - unit_begin;
  // Ordered: a key block waits for the ones before it, so the launch holds
  // every key block of its units, in blockIdx.x order (the hardware starts
  // blocks in linear index order: a waiting block's predecessors have started).
  // TMA: the launch converts the whole accumulator into dQ afterwards.
  if ((Cfg::DQ >= 3) && (kb_begin != 0 || kb_count != n_kb))
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
  dim3 grid(unsigned(kb_count), unsigned(units), 1);
  kernel<<<grid, K_::THREADS, smem, stream>>>(P);
  DETFUSE_CUDA_CHECK(cudaGetLastError());
  if constexpr (K_::kTma) {
    const int64_t tiles = pr.B * pr.H * int64_t(P.m_blocks);
    const int64_t n = tiles * Cfg::BR * D;
    // A grid-stride loop: 32 blocks of 256 threads per SM of this device
    // (elementwise, so the bound changes no bit).
    const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, int64_t(std::max(sms, 1)) * 32));
    attention_bwd_dq_tma_convert_kernel<Cfg><<<blocks, 256, 0, stream>>>(
        dq, static_cast<__nv_bfloat16*>(a.dQ), tiles, Sq, P.m_blocks);
    DETFUSE_CUDA_CHECK(cudaGetLastError());
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
