// Hopper (sm_90a) attention forward: configurations and launchers, without
// CUTLASS. The kernel is in attention_wgmma.cuh (built only in the variant
// translation units of this folder, with DETFUSE_ATTN_WGMMA_IMPL); everything
// else (the registration, tests, the probe) calls the explicit instances
// declared here.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/registry.h"

namespace detfuse::attention::wg {

// One forward configuration: head dim D, BR query rows per CTA (BR / 64
// consumer warpgroups of 64 rows each: two at BR = 128, three at BR = 192, d64
// only, FlashAttention-3 / -4's 192 x 128 tile of their sm90 forward at d <=
// 64), BC keys per K/V tile, STAGES-deep K and V rings in shared memory.
// OVERLAP: each consumer warpgroup software-pipelines its blocks (S of block n
// and P V of block n + 1 issued together, the softmax of n under P V), else one
// block at a time (the consumer warpgroups still overlap each other). PINGPONG
// (with OVERLAP, BR = 128): the two consumer warpgroups take turns issuing
// their wgmma (two named barriers), so one's softmax runs while the other's
// products own the tensor cores. PERSISTENT (param ps1): grid =
// min(tiles, SMs), each CTA walks (query block, head, batch) tiles in the order
// of fwd_tile_scheduler.h; the producer loads the next tile's Q as soon as the
// consumers' last Q K^T of the current tile is done, and its K/V into the ring
// as stages free up, so the next tile's loads run under this tile's last P V
// and epilogue. QSTAGES = 2 (persistent only, param qs2): two Q buffers, so
// the next tile's Q is loaded before this tile's K/V tail, not after this
// tile's last Q K^T.
// TREE (param rd1): the softmax's row max and row sum in four independent
// chains per row (a tree at the end) instead of one serial chain of BC / 4
// dependent fmax / fadd per row: a shorter latency between S and the first
// exp2. TMA_O (param ot1): the epilogue writes the normalised O (bf16) into a
// shared tile and one consumer thread stores it with one TMA bulk store
// (waited for only before the next tile's epilogue reuses the tile, or at the
// kernel's end), instead of 2 D / 8 scattered 4-byte global stores per thread;
// LSE is written as before. TMA_O = 2 (param ot2): the same, the O tile
// written by stmatrix (D / 16 STSM a thread, FlashAttention-3's epilogue copy)
// instead of a 4-byte store per pair of columns; the same bits (fwd_epilogue.cuh).
// SPLIT (param ls1, with OVERLAP): the walk over a tile's key blocks in three
// loops, the blocks that need the mask first (the diagonal, keys past Sk),
// then, without softcap, those that need none in a loop without the mask's and
// the softcap's branches, then the rest (the window's masked blocks; with
// softcap, everything below the diagonal); the same operations on every value,
// so the same bits (fwd_mainloop.cuh).
template <int D_, int BR_, int BC_, int STAGES_, int OVERLAP_ = 0, bool PINGPONG_ = false,
          bool PERSISTENT_ = false, int QSTAGES_ = 1, bool TREE_ = false, int TMA_O_ = 0, bool SPLIT_ = false>
struct FwdConfig {
  static constexpr int D = D_, BR = BR_, BC = BC_, STAGES = STAGES_, QSTAGES = QSTAGES_;
  static constexpr int OVERLAP = OVERLAP_;  // 0, 1 (ov1), 2 (ov2: ov1's loop rotated, fwd_mainloop.cuh)
  static constexpr bool PINGPONG = PINGPONG_, PERSISTENT = PERSISTENT_;
  static constexpr bool TREE = TREE_, SPLIT = SPLIT_;
  static constexpr int TMA_O = TMA_O_;  // 0, 1 (ot1), 2 (ot2: ot1 with the O tile written by stmatrix)
  static_assert(TMA_O >= 0 && TMA_O <= 2, "ot0, ot1 or ot2");
  static_assert(OVERLAP || !SPLIT, "the split walk is the overlapped loop's");
  static_assert(OVERLAP >= 0 && OVERLAP <= 2, "ov0, ov1 or ov2");
  static_assert(QSTAGES == 1 || (QSTAGES == 2 && PERSISTENT), "two Q buffers serve the persistent kernel only");
  static_assert(OVERLAP || !PINGPONG, "the ping-pong schedule is built on the overlapped loop");
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BR == 128 || (BR == 192 && D == 64),
                "two consumer warpgroups of 64 query rows each, or three at d64 (160 registers each: S 64 + P 32 "
                "+ O 32 fp32 values fit, d128's O 64 does not)");
  static_assert(BC % 16 == 0 && BC >= 16 && BC <= 256, "BC: the wgmma N of Q K^T (<= 256) and K of P V (16s)");
  static_assert(STAGES >= 2, "at least a double-buffered K/V ring");
  // Shared memory: QSTAGES Q (BR x D), STAGES K and V tiles (BC x D), (TMA_O) one O tile (BR x D),
  // bf16, plus barriers.
  static constexpr int kSmemTiles = 2 * ((QSTAGES + (TMA_O ? 1 : 0)) * BR * D + 2 * STAGES * BC * D);
  static_assert(kSmemTiles + 1024 <= 227 * 1024, "shared memory above the 227 KB of an sm_90 block");
};

