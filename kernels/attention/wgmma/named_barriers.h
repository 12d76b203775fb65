// The hardware named barriers (bar.sync / bar.arrive ids, 16 per CTA) of the
// Hopper attention forward, by role (FlashAttention-3's named_barrier.hpp
// idea). Id 0 is __syncthreads. The backward (attention_wgmma_bwd.cuh) still
// writes its ids as literals; it may adopt an enum of its own here.
#pragma once

namespace detfuse::attention::wg {

enum class FwdBarrier : int {
  kSyncThreads = 0,
  // Ping-pong (Cfg::PINGPONG): consumer warpgroup c (0 or 1) waits on
  // kPingPongWg0 + c before issuing its wgmmas and then arrives on the other's
  // (kPingPongWg1 - c).
  kPingPongWg0 = 1,
  kPingPongWg1 = 2,
  // TMA O store (Cfg::TMA_O): the 256 consumer threads, around their writes
  // of the shared O tile.
  kOStore = 3,
};

// The id as bar.sync takes it.
constexpr int barrier_id(FwdBarrier b) { return static_cast<int>(b); }

}  // namespace detfuse::attention::wg
