// Hopper (sm_90a) attention backward: configurations and launchers, without
// CUTLASS. The kernels are in attention_wgmma_bwd.cuh (built only in the
// variant translation units of this folder, with DETFUSE_ATTN_WGMMA_IMPL).
//
// Two kernels:
//   kv kernel  CTA per (key block of BC = 128 keys, kv head, batch); two
//              consumer warpgroups of 64 keys each hold dK and dV in fp32
//              registers over every query block of every query head of the GQA
//              group, walked in a fixed order (heads, then query blocks), so dK
//              and dV are deterministic without atomics or workspace.
//              DQ 1 (atomic) / 2 (partials): it also forms dS K per query
//              block (dS through shared memory) and adds it with fp32 atomics
//              into the dQ accumulator / stores it into its key block's slot
//              of the partials slab. DQ 3 (ordered): it adds dS K into the
//              dQ accumulator with plain loads and stores, key blocks in
//              ascending order per query block (a semaphore each).
//              DQ 4 / 5 (atomic / ordered by TMA, FlashAttention-3's dQ
//              path): the consumers hand scale * dS K to a writer warp
//              through a double-buffered shared tile; it adds the tile to a
//              tile-blocked fp32 accumulator with one cp.reduce.async.bulk
//              (ordered: behind the semaphore); a convert kernel writes dQ.
//   dq kernel  (the `owning` strategy) CTA per (query block of 128 rows, head,
//              batch); recomputes S and dP per key block in key order and
//              accumulates dQ = scale * sum_n dS_n K_n in registers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/registry.h"

