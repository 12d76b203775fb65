// The hardware named barriers (bar.sync / bar.arrive ids, 16 per CTA) of the
// Hopper attention forward and backward, by role (FlashAttention-3's
// named_barrier.hpp idea). Id 0 is __syncthreads.
#pragma once

namespace detfuse::attention::wg {

enum class FwdBarrier : int {
  kSyncThreads = 0,
  // Ping-pong (Cfg::PINGPONG): consumer warpgroup c (0, 1; 2 at BR = 192) waits on
  // kPingPongWg0 + c before issuing its wgmmas and then arrives on the next one's
  // (c + 1 mod the warpgroups; with two, kPingPongWg1 - c).
  kPingPongWg0 = 1,
  kPingPongWg1 = 2,
  kPingPongWg2 = 3,
  // TMA O store (Cfg::TMA_O): all consumer threads (256, or 384 at BR = 192), around their writes
  // of the shared O tile.
  kOStore = 4,
};

// The backward's kv kernel (bwd_*.cuh; the dq kernel uses none). Which
// threads meet on each depends on the variant (BwdKv's kBar* constants).
enum class BwdBarrier : int {
  kSyncThreads = 0,
  // The 256 consumer threads: dS (dS^T) stored before the dQ product reads
  // it, both warpgroups past it before it is written again, the d = 64 dQ
  // part exchange, and the ordered dQ semaphore's NamedBarrierSync<256, 1>.
  kDs = 1,
  // Without pds: warpgroup w's LSE and D of the query block, 128 threads
  // each (kLseWg0 + w). pds1: kLseWg0 over all 256 (LSE and D, one copy),
  // kLseWg1 over all 256 (P^T stored). pds2: each warpgroup's own rows
  // (P^T; dc1: dS^T too) stored, 128 threads each (kLseWg0 + w).
  kLseWg0 = 2,
  kLseWg1 = 3,
  // TMA dQ: tile b of the fp32 dQ tiles written (kDqFull0 + b) and read by
  // the writer warp (kDqEmpty0 + b), the consumers that write it and the
  // writer warp.
  kDqFull0 = 4,
  kDqFull1 = 5,
  kDqEmpty0 = 6,
  kDqEmpty1 = 7,
  // pds2 at d = 64: warpgroup 1's scaled dQ part stored into tile b
  // (kDqXch0 + b), warpgroup 0 adds its own then.
  kDqXch0 = 8,
  kDqXch1 = 9,
  // wq1 (one dQ tile, each consumer warpgroup writing its own contiguous
  // half): warpgroup w's half written (kDqWgFull0 + w) and read by the writer
  // warp (kDqWgEmpty0 + w), that warpgroup's 128 threads and the writer warp
  // (160): neither warpgroup waits for the other at the dQ hand-off.
  kDqWgFull0 = 10,
  kDqWgFull1 = 11,
  kDqWgEmpty0 = 12,
  kDqWgEmpty1 = 13,
};

// The id as bar.sync takes it.
constexpr int barrier_id(FwdBarrier b) { return static_cast<int>(b); }
static_assert(barrier_id(FwdBarrier::kPingPongWg1) == barrier_id(FwdBarrier::kPingPongWg0) + 1 &&
                  barrier_id(FwdBarrier::kPingPongWg2) == barrier_id(FwdBarrier::kPingPongWg0) + 2,
              "the ping-pong ring takes kPingPongWg0 + c for warpgroup c");
constexpr int barrier_id(BwdBarrier b) { return static_cast<int>(b); }

}  // namespace detfuse::attention::wg