// The registered configurations (register_wgmma.cpp names them; one .cu each).
using FwdD128Bc128St2 = FwdConfig<128, 128, 128, 2>;
using FwdD128Bc176St2 = FwdConfig<128, 128, 176, 2>;
using FwdD128Bc80St3 = FwdConfig<128, 128, 80, 3>;
using FwdD64Bc128St3 = FwdConfig<64, 128, 128, 3>;
using FwdD64Bc192St2 = FwdConfig<64, 128, 192, 2>;
using FwdD64Bc64St4 = FwdConfig<64, 128, 64, 4>;
using FwdD128Bc128St2Ov = FwdConfig<128, 128, 128, 2, true>;
using FwdD64Bc128St3Ov = FwdConfig<64, 128, 128, 3, true>;
using FwdD128Bc128St2OvPp = FwdConfig<128, 128, 128, 2, true, true>;
// Persistent (ps1) versions of the best of the above.
using FwdD128Bc128St2OvPs = FwdConfig<128, 128, 128, 2, true, false, true>;
using FwdD128Bc128St2OvPpPs = FwdConfig<128, 128, 128, 2, true, true, true>;
using FwdD128Bc176St2Ps = FwdConfig<128, 128, 176, 2, false, false, true>;
using FwdD64Bc128St3OvPs = FwdConfig<64, 128, 128, 3, true, false, true>;
// Persistent with two Q buffers (qs2), where the shared memory holds them.
using FwdD128Bc128St2OvPsQ2 = FwdConfig<128, 128, 128, 2, true, false, true, 2>;
using FwdD128Bc128St2OvPpPsQ2 = FwdConfig<128, 128, 128, 2, true, true, true, 2>;
using FwdD64Bc128St3OvPsQ2 = FwdConfig<64, 128, 128, 3, true, false, true, 2>;
// Session 8 (issue 16): tree reductions in the softmax (rd1) and the O
// epilogue by TMA store (ot1), on the persistent ov1 forward, its ping-pong
// form, the non-persistent ov1 forward (FlashAttention-4's sm90 schedule) and
// a longer key tile with ov1 (bc160: FlashAttention-3's d128 non-causal bc176
// spills 112 bytes here with ov1; bc160 does not, and leaves room for the O
// tile, 225 KB).
using FwdD128Bc128St2OvPsRd = FwdConfig<128, 128, 128, 2, true, false, true, 1, true, false>;
using FwdD128Bc128St2OvPsRdOt = FwdConfig<128, 128, 128, 2, true, false, true, 1, true, true>;
using FwdD128Bc128St2OvPpPsRdOt = FwdConfig<128, 128, 128, 2, true, true, true, 1, true, true>;
using FwdD128Bc128St2OvRdOt = FwdConfig<128, 128, 128, 2, true, false, false, 1, true, true>;
using FwdD128Bc160St2OvPsRdOt = FwdConfig<128, 128, 160, 2, true, false, true, 1, true, true>;
// Session 23 (branch s23-br80): FlashAttention-3's d128 non-causal tile, bc176 with ov1 (no O tile:
// 208 KB; 0 bytes spilled once built with the 64x176 wgmma atom, CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED,
// where session 8's build of 64x16 pieces spilled 112).
using FwdD128Bc176St2OvPsRd = FwdConfig<128, 128, 176, 2, true, false, true, 1, true, false>;
using FwdD64Bc128St3OvPsRdOt = FwdConfig<64, 128, 128, 3, true, false, true, 1, true, true>;
// Session 15 (issue 16 item 2): three consumer warpgroups, 192 query rows per
// CTA at d64 (FlashAttention-3 / -4's sm90 tile at d <= 64), persistent with
// the overlap: with the O tile (ot1, the causal heuristic's options at BR 192)
// and without. Both with rd1: at 160 registers the rd0 softmax spills 8 bytes
// (the Q descriptor, reloaded every key block), rd1 does not (README "Three
// consumer warpgroups").
using FwdD64Br192Bc128St3OvPsRd = FwdConfig<64, 192, 128, 3, true, false, true, 1, true, false>;
using FwdD64Br192Bc128St3OvPsRdOt = FwdConfig<64, 192, 128, 3, true, false, true, 1, true, true>;
// Session 20: FlashAttention-4's sm90 forward launches, not persistent (one CTA a tile, the
// causal grid's longest query blocks first): at d64 192 query rows in three consumer
// warpgroups (FA4's d64 tile: 2816 CTAs of 512 threads at 4,32,32,4096, ncu session 19), at d128
// the ping-pong turns of the two consumer warpgroups (FA4's d128 forward waits at a warp-scheduler
// barrier between them, ncu session 17); and at d64 the non-persistent br128 beside them.
using FwdD64Br192Bc128St3OvRdOt = FwdConfig<64, 192, 128, 3, true, false, false, 1, true, true>;
using FwdD64Bc128St3OvRdOt = FwdConfig<64, 128, 128, 3, true, false, false, 1, true, true>;
using FwdD128Bc128St2OvPpRdOt = FwdConfig<128, 128, 128, 2, true, true, false, 1, true, true>;
// FlashAttention-4's d64 forward whole: 192 rows, three warpgroups taking turns in a ring, one CTA a tile.
using FwdD64Br192Bc128St3OvPpRdOt = FwdConfig<64, 192, 128, 3, true, true, false, 1, true, true>;
// Session 24: ov2, the same loops rotated (the wait for P V opens the next turn, so the softmax
// runs under the warpgroup's own P V as FlashAttention-3 / -4 intend; fwd_mainloop.cuh), for the
// d128 heuristic's forward, FlashAttention-4's d128 launch and the d64 br128 forwards.
using FwdD128Bc128St2Ov2PsRdOt = FwdConfig<128, 128, 128, 2, 2, false, true, 1, true, true>;
using FwdD128Bc128St2Ov2PpRdOt = FwdConfig<128, 128, 128, 2, 2, true, false, 1, true, true>;
// At d64 on two consumer warpgroups: with three (160 registers each) ptxas serialises every wgmma of
// ov2 (C7512: S 64 + P 32 + O 32 live together under the softmax, where ov1's wait frees P first).
using FwdD64Bc128St3Ov2RdOt = FwdConfig<64, 128, 128, 3, 2, false, false, 1, true, true>;
using FwdD64Bc128St3Ov2PsRdOt = FwdConfig<64, 128, 128, 3, 2, false, true, 1, true, true>;
// Session 28: ls1, the split walk (no mask or softcap branch in the loop over the blocks that need no
// mask, as FlashAttention-4's d64 forward has it: a loop for its masked blocks, one for the rest). With
// three consumer warpgroups at d64, ov2 serialises every wgmma (C7512) in one loop; split, ptxas keeps
// them asynchronous and all 66 exp2 of the unmasked step between the wait for S and the wait for P V
// (ov1 there: 0 of 66; FlashAttention-4: 12). The d64 heuristics' tiles (causal br192 rd1 ot1,
// non-causal br192 ps1 rd1) with ov2, and the d128 heuristic's forward (ov2 ps1 rd1 ot1).
using FwdD64Br192Bc128St3Ov2RdOtLs = FwdConfig<64, 192, 128, 3, 2, false, false, 1, true, true, true>;
using FwdD64Br192Bc128St3Ov2PsRdLs = FwdConfig<64, 192, 128, 3, 2, false, true, 1, true, false, true>;
using FwdD128Bc128St2Ov2PsRdOtLs = FwdConfig<128, 128, 128, 2, 2, false, true, 1, true, true, true>;
// Session 30: ot2 (the O tile by stmatrix; read in the machine code without a GPU, 32 generic 4-byte
// stores a thread at d128 before, experiments/results/sass-2026-12-06) on the d128 heuristic's forward
// and the d64 causal one.
using FwdD128Bc128St2Ov2PsRdOt2 = FwdConfig<128, 128, 128, 2, 2, false, true, 1, true, 2>;
using FwdD64Br192Bc128St3OvRdOt2 = FwdConfig<64, 192, 128, 3, true, false, false, 1, true, 2>;