namespace detfuse::attention::wg {

// What the kv kernel does with dS K (BwdKvConfig's DQ): kNone nothing
// (owning: the dq kernel forms dQ), kAtomic fp32 atomics into the dQ
// accumulator, kPartials plain stores of its key block's partial into the
// partials slab (bwd_common.h layout), summed in fixed order afterwards,
// kOrdered ordered adds into the dQ accumulator (key block n adds after
// 0 .. n-1), kAtomicTma / kOrderedTma the same two by the writer warp's TMA
// bulk adds. The template parameter stays an int, written dq_param(...): the
// configurations' types, so the kernels' symbol names, are those of before.
enum class DqStrategy : int {
  kNone = 0,
  kAtomic = 1,
  kPartials = 2,
  kOrdered = 3,
  kAtomicTma = 4,
  kOrderedTma = 5,
};
constexpr int dq_param(DqStrategy s) { return static_cast<int>(s); }

// kv kernel: BR queries per pipeline stage (Q and dO tiles), BC = 128 keys per
// CTA (64 per consumer warpgroup), STAGES-deep Q/dO rings, DQ = dq_param(a
// DqStrategy).
template <int D_, int BR_, int STAGES_, int DQ_>
struct BwdKvConfig {
  static constexpr int D = D_, BR = BR_, BC = 128, STAGES = STAGES_, DQ = DQ_;
  static constexpr DqStrategy DQS = static_cast<DqStrategy>(DQ_);
  static constexpr int PDS = 0;  // BwdKvPdsConfig below
  static constexpr int SP = 0;   // BwdKvPdsConfig below
  static constexpr int DC = 0;   // BwdKvPdsConfig below
  static constexpr int RS = 0;   // BwdKvPdsConfig below
  static constexpr int EW = 0;   // BwdKvEwConfig below
  static constexpr int WQ = 0;   // BwdKvWqConfig below
  static constexpr int PB = 0;   // BwdKvPbConfig below
  static constexpr int HS = 0;   // BwdKvHsConfig below
  static constexpr int SE = 0;   // BwdKvSeConfig below
  static constexpr bool DQ_ATOMIC = DQS == DqStrategy::kAtomic || DQS == DqStrategy::kAtomicTma;
  static constexpr bool DQ_PARTIALS = DQS == DqStrategy::kPartials;
  static constexpr bool DQ_ORDERED = DQS == DqStrategy::kOrdered || DQS == DqStrategy::kOrderedTma;
  static constexpr bool DQ_TMA = DQS == DqStrategy::kAtomicTma || DQS == DqStrategy::kOrderedTma;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(DQ >= 0 && DQ <= 5, "DQ: dq_param of a DqStrategy");
  static_assert(BR % 16 == 0 && BR >= 16 && BR <= 128, "BR: the wgmma N of K Q^T and the K of P^T dO (16s)");
  // (pds3, BwdKvPdsConfig: d = 64 at BR = 128, the dQ product split over the
  // two warpgroups by queries; BwdKv asserts that no other kernel gets it.)
  // (pds4, BwdKvPdsConfig: d = 128 at BR = 80, the dQ product transposed.)
  static_assert(DQS == DqStrategy::kNone || BR == 64 || (DQ_TMA && D == 64 && BR == 128) ||
                    (DQ_TMA && D == 128 && BR == 80),
                "dQ in the kv kernel: dS K is one wgmma M = 64 tile of queries");
  static_assert(!DQ_PARTIALS || D == 128,
                "partials: each dQ element of a key block written once (the d = 128 column split)");
  static_assert(STAGES >= 2, "at least a double-buffered Q/dO ring");
  // K, V (BC x D), STAGES Q and dO tiles (BR x D), dS (BR x BC) when DQ; bf16.
  static constexpr int kSmemTiles = 2 * (2 * BC * D + 2 * STAGES * BR * D + (DQS != DqStrategy::kNone ? BR * BC : 0));
  static constexpr int kSmemBytes = kSmemTiles + (DQ_TMA ? 2 * BR * D * 4 : 0);  // + the fp32 dQ tiles
  // (BR = 80 at d = 128 is pds4's alone, whose storage BwdKvPdsConfig counts.)
  static_assert(kSmemBytes + 1024 <= 227 * 1024 || (D == 128 && BR == 80),
                "shared memory above the 227 KB of an sm_90 block");
};

// pds (TMA dQ only, the FlashAttention-4 sm90 manner): P^T and dS^T go to
// shared memory as bf16 once formed, dV += P^T dO, dK += dS^T Q and dQ = dS K
// read them from there (wgmma SS), and the S^T, dP^T accumulators live only
// inside one query block's step, so they are dead when the dQ product is
// issued (the kernels without it hold S^T, dP^T, P^T, dS^T, dK, dV and the dQ
// part together and spill at d = 128). A type of its own (not a fifth
// parameter of BwdKvConfig) so the existing instantiations keep their names.
// PDS 1: one dS^T tile (both warpgroups meet at a barrier after each query
// block before it is written again), LSE and D loaded by the consumers.
// PDS 2: dS^T double-buffered by query-block parity (no barrier after the
// block), LSE (log2 units) and D staged once per launch into padded arrays
// (pds_stage_bytes) and brought by a producer thread (bulk copies) into a
// ring of the Q / dO depth, released with them; d = 128: one fp32 dQ tile instead of
// two (K, V 64 KB + Q/dO 64 KB + dS^T 2 x 16 KB + P^T 16 KB + dQ 32 KB
// = 208 KB; two dQ tiles would be 240 KB, above the 227 KB of a block).
// PDS 3 (d = 64 only, BR = 128: FlashAttention-4's m_block at d64): pds2's
// protocol with 128 queries per step. P^T and dS^T span two 64-query swizzle
// atoms (pt_offset), the dQ product is M = 128 split over the two
// warpgroups by queries (64 each, every key: no exchange of dQ parts), one
// fp32 dQ tile: K, V 32 KB + Q/dO (st2) 64 KB + dS^T 2 x 32 KB + P^T 32 KB
// + dQ 32 KB = 224 KB (229376 bytes); with the LSE / D rings (2 KB) and the
// barriers the SharedStorage is 231532 bytes, 232448 (227 KB, the opt-in
// maximum of a block) after its 1024-byte alignment.
// SP 1 (`sp1`, pds2 at BR = 64: the consumers' walk overlapped across query
// blocks, FlashAttention-3's order of the products): dQ = dS K is issued
// before dK += dS^T Q, only the dQ part is waited on, and dK stays in flight
// across the loop's back edge, so the tensor pipe has it while the consumers
// hand dQ (m) to the writer warp, wait for the next Q / dO stage and issue
// S^T, dP^T of block m + 1. The Q stage of block m is released in block m + 1
// once S^T (m + 1) (so dK (m)) has completed; the dO and LSE / D stages as
// soon as dQ (m) (so dV (m)) has. S^T and dP^T start from write-only
// accumulators (wg_gemm_fresh_n64): with cute's read-write ones the compiler
// zeroes them with 32 moves each while dK is in flight and ptxas serializes
// every wgmma (C7514 / C7515). No shared memory added; registers at the
// peak as pds2's (README "sp1, sp2").
// SP 2 (`sp2`, d = 128): sp1, and block m's dQ part, scaled, carried in
// registers into block m + 1 and handed to the writer warp there right after
// S^T (m + 1) is issued, so the tile store and the wait for the writer's
// previous read run under dK (m) and S^T (m + 1); the last block's after the
// walk. Registers at the hand-off: dV, dK, the dQ part, S^T (192).
// DC 1 (`dc1`, d = 128, on sp1: the consumer warpgroups decoupled): each
// warpgroup forms dQ over its own 64 keys (K split, as d = 64: a 64 x 128
// fp32 part from its own dS^T rows only), so no barrier between the
// warpgroups remains in the walk (each waits for its own dS^T and P^T rows
// on its own named barrier) and they may drift apart by up to the Q / dO
// ring. One dS^T tile again (each warpgroup rewrites its own rows only after
// its own dK and dQ products that read them have completed), one fp32 dQ
// tile per warpgroup: K, V 64 KB + Q/dO 64 KB + dS^T 16 KB + P^T 16 KB + dQ
// 2 x 32 KB = 224 KB (229376 bytes). The writer warp adds the two parts of a
// query block with two bulk adds; ordered: the semaphore counts two adds per
// key block (warpgroup 0, then 1, of key block n before key block n + 1).
// RS 1 (`rs1`, pds3 at d = 64 or pds2 at d = 128: FlashAttention-3's
// Mma_dKV_is_RS): dV += P^T dO and dK += dS^T Q take their A operand from
// registers (the S^T / dP^T accumulators converted to bf16: the 64 x BR C fragment of a
// warpgroup is, value for value, the A fragment of a K = BR product). P^T
// never goes to shared memory (no P^T tile, no barrier before dV); dS^T still
// does, for dQ = dS K (queries as M), but dK is issued from registers before
// the dS^T barrier. dP^T is waited on first; then per half of the queries P^T
// and dS^T are converted pair by pair and dV, dK issued on that half (peak
// S^T, dP^T, dV, dK = 192 fp32 registers, as pds3; 0 spills). The P^T tile's
// 32 KB (d = 64) give the LSE / D ring the Q / dO depth again (pds3 had one
// stage); at d = 128 pds2's storage less its 16 KB P^T tile.
// PDS 4 (`pds4`, d = 128 only, BR = 80: FlashAttention-3/4's non-causal
// m_block at hdim 128, issue 16 session 23): pds2's protocol with 80 queries
// per step. M = 80 is no multiple of wgmma's 64, so the dQ product is
// transposed (FlashAttention's dQ_swapAB): dQ^T = K^T dS^T, M = D split over
// the two warpgroups (64 each), N = 80 queries, K = the 128 keys; K^T is
// the MN-major view of the K tile, dS^T an MN-major tile with 32-byte
// swizzle (80 queries are five 16-query atoms; the 64-query 128-byte atom of
// pds2 does not divide them), stored by the consumers as pds2's (32-bit pairs
// of queries, bank-conflict free). No P^T tile (pb5 / pb7: P^T, dS^T of dV, dK from
// registers): K, V 64 KB + Q / dO (st2) 80 KB + dS^T 2 x 20 KB + one dQ
// tile 40 KB = 224 KB (229376 bytes), as pds3. Registers at the peak as pb3
// at d = 128 plus 16: S^T, dP^T 40 each, dV, dK 64 each.
template <int D_, int BR_, int STAGES_, int DQ_, int PDS_ = 1, int SP_ = 0, int DC_ = 0, int RS_ = 0>
struct BwdKvPdsConfig : BwdKvConfig<D_, BR_, STAGES_, DQ_> {
  using Base = BwdKvConfig<D_, BR_, STAGES_, DQ_>;
  static constexpr int PDS = PDS_;
  static constexpr int SP = SP_;
  static constexpr int DC = DC_;
  static constexpr int RS = RS_;
  static_assert(PDS >= 1 && PDS <= 4, "pds 1, 2, 3 or 4");
  static_assert(SP == 0 || ((SP == 1 || SP == 2) && PDS == 2 && BR_ == 64),
                "sp1, sp2: pds2 (the dS^T double buffer they rely on, 64 x 64 S^T / dP^T)");
  static_assert(DC == 0 || (DC == 1 && SP == 1 && D_ == 128),
                "dc1: d = 128 on sp1 (d = 64 splits dQ by keys already)");
  static_assert(RS == 0 || (RS == 1 && SP == 0 && DC == 0 && (PDS == 3 || (PDS == 2 && D_ == 128))),
                "rs1: pds3 (d = 64, BR = 128) or pds2 at d = 128");
  static_assert(Base::DQ_TMA, "pds: P^T and dS^T in shared memory, TMA dQ only");
  static_assert(PDS == 3   ? (Base::BR == 128 && D_ == 64)
                : PDS == 4 ? (Base::BR == 80 && D_ == 128 && SP == 0 && DC == 0 && RS == 0)
                           : Base::BR == 64,
                "pds1, pds2: P^T and dS^T rows of 64 queries (one 128-byte swizzle row); pds3: d = 64, BR = 128; "
                "pds4: d = 128, BR = 80");
  // fp32 dQ tiles: two, except pds2 at d = 128 and pds3 (one); dc1: one per warpgroup.
  static constexpr int kDqBufs = DC == 1 ? 2 : (PDS == 2 && D_ == 128) || PDS >= 3 ? 1 : 2;
  // + P^T (BC x BR, bf16; not rs1, not pds4), + a second dS^T for pds2, pds3 and pds4 (not dc1).
  static constexpr int kSmemTiles =
      Base::kSmemTiles + ((PDS >= 2 && DC == 0 ? 2 : 1) - (RS == 1 || PDS == 4 ? 1 : 0)) * 2 * Base::BR * Base::BC;
  static constexpr int kSmemBytes = kSmemTiles + kDqBufs * Base::BR * Base::D * 4;
  static_assert(kSmemBytes + 1024 <= 227 * 1024, "shared memory above the 227 KB of an sm_90 block");
};

// EW (`ew1`, `ew2`, issue 16 session 14: the elementwise code of a query block
// and the end of its step as FlashAttention-4's sm90 backward has them; a
// type of its own over a pds2 / pds3 configuration, so the configurations
// without it keep their types, kernel symbols and machine code):
// EW 1: P^T = exp2(S^T scale log2 e - LSE) over the whole tile without a
// branch, the mask (keys >= Sk, causal, window) a second pass over the block
// that needs it, setting the masked P^T to 0 (the base tests the mask per
// element inside the exp loop: ptxas made one basic block of every element,
// FFMA, MUFU, branch); and D of the block read from shared memory four
// 8-query chunks ahead of the dS^T stores that use it (the base reads it just
// before each use, twice per chunk: after a shared store the compiler must
// reload it, and every FADD waited for its LDS). The same fp32 operations on
// the same values: the base's bits.
// EW 2: EW 1, and the end of the step in FlashAttention-4's order (pds2 /
// pds3 without sp): dQ = dS K issued before dK += dS^T Q, the dQ part (and
// with it dV) waited on, the dO stage released, the dQ part handed to the
// writer warp while dK runs, then dK waited on and the Q stage released
// (the base waits for all three before the hand-off). The same products in
// the same order per accumulator: the base's bits.
template <class Base_, int EW_>
struct BwdKvEwConfig : Base_ {
  static constexpr int EW = EW_;
  static_assert(EW == 1 || EW == 2, "ew1 or ew2");
  static_assert(Base_::PDS >= 2 && Base_::RS == 0 && Base_::DC == 0 && Base_::SP <= 1,
                "ew: pds2 / pds3 (or sp1 for ew1), without rs1, dc1, sp2");
  static_assert(EW == 1 || Base_::SP == 0, "ew2: the step's end of pds2 / pds3 (sp1 has its own)");
};

// WQ (`wq1`, issue 16 session 14: FlashAttention-4's per-warpgroup dQ
// hand-off; a type of its own over an ew configuration, as EW): the one fp32
// dQ tile of pds3 / sp1 laid out as two contiguous halves, warpgroup w's part
// in half w (pds3: its 64 query rows; sp1 d128: its 64 columns), each half
// with its own full / empty barriers over that warpgroup's 128 threads and
// the writer warp (BwdBarrier::kDqWgFull0 / kDqWgEmpty0 + w, 160 threads),
// and added by its own bulk add (half 0, then half 1; ordered: both behind
// the one semaphore turn of the key block, which counts once both have
// landed). The base hands the whole tile over behind two barriers of all 256
// consumers and the writer warp (288 threads): a second rendezvous of the two
// warpgroups per step, after the dS^T one. Every dQ element gets the same
// fp32 adds in the same key-block order: the base's bits (the accumulator's
// tile order differs; the convert pass inverts it).
template <class Base_>
struct BwdKvWqConfig : Base_ {
  static constexpr int WQ = 1;
  static_assert(Base_::EW >= 1 && Base_::DQ_TMA && ((Base_::PDS == 3 && Base_::SP == 0) || (Base_::PDS == 2 && Base_::SP == 1 && Base_::D == 128)),
                "wq1: ew on pds3 (d64) or on sp1 (d128): one dQ tile written by both warpgroups");
  static_assert(Base_::PB == 0 || Base_::PB == 5 || Base_::PB == 10,
                "wq1 over pb: pb5 / pb10 (session 32; BwdKvPbNConfig's step, its 2-value tile order halved)");
};

// PB (`pb1`, issue 16 session 15: FlashAttention-4's Mma_dKV_is_RS at d64; a
// type of its own over ew2 pds3, as EW): P^T rounded to bf16 into the A
// fragment of dV += P^T dO right after the exp (the fp32 S^T registers die
// there), dV issued at once from registers (no P^T store, fence or barrier
// before it); dS^T = P_bf16 (dP^T - D) from the same bf16 P values, stored
// for dQ (SS) as pds3 and kept as the A fragment of dK += dS^T Q (RS); the
// step's end as ew2. Other bits than ew2 (dS^T from the rounded P). Until
// session 31 the P^T tile stayed allocated, unused (ew2's storage, one LSE / D
// stage); since then no P^T tile and the LSE / D ring at the Q / dO depth
// (rs1's storage: BwdKv::SharedStorage, kLOne), the same bits.
template <class Base_>
constexpr int pb_pt_tile_bytes() {  // the P^T tile pb drops from its base's storage (pds4 has none)
  return Base_::PDS == 4 ? 0 : 2 * Base_::BR * Base_::BC;
}
template <class Base_>
struct BwdKvPbConfig : Base_ {
  static constexpr int PB = 1;
  static_assert(Base_::EW == 2 && (Base_::PDS == 3 || (Base_::PDS == 2 && Base_::D == 128)) && Base_::WQ == 0 &&
                    Base_::SP == 0 && Base_::RS == 0,
                "pb1: on ew2 pds3 (d64) or ew2 pds2 (d128)");
  static constexpr int kSmemTiles = Base_::kSmemTiles - pb_pt_tile_bytes<Base_>();
  static constexpr int kSmemBytes = Base_::kSmemBytes - pb_pt_tile_bytes<Base_>();
};

// PB 2 and 3 (`pb2`, `pb3`, issue 16 session 21: the d64 kv step with
// FlashAttention-4's instruction count; a type of its own so that pb1's
// kernels keep their names and machine code). Both on ew2 pds3 (d64):
// - the wgmma descriptors of every product from the warpgroup's index read
//   from lane 0 (warp-uniform: built in uniform registers, no R2UR per wgmma);
// - the dQ part handed to the writer warp unscaled, the softmax scale applied
//   once per element by the convert pass (FlashAttention-4's postprocess;
//   other dQ bits than pb1: scale times the sum instead of the sum of scaled parts);
// - the bf16 pairs of P^T and dS^T written to the A fragments as 32-bit words.
// pb2: pb1's step (dV issued right after the exp, dS^T from the bf16 P^T).
// pb3: FlashAttention-4's step (mma_one_m_block): dS^T from the fp32 P^T, P^T
// rounded into dV's A fragment in the same loop, dV issued once dS^T is
// formed, then the dS^T barrier, dQ (SS), dK (RS).
// pb5 (session 22, d64): pb3 with the exp in the dS^T loop, after the dP^T
// wait, each 8-query chunk's next to its dS^T arithmetic (where ptxas places
// most of FlashAttention-4's): MUFU spread among the FMA-pipe work instead of
// pb3's run of 40 back to back; the mask as -inf before the exp. pb6 (branch
// s22-pb6, d64 and d128): the first half of the queries' exp before the wait,
// rounded into dV's A fragment there and dV's first half issued from it.
// pb7 (branch s22-pb6, d64): pb5 with the dQ part handed over by 128-bit
// stores (the tile and the accumulator in groups of 4 values a thread). pb8
// (branch s22-pb6, d128): pb3 with pb7's hand-off. pb9 (session 23, d64): pb6
// with pb7's hand-off. pb10 (session 32, d64): pb5 with FlashAttention-4's
// split of the exp (BwdKv::kLogitFirst): the mask and the FFMA of the exp's
// argument over the tile before the dP^T wait, under the dP^T product; only
// the EX2 in the dS^T loop (pb5's bits; measured 2% slower than pb5 on an
// H100, and on pds4 d128 up to 2%, which is not built). (pb2 and pb9 were
// retired in session 32, measured slower than pb3 / pb5 in sessions 21 / 24.)
// wq1 over pb5 (BwdKvWqConfig<BwdKvPbNConfig<..>>, d64): the per-warpgroup
// dQ hand-off on that step.
template <class Base_, int PB_>
struct BwdKvPbNConfig : Base_ {
  static constexpr int PB = PB_;
  static_assert((PB_ == 3 || (PB_ >= 5 && PB_ <= 8) || PB_ == 10) && Base_::EW == 2 &&
                    ((Base_::PDS == 3 && Base_::D == 64 && PB_ != 8) ||
                     ((PB_ == 3 || PB_ == 6 || PB_ == 8) && Base_::PDS == 2 && Base_::D == 128) ||
                     ((PB_ == 5 || PB_ == 7 || PB_ == 10) && Base_::PDS == 4)) &&
                    Base_::WQ == 0 && Base_::SP == 0 && Base_::RS == 0 && Base_::DQ_TMA,
                "pb3 / pb5-7 / pb10: on ew2 pds3 (d64); pb3, pb6, pb8 on ew2 pds2 (d128); pb5, pb7, pb10 on ew2 pds4");
  static constexpr int kSmemTiles = Base_::kSmemTiles - pb_pt_tile_bytes<Base_>();  // pb1's storage (no P^T tile)
  static constexpr int kSmemBytes = Base_::kSmemBytes - pb_pt_tile_bytes<Base_>();
};

// HS (issue 16, session 27, d128): the split epilogue (BwdKv::kHs, the hs2 /
// hs4 dK / dV parts added in split order, KvHeadSplit) built into the ordered
// pds4 pb5 kernel, the d128 heuristic's step, which the causal GQA rows ran
// without: there the heuristic took hs2 on sp1 ew1 (session 18: 6-12% less
// fwd+bwd time than the unsplit kernel of that time), whose step is 5-7%
// slower than pds4 pb5's. A type of its own: the epilogue's mere presence made ptxas spill in
// kernels that never split (BwdKv::kHs), so the unsplit pds4 pb5 kernel is
// built without it and keeps its machine code.
template <class Base_>
struct BwdKvHsConfig : Base_ {
  static constexpr int HS = 1;
  static_assert(Base_::PDS == 4 && Base_::PB == 5 && Base_::DQS == DqStrategy::kOrderedTma,
                "hs on pds4: the ordered pds4 pb5 kernel (spt1)");
};

// SE (issue 16, session 35, d128): dK / dV staged through the K / V tiles and
// stored as 16-byte rows (BwdKvEpilogue::store_staged, d64's store since
// session 34) in the ordered pds4 pb5 kernel, a twin of the one with the
// direct 4-byte stores: session 34 (H100) measured the staged form 2.2% faster
// causal and 1.5% slower non-causal at d128, so the heuristic chooses by mask.
// Same values, same rounding: the twin's bits are the direct kernel's.
template <class Base_>
struct BwdKvSeConfig : Base_ {
  static constexpr int SE = 1;
  static_assert(Base_::D == 128 && Base_::PDS == 4 && Base_::PB == 5 && Base_::HS == 0 &&
                    Base_::DQS == DqStrategy::kOrderedTma,
                "se1: the ordered pds4 pb5 kernel at d = 128 (d64's kernels always stage)");
};

// pds2: LSE (log2 units, +inf where P must be 0) and D, padded to whole query
// blocks, [B, H, ceil(Sq / br), br] each, so the producer brings a block's
// values with one aligned bulk copy.
inline size_t pds_stage_bytes(const AttentionProblem& p, int br) {
  return 2 * ((size_t(p.B * p.H * ((p.Sq + br - 1) / br)) * size_t(br) * sizeof(float) + 255) / 256 * 256);
}

// The tile-blocked fp32 dQ accumulator of the TMA variants: [B, H, ceil(Sq / br), br * d].
inline size_t dq_tile_acc_bytes(const AttentionProblem& p, int br) {
  return (size_t(p.B * p.H * ((p.Sq + br - 1) / br)) * size_t(br) * size_t(p.d) * sizeof(float) + 255) / 256 * 256;
}

// TMA dQ (DQ 4 / 5): the convert kernel overlaps the kv kernel's tail
// (programmatic dependent launch, session 37). The kv kernel lets it launch
// once every kv CTA has started (griddepcontrol.launch_dependents); it then
// takes SMs as kv CTAs exit and converts a query head's tiles as soon as every
// kv CTA of that head's (batch, kv head) has written its last dQ add, counted
// here per unit: int [B, Hkv, splits] (hs / ws splits, else 1; zeroed by the
// caller; each CTA's writer warp adds 1 once its bulk writes have landed, the
// launch's key blocks per unit). The same convert arithmetic on the same sums:
// the same bits as the stream-ordered convert, which DETFUSE_ATTN_PDL=0 (read
// at every launch) restores for A/B runs (register_wgmma.cpp
// dq_convert_overlaps: when it overlaps by default).
inline size_t dq_done_bytes(const AttentionProblem& p, int splits = 1) {
  return (size_t(p.B * p.Hkv) * size_t(splits) * sizeof(int) + 255) / 256 * 256;
}

// hs (head split, GQA; the ordered spt1 kv kernels): each (batch, kv head)
// unit's H / Hkv query heads split over `splits` CTAs per key block, each
// walking H / Hkv / splits of them (more, shorter CTAs: the grid's tail and
// what each CTA walks shrink as with one query head per kv head). A CTA's dK,
// dV part goes through acc (fp32 [B, Hkv, Sk, d] for dK, then for dV: the sum
// of the parts so far; part 0 writes it, the next ones add to it) in split
// order, counted in sem (int [B, Hkv, ceil(Sk / BC)], zeroed by the caller);
// the last part adds its own and writes dK, dV in bf16. Fixed order: the bits
// depend on `splits` (part of the variant's name), not on timing.
// ws (walk = true; causal order only, elsewhere the walks run whole): each
// (batch, kv head) unit's key blocks walk over `splits` CTAs instead, part p
// taking the walk's steps u = p (mod splits) (bwd_dq_order.h dq_walk_part;
// every query head, half the query blocks at splits = 2): the causal grid's
// longest CTAs (key block 0 walks every query block) halve, and with them
// the tail where the last ones run alone. Same dK / dV parts as hs.
struct KvHeadSplit {
  int splits = 1;
  bool walk = false;  // ws
  float* acc = nullptr;
  int* sem = nullptr;
};
inline size_t dkv_split_acc_bytes(const AttentionProblem& p, int splits) {
  return splits > 1 ? (2 * size_t(p.B * p.Hkv * p.Sk) * size_t(p.d) * sizeof(float) + 255) / 256 * 256 : 0;
}
inline size_t dkv_split_sem_bytes(const AttentionProblem& p, int splits, int bc) {
  return splits > 1 ? (size_t(p.B * p.Hkv * ((p.Sk + bc - 1) / bc)) * sizeof(int) + 255) / 256 * 256 : 0;
}

// dq kernel (owning): BR = 128 query rows (64 per consumer warpgroup), BC keys
// per K/V tile, STAGES-deep K/V rings.
template <int D_, int BC_, int STAGES_>
struct BwdDqConfig {
  static constexpr int D = D_, BR = 128, BC = BC_, STAGES = STAGES_;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BC % 16 == 0 && BC >= 16 && BC <= 256, "BC: the wgmma N of Q K^T and the K of dS K");
  static_assert(STAGES >= 2, "at least a double-buffered K/V ring");
  static constexpr int kSmemTiles = 2 * (2 * BR * D + 2 * STAGES * BC * D);
  static_assert(kSmemTiles + 1024 <= 227 * 1024, "shared memory above the 227 KB of an sm_90 block");
};

