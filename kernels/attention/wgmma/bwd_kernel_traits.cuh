// The backward's kernel traits (FlashAttention-3's kernel_traits role, read
// to learn, not copied): from a BwdKvConfig / BwdKvPdsConfig or a
// BwdDqConfig (attention_wgmma_bwd.h) the tile sizes and variant switches,
// the TiledMMAs, the swizzled shared-memory layouts, the shared storage, the
// barrier ids, the TMA copy types and the kernels' Params (made once on the
// host by launch_bwd_kv / launch_bwd_dq, attention_wgmma_bwd.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/attention/wgmma/attention_wgmma.cuh"
#include "kernels/attention/wgmma/attention_wgmma_bwd.h"
#include "kernels/attention/wgmma/bwd_dq_order.h"
#include "kernels/attention/wgmma/named_barriers.h"

#include <cute/tensor.hpp>
#include <cutlass/barrier.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace detfuse::attention::wg {

using namespace cute;

// kv kernel (per CTA a key block of BC = 128 keys, a kv head, a batch).
template <class Cfg>
struct BwdKv {
  using T = cutlass::bfloat16_t;
  static constexpr int D = Cfg::D, BR = Cfg::BR, BC = Cfg::BC, ST = Cfg::STAGES;
  static constexpr int DQ = Cfg::DQ;  // dq_param(DQS)
  static constexpr DqStrategy DQS = Cfg::DQS;
  static constexpr bool kTma = DQS == DqStrategy::kAtomicTma || DQS == DqStrategy::kOrderedTma;
  static constexpr bool kOrderedDq = DQS == DqStrategy::kOrdered || DQS == DqStrategy::kOrderedTma;
  static constexpr bool kPds = Cfg::PDS != 0;  // P^T, dS^T through shared memory (kv_consume_pds)
  // pds2: dS^T double-buffered by query-block parity, LSE and D brought by
  // the producer with the Q / dO stages; d = 128: one fp32 dQ tile (smem).
  // pds3 (d = 64): pds2 at BR = 128; the dQ product split by queries over
  // the two warpgroups (kDqSplitM), one fp32 dQ tile.
  static constexpr bool kPds2 = Cfg::PDS >= 2;
  static constexpr bool kPds3 = Cfg::PDS == 3;
  // pds4 (d = 128, session 23): pds2 at BR = 80, the dQ product transposed
  // (kDqT: dQ^T = K^T dS^T, M = D split over the warpgroups, N = 80 queries)
  // from an MN-major dS^T tile with 32-byte swizzle (SmemDsT4, dst4_offset).
  static constexpr bool kPds4 = Cfg::PDS == 4;
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
  // ew1, ew2 (BwdKvEwConfig, issue 16 session 14): ew1 the exp loop without a
  // branch per element (the mask a pass of its own) and D read ahead of the
  // dS^T stores; ew2 also the step's end in FlashAttention-4's order (dQ
  // before dK, the dQ part handed over while dK runs). kv_consume_pds.
  static constexpr int kEw = Cfg::EW;
  static_assert(kEw == 0 || (kPds2 && !kRs && !kDc && !kSp2), "ew: pds2 / pds3 / sp1");
  static_assert(kEw < 2 || !kSp, "ew2: pds2 / pds3 without sp");
  // wq1 (BwdKvWqConfig, issue 16 session 14): the one dQ tile in two
  // contiguous halves, one per consumer warpgroup, each handed to the writer
  // warp behind its own full / empty barriers (160 threads) and added by its
  // own bulk add (bwd_dq_writer.cuh).
  static constexpr bool kWq = Cfg::WQ == 1;
  static_assert(!kWq || (kEw >= 1 && kTma && !kDc), "wq1: ew on pds3 / sp1");
  // pb1 (BwdKvPbConfig, issue 16 session 15; pds2 d128 session 19): ew2 pds3 / pds2 with P^T rounded to
  // bf16 into dV's A fragment right after the exp, dV issued from registers
  // at once, dS^T from the bf16 P^T (stored for dQ, dK from registers).
  static constexpr bool kPb = Cfg::PB >= 1;
  static_assert(!kPb || ((kPds3 || (kPds2 && D == 128)) && kEw == 2 && !kRs && !kSp),
                "pb1: ew2 pds3 (d = 64) or ew2 pds2 (d = 128)");
  static_assert(!kPb || !kWq || (kPds3 && (Cfg::PB == 5 || Cfg::PB == 10)),
                "wq1 with pb: pb5 / pb10 on pds3 (d = 64; BwdKvWqConfig over BwdKvPbNConfig)");
  // pb2 / pb3 (BwdKvPbNConfig, issue 16 session 21; ew2 pds3 at d = 64, pb3
  // also ew2 pds2 at d = 128): the wgmma descriptors from the warp-uniform
  // warpgroup index (kWgUniform), the dQ part handed over unscaled and scaled
  // by the convert pass (kDqLate), P^T / dS^T pairs written to the A
  // fragments as 32-bit words; pb3 (kPbFa) also FlashAttention-4's step order
  // (dS^T from the fp32 P^T, dV issued once dS^T is formed).
  static constexpr bool kWgUniform = Cfg::PB >= 2;
  static constexpr bool kDqLate = Cfg::PB >= 2;
  static constexpr bool kPbFa = Cfg::PB == 3 || Cfg::PB >= 5;
  // pb5 (session 22): the mask before the exp (-inf), the exp in pb3's dS^T
  // loop after the dP^T wait. pb6 (branch s22-pb6): the first half of the
  // queries' exp (kExpFirst 8-query chunks) before the wait, rounded into dV's
  // A fragment and dV's first half issued from it there (kDvSplit).
  // (pb9, session 23: pb6 with pb7's hand-off; retired in session 32.)
  // pb10 (session 32, d64; pds4 d128 allowed, not built): pb5 with FlashAttention-4's split of
  // the exp: the mask (-inf) and the FFMA S^T scale log2 e - LSE over the whole
  // tile before the dP^T wait (kLogitFirst, under the dP^T product), only the
  // EX2 in the dS^T loop. The same fp32 operations as pb5: its bits.
  static constexpr bool kExpInLoop = (Cfg::PB >= 5 && Cfg::PB <= 7) || Cfg::PB == 10;
  static constexpr bool kLogitFirst = Cfg::PB == 10;
  static constexpr bool kDvSplit = Cfg::PB == 6;
  static constexpr int kExpFirst = kDvSplit ? BR / 16 : 0;
  // pb7 (branch s22-pb6): pb5 with the dQ part handed over by 128-bit stores
  // (FlashAttention-4's hand-off: 8 STS.128 a thread instead of 16 STS.64),
  // the tile (and the tile-blocked accumulator) in groups of 4 values a thread.
  // pb8 (branch s22-pb6, d128): pb3 with pb7's hand-off (also 8 STS.128 a thread instead of 16 STS.64).
  static constexpr bool kDq4 = Cfg::PB == 7 || Cfg::PB == 8;
  static_assert(!kWgUniform || (kPds2 && kPb && kTma && (kPds3 || kPbFa)),
                "pb2 / pb3: ew2 pds3 with TMA dQ; pb3 also ew2 pds2 (d = 128)");
  static constexpr int kDsBufs = kPds2 && !kDc ? 2 : 1;
  static constexpr int kDqBufs = kDc ? 2 : (kPds2 && D == 128) || kPds3 ? 1 : 2;
  // Bulk adds per query block of a CTA (the writer warp), and what the
  // ordered semaphore of a query block counts per key block.
  static constexpr int kDqAdds = kDc ? 2 : 1;
  static_assert(!kPds || BR == 64 || (kPds3 && BR == 128 && D == 64) || (kPds4 && BR == 80 && D == 128),
                "pds: P^T and dS^T rows of 64 queries (pds3: 128, two swizzle atoms; pt_offset; "
                "pds4: 80, dst4_offset)");
  static_assert(DQS == DqStrategy::kNone || BR == 64 || kPds3 || kPds4,
                "dQ in the kv kernel at BR != 64: pds3, pds4 only");
  static_assert(!kPds4 || (kPb && kPbFa && !kRs && !kSp && !kDc && !kWq),
                "pds4: pb5 / pb7 (P^T and dS^T of dV, dK in registers)");
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
  static constexpr bool kDqSplitN = D == 128 && !kDc && !kPds4;
  // pds3 (d = 64, BR = 128): M = 128 queries split over the two warpgroups
  // (64 each, N = 64, K = all 128 keys): each writes its own rows of the dQ
  // tile, no exchange (FlashAttention-4's AtomLayoutMdQ = 2 at d64).
  static constexpr bool kDqSplitM = kPds3;
  // pds4 (BR = 80, no multiple of wgmma's M = 64): dQ^T = K^T dS^T, M = D =
  // 128 split over the warpgroups (64 columns of dQ each), N = the 80 queries,
  // K = all 128 keys (FlashAttention's dQ_swapAB); value i of a thread holds
  // dQ (query dq_row, column dq_col): values i, i + 1 are queries j, j + 1.
  static constexpr bool kDqT = kPds4;
  static constexpr bool kDqWhole = kDqSplitN || kDqSplitM || kDqT;  // all 256 consumers write the tile
  using MmaDQ = std::conditional_t<
      kDqSplitN,
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D / 2>, Int<BC>>, GMMA::Major::K, GMMA::Major::MN>(),
          Layout<Shape<_1, _2, _1>>{})),
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<T, T, float, Shape<_64, Int<D>, _64>, GMMA::Major::K, GMMA::Major::MN>(),
          Layout<Shape<_1, _1, _1>>{}))>;
  static constexpr int kDqPerThread = kDqT ? BR / 2 : kDqSplitN ? D / 4 : D / 2;
  // TMA dQ: threads writing the shared tile (d = 64: warpgroup 0, after the
  // other's part is added; dc1: each warpgroup its own tile), each
  // kDqPerThread values; value i of thread t at (i / 2) * 2 kDqWriters + 2 t
  // + i % 2 (consecutive threads, consecutive float2: no bank conflicts).
  // Named barriers (named_barriers.h BwdBarrier): full[b] kDqFull0 + b,
  // empty[b] kDqEmpty0 + b, the 256 consumers and the writer warp (dc1: tile
  // b's warpgroup, 128 threads, and the writer warp).
  static constexpr int kDqWriters = kDqWhole ? 256 : 128;
  static_assert(DQS == DqStrategy::kNone || kDqWriters * kDqPerThread == BR * D, "the writers cover the tile");
  // wq1: half w's full[w] kDqWgFull0 + w, empty[w] kDqWgEmpty0 + w, warpgroup
  // w's 128 threads and the writer warp.
  static constexpr int kBarFull = barrier_id(kWq ? BwdBarrier::kDqWgFull0 : BwdBarrier::kDqFull0),
                       kBarEmpty = barrier_id(kWq ? BwdBarrier::kDqWgEmpty0 : BwdBarrier::kDqEmpty0);
  static constexpr int kBarDqThreads = (kDc || kWq ? 128 : 256) + 32;
  // pds2 at d = 64: warpgroup 1 stores its scaled dQ part into the tile and
  // arrives on kDqXch0 + buf; warpgroup 0 waits there and adds its own in place.
  static constexpr int kBarXch = barrier_id(BwdBarrier::kDqXch0);
  // The 256 consumers around dS (dS^T): stored, read (BwdBarrier::kDs).
  static constexpr int kBarDs = barrier_id(BwdBarrier::kDs);
  // wq1: warpgroup t / 128's values in half t / 128 of the tile (BR D / 2
  // floats each), in the same order over its 128 threads.
  static_assert(!kWq || (kDqWhole && kDqBufs == 1 && kDqWriters == 256), "wq1: one tile, both warpgroups write");
  static_assert(!kDq4 || (kDqWhole && !kWq && !kDc && kDqPerThread % 4 == 0), "pb7, pb8: the whole-tile hand-off, groups of 4");
  // pb7, pb8 (kDq4): groups of 4 values, consecutive threads' groups consecutive.
  static constexpr int kDqGroup = kDq4 ? 4 : 2;
  __host__ __device__ static constexpr int dq_tile_offset(int t, int i) {
    if constexpr (kWq) return (t / 128) * (BR * D / 2) + (i / 2) * 2 * 128 + 2 * (t % 128) + i % 2;
    return (i / kDqGroup) * kDqGroup * kDqWriters + kDqGroup * t + i % kDqGroup;
  }
  // The inverse of dq_tile_offset: thread t and value i at element off of the tile.
  __host__ __device__ static constexpr int dq_tile_thread(int off) {
    if constexpr (kWq) return off / (BR * D / 2) * 128 + off % (BR * D / 2) % 256 / 2;
    return off % (kDqGroup * kDqWriters) / kDqGroup;
  }
  __host__ __device__ static constexpr int dq_tile_value(int off) {
    if constexpr (kWq) return off % (BR * D / 2) / 256 * 2 + off % 2;
    return off / (kDqGroup * kDqWriters) * kDqGroup + off % kDqGroup;
  }
  // Row (query in the block) and column of value i of consumer thread t's dQ
  // part (d = 128: warpgroup t / 128 holds columns [wg D/2, (wg + 1) D/2) in
  // the 64 x N layout; d = 64: every column, from its own keys).
  // pds3: warpgroup t / 128 holds queries [64 wg, 64 wg + 64), every column.
  // pds4 (kDqT): the C fragment is of dQ^T (M = columns, warpgroup t / 128
  // holds [64 wg, 64 wg + 64), N = queries): rows and columns swap.
  __host__ __device__ static constexpr int dq_row(int t, int i) {
    if constexpr (kDqT) return 8 * (i / 4) + 2 * (t % 4) + i % 2;
    return (kDqSplitM ? t / 128 * 64 : 0) + (t % 128) / 32 * 16 + (t % 32) / 4 + 8 * ((i / 2) % 2);
  }
  __host__ __device__ static constexpr int dq_col(int t, int i) {
    if constexpr (kDqT) return t / 128 * 64 + (t % 128) / 32 * 16 + (t % 32) / 4 + 8 * ((i / 2) % 2);
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
  static constexpr int kPtBR = kPds && !kPds4 ? BR : 64;
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
      kDqT,
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BR>, Int<BC>>, GMMA::Major::MN, GMMA::Major::MN>(),
          Layout<Shape<_2, _1, _1>>{})),
      std::conditional_t<
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
              Layout<Shape<_1, _1, _1>>{}))>>>;
  // pds4: the dS^T tiles as the MN-major B of dQ^T = K^T dS^T (N = BR
  // queries contiguous, K = BC keys), 32-byte swizzle (atoms of 16 queries x
  // 8 keys), two by query-block parity; formed for every configuration (BR is
  // a multiple of 16 in all), used by pds4 alone. Element (query j, key r) of
  // buffer 0 at dst4_offset(j, r) (checked against this layout by
  // tests/attention_wgmma/test_pds_layout.cu): atoms along the queries first
  // (BR / 16 of them, 128 elements each), then along the keys; inside an atom
  // the 16 queries of a key contiguous (32 bytes), the 16-byte half XORed
  // with bit 2 of the key (Swizzle<1, 3, 3> in elements).
  using SmemDsT4 = decltype(tile_to_shape(GMMA::Layout_MN_SW32_Atom<T>{}, Shape<Int<BR>, Int<BC>, _2>{}));
  __host__ __device__ static constexpr int dst4_offset(int j, int r) {
    return (j / 16 + (BR / 16) * (r / 8)) * 128 + ((j % 16 + 16 * (r % 8)) ^ (((r >> 2) & 1) << 3));
  }
  // A consumer thread's dS^T pair (queries 8 k + col_lane and + 1, key kl0 +
  // 8 h; kl0 % 16 < 8) at dst4_pair(dst4_base(kl0, col_lane), dst4_sw(kl0),
  // k, h): chunks 2 c and 2 c + 1 are the halves of 16-query atom c (the
  // half XORed with the key's bit 2), keys + 8 the next row of atoms (BR / 16
  // atoms on). The kernel makes base and sw opaque once per block.
  __host__ __device__ static constexpr int dst4_base(int kl0, int col_lane) {
    return (BR / 16) * 128 * (kl0 / 8) + 16 * (kl0 % 8) + col_lane;
  }
  __host__ __device__ static constexpr int dst4_sw(int kl0) { return ((kl0 >> 2) & 1) << 3; }
  // The dS^T stores by stmatrix (session 44; FlashAttention-4's dS store): one x4 per 16-query slice s of a
  // thread's A-fragment words 4 s .. 4 s + 3 (chunks 2 s, 2 s + 1 at keys kl0, kl0 + 8), word w of every lane
  // 8 x 8 matrix w (row lane / 4, columns 2 (lane % 4), + 1: the mma C fragment): matrix w at the warp's keys
  // kw + 8 (w % 2) .. + 7, queries 16 s + 8 (w / 2) .. + 7, 16 contiguous bytes a row. Lane i gives the row
  // address of row i % 8 of matrix i / 8: dst4_stsm(kw, i) for slice 0, 128 s elements on for slice s.
  // kw: the warp's first key (kl0 less kl0 % 8).
  __host__ __device__ static constexpr int dst4_stsm(int kw, int lane) {
    return dst4_offset(8 * (lane / 16), kw + lane % 8 + 8 * ((lane / 8) % 2));
  }
  __host__ __device__ static constexpr int dst4_pair(int base, int sw, int k, int h) {
    return base + ((8 * (k % 2)) ^ sw) + 128 * (k / 2) + (BR / 16) * 128 * h;
  }
  // Without pds: kBarLse + w (128 threads), warpgroup w's LSE and D.
  // pds named barriers over the 256 consumers: kBarLse (LSE and D of the query
  // block, one copy for both warpgroups), kBarP (P^T stored before the dV
  // products read it; one per warpgroup, with its id in a register, was a
  // spilled register).
  // pds2: kBarLse (warpgroup 0) and kBarP (warpgroup 1) over 128 threads, each
  // warpgroup's own P^T rows stored before its dV product reads them.
  // dc1: the same two per-warpgroup barriers also order each warpgroup's
  // own dS^T rows before its dK and dQ products (no barrier 1).
  static constexpr int kBarLse = barrier_id(BwdBarrier::kLseWg0), kBarP = barrier_id(BwdBarrier::kLseWg1);
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
  // this block's dK and dQ products and the next S^T, dP^T. pb (session 31):
  // P^T never goes through shared memory (dV's A operand from registers), so
  // no P^T tile and the Q / dO depth again, as rs1 (FlashAttention-4 carries
  // LSE and dPsum at the Q / dO depth: experiments/results/sass-bwd-d64-2026-12-06).
  static constexpr bool kLOne = kPds3 && !kRs && !kPb;  // one LSE / D stage, released after the dS^T barrier
  static constexpr int kLStages = kLOne ? 1 : ST;
  using PipelineL = cutlass::PipelineTmaAsync<kLStages>;
  // Ordered dQ: thread 0 of the consumers spins on a flag (acquire) and
  // releases it after named barrier kBarDs over the 256 consumer threads.
  using Ordered = cutlass::GenericBarrier<cutlass::detail::NamedBarrierSync<256, kBarDs>>;
  // spt1 (issue 16, bwd_dq_order.h): the ordered pds2 / pds3 / sp1 kernels
  // take the walk's order at run time (BwdKvScheduler, bwd_tile_scheduler.cuh).
  static constexpr bool kOrderRt = kOrderedDq && kPds2 && !kRs && !kDc && !kSp2;
  // hs (KvHeadSplit): the run-time-order ew1 sp1 d = 128 kernel (the
  // heuristic's) carries the split epilogue (BwdKvEpilogue::add_parts). Its
  // mere presence made ptxas spill in the others: 768-1024 bytes in d64 pb1,
  // 8 / 48 in sp1 spt1 d128, 12 / 60 in ew1 wq1 d128; they are built without it.
  // Cfg::HS (BwdKvHsConfig): the ordered pds4 pb5 kernel with it, a type of its own.
  static constexpr bool kHs = kOrderRt && D == 128 && ((kEw == 1 && !kWq) || Cfg::HS == 1);
  // ws (the walk split, KvHeadSplit::walk): the ew1 sp1 kernel only; on pds4 hs
  // the walk's step is 1 (the launcher refuses ws there), as in the unsplit kernels.
  static constexpr bool kWs = kHs && Cfg::HS == 0;
  // dK / dV staged through the K / V tiles (BwdKvEpilogue::store): every d64 kernel, and the d128 se1 twin.
  static constexpr bool kStagedDkv = D == 64 || Cfg::SE == 1;

  struct SharedStorage {
    cute::array_aligned<T, cosize_v<SmemK>, 1024> k;
    cute::array_aligned<T, cosize_v<SmemK>, 1024> v;
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> q;
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> dO;
    // dS (pds: dS^T, SmemPt, kDsBufs of them, then P^T at pt(): all 1024-byte
    // aligned, 16 KB each).
    cute::array_aligned<T, (DQS != DqStrategy::kNone ? kDsBufs * cosize_v<SmemDS> : 8) + (kPds && !kRs && !kPds4 && !kPb ? cosize_v<SmemPt> : 0), 1024> ds;
    __host__ __device__ T* pt() { return ds.data() + kDsBufs * cosize_v<SmemDS>; }  // (rs1, pb: none)
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
    // hs / ws (KvHeadSplit, attention_wgmma_bwd.h; the kHs kernel): splits
    // CTAs per (batch, kv head, key block), their dK / dV parts added in split
    // order. hs (walk_step 1): `group` is then the query heads of one split, a
    // unit's kv head index hk runs over Hkv splits (kv head hk / splits, its
    // query heads hk group .. hk group + group - 1: the real ones). ws (walk_step
    // == splits): the unit (batch, kv head, part), part p walking the
    // steps u = p mod splits of the key block's walk (dq_walk_part), u_step
    // walk_step (1 without ws).
    int splits;
    int walk_step;
    float* dkv_acc;  // splits > 1: fp32 [B, Hkv, Sk, D] dK parts so far, then dV's
    int* dkv_sem;    // splits > 1: [B, Hkv, ceil(Sk / BC)] parts added so far
    int* dq_done;    // TMA dQ, convert overlapped (dq_done_bytes): per unit, its CTAs done writing dQ; else nullptr
  };
};

// pds3 (BR = 128): the element offset of (key kl0 + 8 h, query 8 k + col_lane)
// in an SmemPt tile, from base = kl0 64 + col_lane and sw = (kl0 & 7) << 3
// (both per block, detail::opaque): pt_offset with the swizzle applied to the
// chunk index only (col_lane < 8 and kl0 64 leave bits 3 .. 5 to 8 k).
template <int BC>
__host__ __device__ constexpr int pt3_offset(int base, int sw, int k, int h) {
  return (k / 8) * (BC * 64) + base + ((8 * (k % 8)) ^ sw) + 8 * 64 * h;
}

// dq kernel (owning; per CTA a query block of 128 rows, a head, a batch).
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

}  // namespace detfuse::attention::wg