// Dynamic shared memory bytes of one CTA of Cfg (the kernel's SharedStorage).
template <class Cfg>
size_t fwd_smem_bytes();

// Enqueues the forward of `p` (bf16, d == Cfg::D, validated by the caller's
// can_run) writing args.O and args.lse. Throws detfuse::Error on a launch failure
// or a misaligned pointer.
template <class Cfg>
void launch_fwd(const AttentionProblem& p, const AttentionArgs& args, cudaStream_t stream);

// Persistent configurations: launch_fwd with the grid capped at `ctas` CTAs
// (0: the device's SM count, what launch_fwd uses) and, when group > 0, that
// causal head group instead of the L2 rule (fwd_tile_scheduler.h), so tests
// can make every CTA walk many tiles, with tiles that see no key between
// tiles that do.
template <class Cfg>
void launch_fwd_ctas(const AttentionProblem& p, const AttentionArgs& args, cudaStream_t stream, int ctas, int group);

#define DETFUSE_ATTN_WGMMA_INSTANCES(PREFIX, CFG)                                                       \
  PREFIX template size_t fwd_smem_bytes<CFG>();                                                         \
  PREFIX template void launch_fwd<CFG>(const AttentionProblem&, const AttentionArgs&, cudaStream_t);
#define DETFUSE_ATTN_WGMMA_PS_INSTANCES(PREFIX, CFG)                                                    \
  DETFUSE_ATTN_WGMMA_INSTANCES(PREFIX, CFG)                                                             \
  PREFIX template void launch_fwd_ctas<CFG>(const AttentionProblem&, const AttentionArgs&, cudaStream_t, int, int);

DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc128St2)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc176St2)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc80St3)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Bc128St3)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Bc192St2)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Bc64St4)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc128St2Ov)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Bc128St3Ov)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc128St2OvPp)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2OvPs)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2OvPpPs)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc176St2Ps)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD64Bc128St3OvPs)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2OvPsQ2)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2OvPpPsQ2)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD64Bc128St3OvPsQ2)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2OvPsRd)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2OvPsRdOt)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2OvPpPsRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc128St2OvRdOt)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc160St2OvPsRdOt)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc176St2OvPsRd)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD64Bc128St3OvPsRdOt)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD64Br192Bc128St3OvPsRd)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD64Br192Bc128St3OvPsRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Br192Bc128St3OvRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Bc128St3OvRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc128St2OvPpRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Br192Bc128St3OvPpRdOt)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2Ov2PsRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD128Bc128St2Ov2PpRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Bc128St3Ov2RdOt)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD64Bc128St3Ov2PsRdOt)
DETFUSE_ATTN_WGMMA_INSTANCES(extern, FwdD64Br192Bc128St3Ov2RdOtLs)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD64Br192Bc128St3Ov2PsRdLs)
DETFUSE_ATTN_WGMMA_PS_INSTANCES(extern, FwdD128Bc128St2Ov2PsRdOtLs)

}  // namespace detfuse::attention::wg

namespace detfuse {
// Built-in: the forward-only configurations (strategy token `fwd`, below) and
// the forward+backward variants (owning, atomic, partials; attention_wgmma_bwd.h).
void register_attention_wgmma(Registry& r);
// The forward-only configurations alone.
void register_attention_wgmma_forward_only(Registry& r);
// The partials variant with a slab bound of partials_mib MiB (tests register a
// tiny bound in a registry of their own to exercise the chunked launches).
void register_attention_wgmma_partials(Registry& r, int partials_mib);
}