// The registered configurations (one .cu each).
using KvD128Br64St2 = BwdKvConfig<128, 64, 2, dq_param(DqStrategy::kNone)>;
using KvD128Br64St3 = BwdKvConfig<128, 64, 3, dq_param(DqStrategy::kNone)>;
using KvD128Br64St2A = BwdKvConfig<128, 64, 2, dq_param(DqStrategy::kAtomic)>;
using KvD128Br64St3A = BwdKvConfig<128, 64, 3, dq_param(DqStrategy::kAtomic)>;
using KvD128Br64St2P = BwdKvConfig<128, 64, 2, dq_param(DqStrategy::kPartials)>;
using KvD128Br64St3P = BwdKvConfig<128, 64, 3, dq_param(DqStrategy::kPartials)>;  // partials: three block shapes (stages 2, 3, 4)
using KvD128Br64St4P = BwdKvConfig<128, 64, 4, dq_param(DqStrategy::kPartials)>;
using KvD128Br64St2O = BwdKvConfig<128, 64, 2, dq_param(DqStrategy::kOrdered)>;
using KvD128Br64St3O = BwdKvConfig<128, 64, 3, dq_param(DqStrategy::kOrdered)>;
using KvD128Br64St2AT = BwdKvConfig<128, 64, 2, dq_param(DqStrategy::kAtomicTma)>;
using KvD128Br64St2OT = BwdKvConfig<128, 64, 2, dq_param(DqStrategy::kOrderedTma)>;
using KvD64Br64St2 = BwdKvConfig<64, 64, 2, dq_param(DqStrategy::kNone)>;
using KvD64Br96St2 = BwdKvConfig<64, 96, 2, dq_param(DqStrategy::kNone)>;  // br128 spilled 768 bytes (S^T, dP^T 64 registers each)
using KvD64Br64St2A = BwdKvConfig<64, 64, 2, dq_param(DqStrategy::kAtomic)>;
using KvD64Br64St4A = BwdKvConfig<64, 64, 4, dq_param(DqStrategy::kAtomic)>;
using KvD64Br64St2O = BwdKvConfig<64, 64, 2, dq_param(DqStrategy::kOrdered)>;
using KvD64Br64St2AT = BwdKvConfig<64, 64, 2, dq_param(DqStrategy::kAtomicTma)>;
using KvD64Br64St2OT = BwdKvConfig<64, 64, 2, dq_param(DqStrategy::kOrderedTma)>;
// P^T and dS^T through shared memory (pds), TMA dQ.
using KvD128Br64St2ATS = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kAtomicTma)>;
using KvD128Br64St2OTS = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kOrderedTma)>;
using KvD64Br64St2ATS = BwdKvPdsConfig<64, 64, 2, dq_param(DqStrategy::kAtomicTma)>;
using KvD64Br64St2OTS = BwdKvPdsConfig<64, 64, 2, dq_param(DqStrategy::kOrderedTma)>;
using KvD64Br64St3ATS = BwdKvPdsConfig<64, 64, 3, dq_param(DqStrategy::kAtomicTma)>;
using KvD64Br64St3OTS = BwdKvPdsConfig<64, 64, 3, dq_param(DqStrategy::kOrderedTma)>;
// pds2: dS^T double-buffered, LSE and D by the producer (d128: one dQ tile).
using KvD128Br64St2ATS2 = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kAtomicTma), 2>;
using KvD128Br64St2OTS2 = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kOrderedTma), 2>;
using KvD64Br64St2ATS2 = BwdKvPdsConfig<64, 64, 2, dq_param(DqStrategy::kAtomicTma), 2>;
using KvD64Br64St2OTS2 = BwdKvPdsConfig<64, 64, 2, dq_param(DqStrategy::kOrderedTma), 2>;
// pds3: d = 64 at 128 queries per step (pds2's protocol, dQ split by queries).
using KvD64Br128St2ATS3 = BwdKvPdsConfig<64, 128, 2, dq_param(DqStrategy::kAtomicTma), 3>;
using KvD64Br128St2OTS3 = BwdKvPdsConfig<64, 128, 2, dq_param(DqStrategy::kOrderedTma), 3>;
// rs1: pds3 with dV and dK from registers (P^T, dS^T as the wgmma A fragment).
using KvD64Br128St2ATS3R = BwdKvPdsConfig<64, 128, 2, dq_param(DqStrategy::kAtomicTma), 3, 0, 0, 1>;
using KvD64Br128St2OTS3R = BwdKvPdsConfig<64, 128, 2, dq_param(DqStrategy::kOrderedTma), 3, 0, 0, 1>;
// rs1 at d = 128: pds2 (BR = 64) with dV and dK from registers.
using KvD128Br64St2ATS2R = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kAtomicTma), 2, 0, 0, 1>;
using KvD128Br64St2OTS2R = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kOrderedTma), 2, 0, 0, 1>;
// sp1: pds2 (d128) with dQ issued before dK and dK left in flight into the
// next query block (FlashAttention-3's order).
using KvD128Br64St2ATS2P = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kAtomicTma), 2, 1>;
using KvD128Br64St2OTS2P = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kOrderedTma), 2, 1>;
// sp2: sp1, and the dQ part of block m handed to the writer warp in block
// m + 1, once S^T (m + 1) is issued behind dK (m) (ordered only).
using KvD128Br64St2OTS2P2 = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kOrderedTma), 2, 2>;
// dc1: sp1 with the consumer warpgroups decoupled (dQ over each one's own
// keys, one dQ tile per warpgroup, two bulk adds per query block).
using KvD128Br64St2ATS2PD = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kAtomicTma), 2, 1, 1>;
using KvD128Br64St2OTS2PD = BwdKvPdsConfig<128, 64, 2, dq_param(DqStrategy::kOrderedTma), 2, 1, 1>;
// ew1 / ew2: pds3 (d64) with the elementwise code and (ew2) the step's end
// of FlashAttention-4's sm90 backward (BwdKvEwConfig).
using KvD64Br128St2ATS3E1 = BwdKvEwConfig<KvD64Br128St2ATS3, 1>;
using KvD64Br128St2OTS3E1 = BwdKvEwConfig<KvD64Br128St2OTS3, 1>;
using KvD64Br128St2ATS3E2 = BwdKvEwConfig<KvD64Br128St2ATS3, 2>;
using KvD64Br128St2OTS3E2 = BwdKvEwConfig<KvD64Br128St2OTS3, 2>;
// ew1 on sp1 (d128: pds2 at BR = 64, dQ before dK, dK in flight into the next block).
using KvD128Br64St2ATS2PE1 = BwdKvEwConfig<KvD128Br64St2ATS2P, 1>;
using KvD128Br64St2OTS2PE1 = BwdKvEwConfig<KvD128Br64St2OTS2P, 1>;
// wq1: ew2 pds3 (d64) and ew1 sp1 (d128) with each warpgroup's dQ part handed
// to the writer warp alone (BwdKvWqConfig).
using KvD64Br128St2ATS3E2W = BwdKvWqConfig<KvD64Br128St2ATS3E2>;
using KvD64Br128St2OTS3E2W = BwdKvWqConfig<KvD64Br128St2OTS3E2>;
using KvD128Br64St2ATS2PE1W = BwdKvWqConfig<KvD128Br64St2ATS2PE1>;
using KvD128Br64St2OTS2PE1W = BwdKvWqConfig<KvD128Br64St2OTS2PE1>;
// pb1: ew2 pds3 (d64) with dV, dK from registers and dS^T from the bf16 P^T (BwdKvPbConfig).
using KvD64Br128St2ATS3E2B = BwdKvPbConfig<KvD64Br128St2ATS3E2>;
using KvD64Br128St2OTS3E2B = BwdKvPbConfig<KvD64Br128St2OTS3E2>;
// pb3 (session 21): BwdKvPbNConfig; pb3 at d = 128 on ew2 pds2 (pb1 d128's base).
using KvD64Br128St2ATS3E2B3 = BwdKvPbNConfig<KvD64Br128St2ATS3E2, 3>;
using KvD64Br128St2OTS3E2B3 = BwdKvPbNConfig<KvD64Br128St2OTS3E2, 3>;
// pb1 at d = 128 (session 19): ew2 pds2 (BR = 64; not registered alone) with
// FlashAttention-4's d128 Mma_dKV_is_RS, dV issued from registers after the exp.
using KvD128Br64St2ATS2E2 = BwdKvEwConfig<KvD128Br64St2ATS2, 2>;
using KvD128Br64St2OTS2E2 = BwdKvEwConfig<KvD128Br64St2OTS2, 2>;
using KvD128Br64St2ATS2E2B = BwdKvPbConfig<KvD128Br64St2ATS2E2>;
using KvD128Br64St2OTS2E2B = BwdKvPbConfig<KvD128Br64St2OTS2E2>;
using KvD128Br64St2ATS2E2B3 = BwdKvPbNConfig<KvD128Br64St2ATS2E2, 3>;  // pb3 at d = 128 (session 21)
using KvD128Br64St2OTS2E2B3 = BwdKvPbNConfig<KvD128Br64St2OTS2E2, 3>;
using KvD64Br128St2ATS3E2B5 = BwdKvPbNConfig<KvD64Br128St2ATS3E2, 5>;  // pb5 (session 22)
using KvD64Br128St2OTS3E2B5 = BwdKvPbNConfig<KvD64Br128St2OTS3E2, 5>;
using KvD64Br128St2ATS3E2B6 = BwdKvPbNConfig<KvD64Br128St2ATS3E2, 6>;  // pb6 (branch s22-pb6)
using KvD64Br128St2OTS3E2B6 = BwdKvPbNConfig<KvD64Br128St2OTS3E2, 6>;
using KvD128Br64St2ATS2E2B6 = BwdKvPbNConfig<KvD128Br64St2ATS2E2, 6>;
using KvD128Br64St2OTS2E2B6 = BwdKvPbNConfig<KvD128Br64St2OTS2E2, 6>;
using KvD64Br128St2ATS3E2B7 = BwdKvPbNConfig<KvD64Br128St2ATS3E2, 7>;  // pb7 (branch s22-pb6)
using KvD64Br128St2OTS3E2B7 = BwdKvPbNConfig<KvD64Br128St2OTS3E2, 7>;
using KvD128Br64St2ATS2E2B8 = BwdKvPbNConfig<KvD128Br64St2ATS2E2, 8>;  // pb8 (branch s22-pb6)
using KvD128Br64St2OTS2E2B8 = BwdKvPbNConfig<KvD128Br64St2OTS2E2, 8>;
// pb10 and wq1 over pb5 (session 32, ordered only): d64.
using KvD64Br128St2OTS3E2B10 = BwdKvPbNConfig<KvD64Br128St2OTS3E2, 10>;
using KvD64Br128St2OTS3E2B5W = BwdKvWqConfig<KvD64Br128St2OTS3E2B5>;
// pds4 (session 23): 80 queries per step at d = 128, the dQ product transposed;
// pb5 (pb3 spilled 124 bytes there: its exp before the dP^T wait, with every
// LSE pair of the block loaded at once), pb7.
using KvD128Br80St2ATS4 = BwdKvPdsConfig<128, 80, 2, dq_param(DqStrategy::kAtomicTma), 4>;
using KvD128Br80St2OTS4 = BwdKvPdsConfig<128, 80, 2, dq_param(DqStrategy::kOrderedTma), 4>;
using KvD128Br80St2ATS4E2B5 = BwdKvPbNConfig<BwdKvEwConfig<KvD128Br80St2ATS4, 2>, 5>;
using KvD128Br80St2OTS4E2B5 = BwdKvPbNConfig<BwdKvEwConfig<KvD128Br80St2OTS4, 2>, 5>;
using KvD128Br80St2ATS4E2B7 = BwdKvPbNConfig<BwdKvEwConfig<KvD128Br80St2ATS4, 2>, 7>;
using KvD128Br80St2OTS4E2B7 = BwdKvPbNConfig<BwdKvEwConfig<KvD128Br80St2OTS4, 2>, 7>;
using KvD128Br80St2OTS4E2B5H = BwdKvHsConfig<KvD128Br80St2OTS4E2B5>;  // hs2 on pds4 pb5 (session 27)
using KvD128Br80St2OTS4E2B5S = BwdKvSeConfig<KvD128Br80St2OTS4E2B5>;  // se1 on pds4 pb5 (session 35)
using DqD128Bc64St2 = BwdDqConfig<128, 64, 2>;
using DqD64Bc128St2 = BwdDqConfig<64, 128, 2>;
using DqD128Bc64St3 = BwdDqConfig<128, 64, 3>;  // owning: a third block shape per head dim
using DqD64Bc64St3 = BwdDqConfig<64, 64, 3>;

template <class Cfg>
size_t bwd_kv_smem_bytes();
template <class Cfg>
size_t bwd_dq_smem_bytes();

// Enqueues the kv kernel over key blocks [kb_begin, kb_begin + kb_count) of
// units (b, kv head) [unit_begin, unit_begin + units) (kb_count, units < 0:
// all): writes args.dK, args.dV (bf16) of those key blocks from Q, K, V, dO,
// lse_in and Dvec (rowsum(dO * O), fp32 [B*H*Sq]). DQ 1: adds scale * dS K
// into dq (fp32 [B, H, Sq, d], zeroed by the caller); DQ 2: writes every
// element of each key block's partial into dq, the slab
// [units][kb_count][(H/Hkv) Sq d] (launch_partials_reduce's layout); DQ 3:
// adds scale * dS K into dq (zeroed by the caller) in key-block order, counted
// in sem (int [B, H, ceil(Sq / BR)], zeroed by the caller), every key block in
// one launch; DQ 4 / 5: adds into dq, the tile-blocked accumulator
// (dq_tile_acc_bytes, zeroed by the caller; 5: in key-block order counted in
// sem), then writes args.dQ (bf16) from it. pds2 (Cfg::PDS == 2): stage,
// pds_stage_bytes of workspace, receives the padded LSE and D first. spt
// (`spt1`, DQ 5 with pds2 / pds3 / sp1 only): the dQ adds in FlashAttention-3's
// order where it applies (bwd_dq_order.h; other dQ bits than without). hs:
// KvHeadSplit (splits > 1: the spt kernels only, whole units; units then
// count (batch, kv head, split)). done (DQ 4 / 5; dq_done_bytes, zeroed by the
// caller; nullptr: the convert after the kv kernel in stream order): the
// convert launched to overlap the kv kernel's tail (dq_done_bytes above).
template <class Cfg>
void launch_bwd_kv(const AttentionProblem& p, const AttentionArgs& args, const float* Dvec, float* dq,
                   cudaStream_t stream, int64_t kb_begin = 0, int64_t kb_count = -1, int64_t unit_begin = 0,
                   int64_t units = -1, int* sem = nullptr, float* stage = nullptr, bool spt = false,
                   KvHeadSplit hs = {}, int* done = nullptr);
// Enqueues the dq kernel: writes args.dQ (bf16).
template <class Cfg>
void launch_bwd_dq(const AttentionProblem& p, const AttentionArgs& args, const float* Dvec, cudaStream_t stream);

#define DETFUSE_ATTN_WGMMA_KV_INSTANCES(PREFIX, CFG)                                                      \
  PREFIX template size_t bwd_kv_smem_bytes<CFG>();                                                        \
  PREFIX template void launch_bwd_kv<CFG>(const AttentionProblem&, const AttentionArgs&, const float*, float*, \
                                          cudaStream_t, int64_t, int64_t, int64_t, int64_t, int*, float*, bool, \
                                          KvHeadSplit, int*);
#define DETFUSE_ATTN_WGMMA_DQ_INSTANCES(PREFIX, CFG) \
  PREFIX template size_t bwd_dq_smem_bytes<CFG>();   \
  PREFIX template void launch_bwd_dq<CFG>(const AttentionProblem&, const AttentionArgs&, const float*, cudaStream_t);

DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2A)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St3A)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2P)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St3P)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St4P)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2O)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St3O)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2O)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2AT)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OT)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2AT)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2OT)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br96St2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2A)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St4A)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2ATS)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2OTS)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St3ATS)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St3OTS)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2ATS2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2OTS2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3R)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3R)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2R)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2R)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2P)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2P)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2P2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2PD)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2PD)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E1)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E1)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2PE1)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2PE1)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E2W)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2W)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2PE1W)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2PE1W)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E2B)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2B)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E2B3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2B3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2E2B3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2E2B3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E2B5)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2B5)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E2B6)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2B6)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2E2B6)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2E2B6)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2ATS3E2B7)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2B7)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2E2B8)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2E2B8)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2B10)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2OTS3E2B5W)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br80St2ATS4E2B5)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br80St2OTS4E2B5)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br80St2ATS4E2B7)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br80St2OTS4E2B7)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br80St2OTS4E2B5H)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br80St2OTS4E2B5S)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2ATS2E2B)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2OTS2E2B)
DETFUSE_ATTN_WGMMA_DQ_INSTANCES(extern, DqD128Bc64St2)
DETFUSE_ATTN_WGMMA_DQ_INSTANCES(extern, DqD64Bc128St2)
DETFUSE_ATTN_WGMMA_DQ_INSTANCES(extern, DqD128Bc64St3)
DETFUSE_ATTN_WGMMA_DQ_INSTANCES(extern, DqD64Bc64St3)

}  // namespace detfuse::attention::wg
