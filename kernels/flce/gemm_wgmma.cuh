// Hopper (sm_90a) GEMM engine for FLCE: C = A B^T with bf16 operands and fp32
// accumulation on wgmma, operands fed by the tensor memory accelerator (TMA)
// through a multi-stage shared-memory ring on mbarriers (see gemm.cuh for the
// contract every engine follows).
//
// Why this shape. The mma.sync engine (gemm_mma.cuh) reaches 300-330 TFLOP/s
// on the FLCE products because every warp moves its own fragments through
// registers; wgmma reads both operands straight from swizzled shared memory and
// a single producer thread issues bulk tensor copies, which is how cuBLAS
// reaches 580-660 TFLOP/s on the same shapes. The kernel is warp-specialized:
//   warpgroup 0   producer: one elected thread issues TMA loads of A and B
//                 tiles into a STAGES-deep ring (in a CM x CN cluster, B
//                 multicast to the CTAs of its column along M, A to those of
//                 its row along N), the rest of the warpgroup idles with 40
//                 registers (setmaxnreg);
//   warpgroups 1-2 consumers (232 registers each) issue wgmma on the ring's
//                 stages with fp32 accumulators in registers, then run the
//                 epilogue straight from the accumulators; "cooperative": both
//                 share one BM x BN tile (BM/2 rows each); "ping-pong": each
//                 owns a tile and the two take turns (see WgConfig).
// The grid is persistent: each cluster walks work units (split, cluster tile)
// in a grouped raster, a cluster tile being CM x CN output tiles, one per CTA
// (its place from its rank in the cluster); the producer already loads the
// next tile's stages while the consumers store the last one.
//
// What comes from CUTLASS 4.2 (pinned, kernels/flce/README.md): the mainloop
// collective (CollectiveMma for MainloopSm90TmaGmmaWarpSpecialized, built by
// CollectiveBuilder: smem layouts with 128-byte swizzle, TMA descriptors, the
// wgmma atoms, the PipelineTmaAsync ring). What is ours: the kernel around it
// (split-K work units with arbitrary k ranges, the raster, the persistent
// loop) and the epilogues, which FLCE needs fused (softcap and per-tile row
// statistics on the logits; owning accumulate, vector atomics and partial
// slices on dW) and which CUTLASS's epilogue collectives do not express.
//
// Every epilogue works on pairs of adjacent columns: the wgmma accumulator
// layout gives each thread values (m, n) and (m, n+1) next to each other, so
// stores, loads and atomics are 8 bytes wide (float2 / bf16x2, and the sm_90
// vector reduction red.global.add.v2.f32).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/common/cuda_check.h"
#include "kernels/flce/gemm.cuh"

// The implementation needs CUTLASS and sm_90a: only the variant translation
// units (kernels/flce/flce_wgmma_*.cu, built with DETFUSE_WGMMA_IMPL) see it
// and instantiate launch_gemm_wgmma explicitly for their configurations
// (wgmma_configs.h); everything else calls those instances.
#if defined(DETFUSE_WGMMA_IMPL)
#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cuda_host_adapter.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>
#endif

namespace detfuse::flce {

// Tile BM x BN x BK, a CM x CN cluster (CM CTAs along M share, by multicast,
// their B tile; CN CTAs along N their A tile), STAGES-deep ring, and the
// consumers' schedule:
//   cooperative (PP = false): both consumer warpgroups share one BM x BN tile
//     (BM/2 rows each) and run its epilogue together, the tensor cores idle
//     meanwhile;
//   ping-pong (PP = true): each consumer warpgroup owns a whole BM x BN tile,
//     the two take alternate work units and take turns on the tensor cores
//     (an ordered barrier), so one's epilogue runs under the other's mainloop.
//
// Operand traffic from L2 per k-step of one CTA: (BM / CN + BN / CM) x BK x 2
// bytes for 2 x BM x BN x BK flops; ping-pong 128x128 in 2x1 clusters, 85
// flop/byte; in 2x2 clusters, 128 (as cuBLAS's 256x128 in 1x2 clusters).
//
// EPI_TMA (param ot1): the kernel has the bf16 epilogues (logits_exp16,
// store_bf16) alone, each writing its tile into a 128-byte swizzled shared
// tile for one thread's TMA store, clipped at M and N (the row statistics keep
// direct stores); any other epilogue, or a C that TMA cannot store, runs the
// register configuration WgTmaFallback<Cfg>.
//   ping-pong: one BM x BN shared tile per consumer warpgroup, its store
//     running on under the next mainloop; the two tiles (2 x 32 KiB at
//     128x128) come out of the ring: 5 stages of 32 KiB + 64 KiB = 224 KiB of
//     the H200's 227 KiB per block (6 stages would need 256 KiB);
//   cooperative: one 32 KiB shared tile of BM x EPI_N (128 x 128 at 128x256,
//     256 x 64 at 256x128) that both warpgroups fill, the BM x BN tile going
//     out in BN / EPI_N passes (the second waits until the first store has
//     read the tile): 4 stages of 48 KiB + 32 KiB = 224 KiB (a whole 64 KiB
//     tile would need 256 KiB).
template <int BM_, int BN_, int BK_, int CM_, int STAGES_, bool PP_ = false, int CN_ = 1, bool ET_ = false>
struct WgConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, CLUSTER_M = CM_, CLUSTER_N = CN_, STAGES = STAGES_;
  static constexpr bool PINGPONG = PP_;
  static constexpr bool EPI_TMA = ET_;
  static constexpr int CONSUMERS = 2;
  // EPI_TMA: the shared C tiles (BM x EPI_N bf16, EPI_TILES of them) and the
  // passes of EPI_N columns a BM x BN tile goes out in.
  static constexpr int EPI_N = PP_ ? BN_ : (16384 / BM_ < BN_ ? 16384 / BM_ : BN_);
  static constexpr int EPI_TILES = PP_ ? CONSUMERS : 1;
  static constexpr int EPI_PASSES = BN_ / EPI_N;
  static_assert(!ET_ || (EPI_N % 64 == 0 && BN_ % EPI_N == 0), "whole 64-column TMA boxes in every pass");
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  static_assert(PP_ ? (BM == 64 || BM == 128) : (BM == 128 || BM == 256),
                "cooperative: two warpgroups of BM/2 rows; ping-pong: one warpgroup of BM rows per tile");
  static_assert(BM * BN <= 128 * 256 / (PP_ ? 2 : 1), "at most 128 fp32 accumulators per consumer thread");
  static_assert(BN % 64 == 0 && BN >= 64 && BN <= 256, "wgmma N from 64 to 256 in steps of 64 here");
  static_assert(BK == 64, "one 128-byte swizzle atom of bf16 along K");
  static_assert(CM_ == 1 || CM_ == 2, "clusters of one or two CTAs along M");
  static_assert(CN_ == 1 || CN_ == 2, "clusters of one or two CTAs along N");
  static constexpr int CLUSTER = CM_ * CN_;  // CTAs per cluster
  static_assert(STAGES >= 2, "the TMA ring needs at least two stages");
  // Shared memory of the ring (the pipeline barriers add a few hundred bytes).
  static constexpr size_t ring_bytes() { return size_t(STAGES) * (BM + BN) * BK * 2; }
  // EPI_TMA: ping-pong, one bf16 BM x BN tile per consumer warpgroup;
  // cooperative, one BM x EPI_N tile (32 KiB).
  static constexpr size_t epi_tile_bytes() { return EPI_TMA ? size_t(EPI_TILES) * BM * EPI_N * 2 : 0; }
  // The ring and the epilogue tiles (can_run's check against the device).
  static constexpr size_t tile_smem_bytes() { return ring_bytes() + epi_tile_bytes(); }
};

// The epilogue of one wgmma GEMM call, chosen at run time so that one kernel
// instantiation per operand layout serves every FLCE epilogue (fewer, faster
// builds; the branch is uniform across the grid).
struct WgEpilogue {
  // accumulate_in: owning dW with the running sum loaded into the accumulators
  // before the k-loop (EpiAccumulateIn), the epilogue a plain store.
  // logits_exp16: EpiLogitsExp16 (bf16 exp(z - m_tile), statistics with the target logit).
  enum Kind : int { store_f32, store_bf16, logits, accumulate, atomic, partial, accumulate_in, logits_exp16 };
  int kind = store_f32;
  void* C = nullptr;
  int64_t ldc = 0;
  float softcap = 0.f;        // logits
  int first = 0;              // accumulate: overwrite instead of add; accumulate_in: start from zero
  int64_t split_stride = 0;   // partial: elements between split slices
  float4* stats = nullptr;    // logits: per (row, column tile) {max, sum exp(z - max), sum z, 0}
  int64_t ld_stats = 0;       // column tiles per stats row
  const int64_t* y = nullptr; // logits_exp16: the rows' targets (the target logit goes in stats .w)
  int pairs = 1;              // set by the launcher: 8-byte accesses are aligned (else element by element)
};

// The driver's epilogue functors (gemm.cuh) as one WgEpilogue each.
inline WgEpilogue wg_epilogue(WgEpilogue::Kind kind, void* C, int64_t ldc) {
  WgEpilogue w;
  w.kind = kind;
  w.C = C;
  w.ldc = ldc;
  return w;
}
inline WgEpilogue to_wg_epilogue(const EpiStoreLogits& e) {
  WgEpilogue w = wg_epilogue(WgEpilogue::logits, e.C, e.ldc);
  w.softcap = e.softcap;
  return w;
}
inline WgEpilogue to_wg_epilogue(const EpiLogitsStats& e) {
  WgEpilogue w = to_wg_epilogue(EpiStoreLogits{e.C, e.ldc, e.softcap});
  w.stats = reinterpret_cast<float4*>(e.stats);
  w.ld_stats = e.ld_stats;
  return w;
}
inline WgEpilogue to_wg_epilogue(const EpiLogitsExp16& e) {
  WgEpilogue w = wg_epilogue(WgEpilogue::logits_exp16, e.E, e.ldc);
  w.softcap = e.softcap;
  w.stats = reinterpret_cast<float4*>(e.stats);
  w.ld_stats = e.ld_stats;
  w.y = e.y;
  return w;
}
inline WgEpilogue to_wg_epilogue(const EpiStore<float>& e) { return wg_epilogue(WgEpilogue::store_f32, e.C, e.ldc); }
inline WgEpilogue to_wg_epilogue(const EpiStore<__nv_bfloat16>& e) {
  return wg_epilogue(WgEpilogue::store_bf16, e.C, e.ldc);
}
inline WgEpilogue to_wg_epilogue(const EpiAccumulate& e) {
  WgEpilogue w = wg_epilogue(WgEpilogue::accumulate, e.C, e.ldc);
  w.first = e.first;
  return w;
}
inline WgEpilogue to_wg_epilogue(const EpiAccumulateIn& e) {
  WgEpilogue w = wg_epilogue(WgEpilogue::accumulate_in, e.C, e.ldc);
  w.first = e.first;
  return w;
}
inline WgEpilogue to_wg_epilogue(const EpiAtomic& e) { return wg_epilogue(WgEpilogue::atomic, e.C, e.ldc); }
inline WgEpilogue to_wg_epilogue(const EpiPartial& e) {
  WgEpilogue w = wg_epilogue(WgEpilogue::partial, e.P, e.ldc);
  w.split_stride = e.split_stride;
  return w;
}

// EPI_TMA: whether C (bf16, row stride ldc, N columns) can be the TMA
// store's tensor: a 16-byte aligned base and row stride (ldc % 8 == 0), rows
// that do not overlap (ldc >= N). Any N: the tensor map clips at N exactly.
// N % 8 == 0 too: on the H200 the TMA store wrote the columns past N up to the
// next 16-byte boundary (N = 1031: column 1031 of every row; N = 300: 300-303),
// with CuTe's tensor map and with one encoded by hand at the exact extent alike
// (session 9, experiments/results/h200-2026-12-02/s9/): its clipping at the
// inner bound is by 16-byte chunk, so a C whose N is not a multiple of 8 bf16
// takes the register epilogue (WgTmaFallback).
inline bool wg_tma_store_ok(const void* C, int64_t ldc, int64_t N) {
  return C != nullptr && (reinterpret_cast<uintptr_t>(C) & 15) == 0 && ldc % 8 == 0 && ldc >= N && N > 0 &&
         N % 8 == 0;
}

// EPI_TMA: the configuration whose kernel (register epilogue, the same tile,
// cluster and ping-pong) an EPI_TMA launch runs instead when the epilogue is
// not a bf16 one or C fails wg_tma_store_ok; the same bits, since only the
// store path differs (specialised in wgmma_configs.h for every EPI_TMA
// configuration, whose variant file links that configuration's instance).
template <class Cfg>
struct WgTmaFallback;

// Launches C = A B^T for one operand layout on the current device's stream.
// Throws detfuse::Error when the operands break TMA's rules (16-byte aligned
// bases and leading dimensions, K > 0).
template <class Cfg, Major AM, Major BMj>
void launch_gemm_wgmma(const GemmParams& p, const WgEpilogue& epi, int group_m, cudaStream_t stream);

#if defined(DETFUSE_WGMMA_IMPL)

namespace wg {

using namespace cute;

template <class Cfg, Major AM, Major BMj>
struct Kernel {
  using TileShape = Shape<Int<Cfg::BM>, Int<Cfg::BN>, Int<Cfg::BK>>;
  // (CM, CN, 1): the collective multicasts A along the cluster's N mode and B
  // along its M mode, the CTA's place being (rank % CM, rank / CM) as the
  // launch's 2-D cluster (clusterDim (CM, CN, 1)) numbers it.
  using ClusterShape = Shape<Int<Cfg::CLUSTER_M>, Int<Cfg::CLUSTER_N>, _1>;
  // CUTLASS's tags: A is M x K (RowMajor = K contiguous); B is K x N
  // (ColumnMajor = K contiguous).
  using LayoutA = std::conditional_t<AM == Major::K, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  using LayoutB = std::conditional_t<BMj == Major::K, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, LayoutA, 8, cutlass::bfloat16_t,
      LayoutB, 8, float, TileShape, ClusterShape, cutlass::gemm::collective::StageCount<Cfg::STAGES>,
      std::conditional_t<Cfg::PINGPONG, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperative>>::CollectiveOp;
  using TiledMma = typename Mainloop::TiledMma;
  using Pipeline = typename Mainloop::MainloopPipeline;
  using PipelineState = typename Mainloop::PipelineState;
  // Ping-pong: the consumer warpgroups' mainloops run in turn (depth 1, two groups).
  using OrderBarrier = cutlass::OrderedSequenceBarrier<1, 2>;
  // Threads that consume (and release) each stage of the ring.
  static constexpr int kStageConsumers = Cfg::PINGPONG ? 128 : 128 * Cfg::CONSUMERS;

  // EPI_TMA: a shared bf16 output tile (BM x EPI_N: a ping-pong warpgroup's
  // whole tile, or one pass of a cooperative tile), 128-byte swizzled along N
  // (64 bf16 = one swizzle row; 8 x 64 atoms, column-major over the tile) as
  // the TMA store reads it; C is N-contiguous, so its N is the atom's K mode.
  using SmemLayoutC =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<cutlass::bfloat16_t>{}, Shape<Int<Cfg::BM>, Int<Cfg::EPI_N>>{}));
  static constexpr int kCElems = cosize_v<SmemLayoutC>;
  struct EpiTiles {
    // Ping-pong: warpgroup g's tile at g * kCElems; cooperative: the one tile.
    cute::array_aligned<cutlass::bfloat16_t, Cfg::EPI_TILES * kCElems, 1024> c;
  };
  struct NoEpiTiles {};
  // The epilogue tiles as an (empty unless EPI_TMA) base: the other
  // configurations' storage is unchanged.
  struct SharedStorage : std::conditional_t<Cfg::EPI_TMA, EpiTiles, NoEpiTiles> {
    typename Mainloop::TensorStorage tensors;
    alignas(16) typename Mainloop::PipelineStorage pipeline;
    alignas(16) typename OrderBarrier::SharedStorage order;
  };
  static constexpr size_t smem_bytes = sizeof(SharedStorage);
  static_assert(!Cfg::EPI_TMA || smem_bytes <= 227 * 1024, "over sm_90's 227 KiB of shared memory per block");

  // EPI_TMA: the tensor map of C for the TMA store, (N, M) bf16 with row
  // stride ldc, boxes of 64 columns (one 128-byte swizzle row) x BM rows: a
  // pass goes out as EPI_N / 64 boxes, one per 64-column block of SmemLayoutC.
  // Encoded by the launcher with the exact extent N, so the hardware clips a
  // tile at M and N exactly (CuTe's make_tma_copy rounded the inner extent up
  // to a multiple of 8 columns: it wrote up to 7 columns past N).
  struct NoTmaC {};
  using TmaCField = std::conditional_t<Cfg::EPI_TMA, cute::TmaDescriptor, NoTmaC>;
  static constexpr int kTmaBoxN = 64;
  static_assert(Cfg::BN % kTmaBoxN == 0, "whole 64-column boxes");
  // Named barriers of the two consumer warpgroups' epilogues (128 threads
  // each). The ring and the ping-pong order are mbarriers (PipelineTmaAsync,
  // OrderedSequenceBarrier), so no id is taken; CUTLASS reserves 1-7 for its
  // own kernels, so ours start at its first user id (8, 9).
  static constexpr int kEpiBarrier0 = int(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier);

  struct Params {
    typename Mainloop::Params mainloop;
    int M, N, K;
    int k_per_split;  // multiple of BK
    int splits;
    int tiles_m, tiles_n;
    int tiles_mc, tiles_nc;  // cluster tiles along M and N
    int group_mc;            // raster group, in cluster tiles along M
    WgEpilogue epi;
    // EPI_TMA: C's tensor map (the launcher runs an EPI_TMA kernel only for a
    // bf16 epilogue into a C that TMA can store, wg_tma_store_ok).
    TmaCField tma_c;
  };

  // Work unit u -> (split, m and n tile of this CTA); the raster is grouped
  // over cluster tiles exactly as the mma.sync engine groups block tiles. The
  // CTAs of a cluster take the same unit, each its own tile of the cluster
  // tile: those with one rank_m share the m tile (their A multicast), those
  // with one rank_n the n tile (B). A tile past M or N (the cluster tile
  // overhangs the matrix) still loads, TMA zero-filling, since every CTA of
  // the cluster takes part in every multicast load; its epilogue is skipped
  // (in_range).
  struct Unit {
    int split, tm, tn, kt0, kt_count;
  };
  static __device__ __forceinline__ Unit unit(const Params& P, int u, int rank_m, int rank_n) {
    Unit w;
    const int per_split = P.tiles_mc * P.tiles_nc;
    w.split = u / per_split;
    const int t = u - w.split * per_split;
    const int per_group = P.group_mc * P.tiles_nc;
    const int first = (t / per_group) * P.group_mc;
    const int gm = min(P.tiles_mc - first, P.group_mc);
    const int r = t - (t / per_group) * per_group;
    w.tm = (first + r % gm) * Cfg::CLUSTER_M + rank_m;
    w.tn = (r / gm) * Cfg::CLUSTER_N + rank_n;
    const int k0 = w.split * P.k_per_split;
    const int k1 = min(P.K, k0 + P.k_per_split);
    w.kt0 = k0 / Cfg::BK;
    w.kt_count = k1 > k0 ? (k1 - k0 + Cfg::BK - 1) / Cfg::BK : 0;
    return w;
  }
  static __device__ __forceinline__ bool in_range(const Params& P, const Unit& w) {
    return w.tm < P.tiles_m && w.tn < P.tiles_n;
  }

  // Owning dW with the running sum in the accumulators (EpiAccumulateIn): this
  // thread's fragment of C[m0.., n0..] into its accumulators, zeros outside
  // [0,M) x [0,N). Same fragment layout as the epilogue's stores.
  template <class Accum>
  static __device__ __forceinline__ void load_accumulators(const Params& P, Accum& acc, int mma_tid, const Unit& w) {
    TiledMma tiled_mma;
    auto thr = tiled_mma.get_thread_slice(mma_tid);
    Tensor cD = make_identity_tensor(make_shape(Int<Cfg::BM>{}, Int<Cfg::BN>{}));  // (BM,BN) -> (m,n)
    Tensor tCcD = thr.partition_C(cD);                                              // (MMA,MMA_M,MMA_N)
    const WgEpilogue& e = P.epi;
    const int m0 = w.tm * Cfg::BM, n0 = w.tn * Cfg::BN;
    CUTE_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const auto c = tCcD(i);
      const int m = m0 + get<0>(c), n = n0 + get<1>(c);
      float2 v = make_float2(0.f, 0.f);
      if (m < P.M && n < P.N) {
        const float* p = static_cast<const float*>(e.C) + int64_t(m) * e.ldc + n;
        if (n + 1 < P.N && e.pairs) {
          v = __ldcs(reinterpret_cast<const float2*>(p));
        } else {
          v.x = __ldcs(p);
          if (n + 1 < P.N) v.y = __ldcs(p + 1);
        }
      }
      acc(i) = v.x;
      acc(i + 1) = v.y;
    }
  }

  // The consumer mainloop onto accumulators that already hold a sum: every
  // wgmma of every k-tile adds (scale-d 1), where CUTLASS's collective mma
  // starts its first k-tile from zero. Otherwise the same schedule as that
  // collective (sm90_mma_tma_gmma_ss_warpspecialized.hpp, one wgmma batch in
  // flight, K_PIPE_MMAS = 1), so its mma_tail releases the last stage, and the
  // same wgmma sequence: k-tiles in order, each tile's K = 16 slices in order.
  template <class Accum>
  static __device__ __forceinline__ void mma_onto(Pipeline pipeline, PipelineState read, Accum& accum, int k_tiles,
                                                  int mma_tid, typename Mainloop::TensorStorage& st) {
    static_assert(Mainloop::K_PIPE_MMAS == 1, "the schedule below keeps one wgmma batch in flight");
    Tensor sA = make_tensor(make_smem_ptr(st.smem_A.data()), typename Mainloop::SmemLayoutA{});  // (BM,BK,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(st.smem_B.data()), typename Mainloop::SmemLayoutB{});  // (BN,BK,PIPE)
    TiledMma tiled_mma;
    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    auto wg_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int wg = __shfl_sync(0xffffffffu, mma_tid / cutlass::NumThreadsPerWarpGroup, 0);
    auto thr = tiled_mma.get_slice(wg_layout(wg));
    Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));  // (MMA,MMA_N,MMA_K,PIPE)
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
    PipelineState release = read;
    warpgroup_fence_operand(accum);
    {
      auto token = pipeline.consumer_try_wait(read);
      pipeline.consumer_wait(read, token);
      const int stage = read.index();
      warpgroup_arrive();
      cute::gemm(tiled_mma, tCrA(_, _, _, stage), tCrB(_, _, _, stage), accum);
      warpgroup_commit_batch();
      ++read;
    }
    warpgroup_fence_operand(accum);
    for (int k = k_tiles - 1; k > 0; --k) {
      auto token = pipeline.consumer_try_wait(read);
      pipeline.consumer_wait(read, token);
      const int stage = read.index();
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      cute::gemm(tiled_mma, tCrA(_, _, _, stage), tCrB(_, _, _, stage), accum);
      warpgroup_commit_batch();
      warpgroup_wait<1>();  // the previous k-tile's batch is done: release its stage
      warpgroup_fence_operand(accum);
      pipeline.consumer_release(release);
      ++read;
      ++release;
    }
    warpgroup_fence_operand(accum);
  }

  // EPI_TMA: the element offset of (r0 + dr, c0 + dc) in SmemLayoutC, where
  // (r0, c0) is the thread's first accumulator value (c0 < 8) and dr, dc are
  // multiples of 8, as everywhere in the wgmma fragment: the 128-byte swizzle
  // XORs the 16-byte chunk index (col / 8) % 8 with row % 8 = r0 % 8, so each
  // pair costs one XOR of a constant with the thread's key, the rest folds to
  // immediates (cute's partition_C of the swizzled tile spilled registers).
  // Split in two: c_tile_base depends on dc only through dc & 56, so a thread
  // has 8 bases (registers, computed once per tile) and every pair is one of
  // them plus the immediate c_tile_step.
  // tests/engines/test_epi_tma_layout.cu checks it against SmemLayoutC.
  static CUTE_HOST_DEVICE int c_tile_base(int r0, int c0, int dc) {
    return r0 * 64 + c0 + ((dc & 56) ^ ((r0 & 7) << 3));
  }
  // dc % EPI_N: the column within its pass (cooperative EPI_TMA: the pass
  // dc / EPI_N; (dc & 56) is the same in every pass, EPI_N being a multiple of 64).
  static CUTE_HOST_DEVICE int c_tile_step(int dr, int dc) {
    return dr * 64 + ((dc % Cfg::EPI_N) / 64) * (Cfg::BM * 64);
  }
  static CUTE_HOST_DEVICE int c_tile_offset(int r0, int c0, int dr, int dc) {
    return c_tile_base(r0, c0, dc) + c_tile_step(dr, dc);
  }

  // EPI_TMA: named barrier over the threads that share a C tile: the 128 of
  // this consumer warpgroup (ping-pong), the 256 of both (cooperative).
  static __device__ __forceinline__ void epi_sync() {
    if constexpr (Cfg::PINGPONG) {
      const int id = kEpiBarrier0 + int(threadIdx.x / 128) - 1;
      asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(128) : "memory");
    } else {
      asm volatile("bar.sync %0, %1;" ::"r"(kEpiBarrier0), "r"(128 * Cfg::CONSUMERS) : "memory");
    }
  }
  // EPI_TMA, before the threads write their shared tile: the TMA store that
  // last read it (issued by the thread of mma_tid 0) is done reading.
  static __device__ __forceinline__ void tma_tile_acquire(int mma_tid) {
    if (mma_tid == 0) tma_store_wait<0>();
    epi_sync();
  }
  // EPI_TMA, after the threads wrote their tile: the writes made visible to
  // the async proxy, then one thread stores pass `pass` of tile (tm, tn) of C
  // (columns pass * EPI_N ..; the whole tile in ping-pong), one TMA box per
  // 64-column block (at BM x 64 elements apart in SmemLayoutC).
  static __device__ __forceinline__ void tma_tile_store(const Params& P, cutlass::bfloat16_t* sc, int mma_tid,
                                                        const Unit& w, int pass) {
    if constexpr (Cfg::EPI_TMA) {
      cutlass::arch::fence_view_async_shared();
      epi_sync();
      if (mma_tid == 0) {
        const int n = w.tn * Cfg::BN + pass * Cfg::EPI_N;
        CUTE_UNROLL
        for (int b = 0; b < Cfg::EPI_N / kTmaBoxN; ++b)
          if (Cfg::PINGPONG || n + b * kTmaBoxN < P.N)  // a cooperative tile's pass may lie wholly past N
            SM90_TMA_STORE_2D::copy(&P.tma_c, sc + b * Cfg::BM * kTmaBoxN, n + b * kTmaBoxN, w.tm * Cfg::BM);
        tma_store_arrive();
      }
    }
  }

  // EPI_TMA: the epilogue of one consumer thread, the bf16 kinds only
  // (logits_exp16, store_bf16; the launcher sends every other kind, and a C
  // that TMA cannot store, to the register-epilogue configuration), every pair
  // into the shared tile, then one TMA store of the tile (cooperative: of each
  // EPI_N-column pass, the statistics' values held in the accumulators meanwhile).
  //
  // Why not the shared path inside the general epilogue (session 8): the TMA
  // and the direct stores behind a run-time flag, softcap's tanhf, and bounds
  // tests on every element made the ex16 epilogue ~8000 SASS instructions
  // (62 a value; cuobjdump, kernels/flce/README.md), a straight line that
  // does not fit the instruction cache, with every shared-store address
  // rebuilt from the CTA id in each branch. Here the path is fixed at compile
  // time, softcap is a separate pass taken only when on, the column bounds
  // are tested only in the ragged last column tile (the tensor map clips the
  // store; only the statistics need the masks), the target logit is looked up
  // only in the rows whose target lies in the tile, and each shared store is
  // one of 8 base registers plus an immediate. The values and the order of
  // every fp32 operation are those of the register epilogue (the same bits).
  template <class Accum>
  static __device__ __forceinline__ void epilogue_tma(const Params& P, Accum& acc, int mma_tid, const Unit& w,
                                                      cutlass::bfloat16_t* sc) {
    TiledMma tiled_mma;
    auto thr = tiled_mma.get_thread_slice(mma_tid);
    Tensor cD = make_identity_tensor(make_shape(Int<Cfg::BM>{}, Int<Cfg::BN>{}));  // (BM,BN) -> (m,n)
    Tensor tCcD = thr.partition_C(cD);                                              // (MMA,MMA_M,MMA_N)
    using AccLayout = decltype(acc.layout());
    static_assert(rank(AccLayout{}) == 3 && size<0, 0>(AccLayout{}) == 2 && size<0, 1>(AccLayout{}) == 2,
                  "sm90 accumulator fragment ((2,2,N/8),MMA_M,MMA_N): value pairs are adjacent columns");
    constexpr int MM = size<1>(AccLayout{}), MN = size<2>(AccLayout{}), NV = size<0, 2>(AccLayout{});
    constexpr int R = 2 * MM;  // rows of the fragment: (h, mm) -> r = 2 mm + h
    const WgEpilogue& e = P.epi;
    const int m0 = w.tm * Cfg::BM, n0 = w.tn * Cfg::BN;
    const int M = P.M, N = P.N;
    const bool ex16 = e.kind == WgEpilogue::logits_exp16;
    auto row_of = [&](int mm, int h) { return m0 + get<0>(tCcD(make_coord(make_coord(0, h, 0), mm, 0))); };
    // ex16: the rows' targets first, so that the loads run under the wait below.
    int64_t yt[R];
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      const int m = row_of(r / 2, r % 2);
      yt[r] = ex16 && m < M ? e.y[m] : -1;
    }
    // The 8 shared-store bases of this thread (c_tile_base), in bytes (set by
    // set_bases before the first put_pair: cooperative ex16 only after the
    // statistics, so that they do not hold 8 registers meanwhile).
    const int r0 = get<0>(tCcD(0)), c0 = get<1>(tCcD(0));
    uint32_t sbase[8];
    auto set_bases = [&]() {
      const uint32_t s0 = cast_smem_ptr_to_uint(sc);
      CUTE_UNROLL
      for (int k = 0; k < 8; ++k) sbase[k] = s0 + 2u * uint32_t(c_tile_base(r0, c0, 8 * k));
    };
    auto put_pair = [&](const auto& coord, float v0, float v1) {  // coord of v in acc and tCcD
      const auto c = tCcD(coord);
      const int dr = get<0>(c) - r0, dc = get<1>(c) - c0;  // constants once unrolled
      const uint32_t addr = sbase[(dc & 56) / 8] + 2u * uint32_t(c_tile_step(dr, dc));
      const __nv_bfloat162 v = __floats2bfloat162_rn(v0, v1);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(*reinterpret_cast<const uint32_t*>(&v)) : "memory");
    };
    // The tile from the accumulators, pass by pass (cooperative: EPI_N columns
    // a pass through the one shared tile; ping-pong: one pass, the whole tile).
    auto store_passes = [&]() {
      set_bases();
      CUTE_UNROLL
      for (int pass = 0; pass < Cfg::EPI_PASSES; ++pass) {
        tma_tile_acquire(mma_tid);
        CUTE_UNROLL
        for (int i = 0; i < size(acc); i += 2)
          if ((get<1>(tCcD(i)) - c0) / Cfg::EPI_N == pass) put_pair(i, acc(i), acc(i + 1));  // constant once unrolled
        tma_tile_store(P, sc, mma_tid, w, pass);
      }
    };
    // Ping-pong: the values go into the shared tile as the statistics form
    // them; cooperative (several passes): back into the accumulators, then
    // store_passes.
    constexpr bool kOnePass = Cfg::EPI_PASSES == 1;

    if (!ex16) {
      store_passes();
      return;
    }
    if constexpr (kOnePass) {
      set_bases();
      tma_tile_acquire(mma_tid);
    }

    // logits_exp16: the same operations, in the same order per row, as the
    // register epilogue's (WgEpilogue::logits_exp16 in epilogue()).
    constexpr float kLog2e = 1.4426950408889634f;
    const float cap = e.softcap;
    if (cap > 0.f) {
      const float inv_cap = 1.f / cap;
      CUTE_UNROLL
      for (int i = 0; i < size(acc); ++i) acc(i) = cap * tanhf(acc(i) * inv_cap);
    }
    auto rows = [&](auto ragged) {
      constexpr bool kRagged = decltype(ragged)::value;  // the tile overhangs N: mask the statistics
      float mx[R], zt[R], se[R], sz[R];
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) mx[r] = -INFINITY, zt[r] = 0.f, se[r] = 0.f, sz[r] = 0.f;
      CUTE_UNROLL
      for (int mm = 0; mm < MM; ++mm) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int r = 2 * mm + h;
          CUTE_UNROLL
          for (int mn = 0; mn < MN; ++mn) {
            CUTE_UNROLL
            for (int j = 0; j < NV; ++j) {
              const int n = n0 + get<1>(tCcD(make_coord(make_coord(0, h, j), mm, mn)));
              CUTE_UNROLL
              for (int c = 0; c < 2; ++c)
                if (!kRagged || n + c < N) mx[r] = fmaxf(mx[r], acc(make_coord(make_coord(c, h, j), mm, mn)));
            }
          }
          // The target logit, only for a row whose target lies in the tile's
          // columns (one row tile in V / BN): the element test of the register
          // epilogue, out of the hot path.
          if (yt[r] >= n0 && yt[r] < n0 + Cfg::BN) {
            CUTE_UNROLL
            for (int mn = 0; mn < MN; ++mn) {
              CUTE_UNROLL
              for (int j = 0; j < NV; ++j) {
                const int n = n0 + get<1>(tCcD(make_coord(make_coord(0, h, j), mm, mn)));
                CUTE_UNROLL
                for (int c = 0; c < 2; ++c)
                  if (n + c == yt[r]) zt[r] = acc(make_coord(make_coord(c, h, j), mm, mn));
              }
            }
          }
        }
      }
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      }
      CUTE_UNROLL
      for (int mm = 0; mm < MM; ++mm) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int r = 2 * mm + h;
          CUTE_UNROLL
          for (int mn = 0; mn < MN; ++mn) {
            CUTE_UNROLL
            for (int j = 0; j < NV; ++j) {
              const int n = n0 + get<1>(tCcD(make_coord(make_coord(0, h, j), mm, mn)));
              const float z0 = acc(make_coord(make_coord(0, h, j), mm, mn));
              const float z1 = acc(make_coord(make_coord(1, h, j), mm, mn));
              const float e0 = exp2f((z0 - mx[r]) * kLog2e), e1 = exp2f((z1 - mx[r]) * kLog2e);
              if (!kRagged || n < N) se[r] += e0, sz[r] += z0;
              if (!kRagged || n + 1 < N) se[r] += e1, sz[r] += z1;
              // Every value, also past M or N: the tensor map clips the store.
              if constexpr (kOnePass) {
                put_pair(make_coord(make_coord(0, h, j), mm, mn), e0, e1);
              } else {
                acc(make_coord(make_coord(0, h, j), mm, mn)) = e0;
                acc(make_coord(make_coord(1, h, j), mm, mn)) = e1;
              }
            }
          }
        }
      }
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) {
        se[r] += __shfl_xor_sync(0xffffffffu, se[r], 1);
        sz[r] += __shfl_xor_sync(0xffffffffu, sz[r], 1);
        zt[r] += __shfl_xor_sync(0xffffffffu, zt[r], 1);  // one lane of the quad holds it, the others add 0
        se[r] += __shfl_xor_sync(0xffffffffu, se[r], 2);
        sz[r] += __shfl_xor_sync(0xffffffffu, sz[r], 2);
        zt[r] += __shfl_xor_sync(0xffffffffu, zt[r], 2);
        const int m = row_of(r / 2, r % 2);
        if ((threadIdx.x & 3) == 0 && m < M)
          e.stats[int64_t(m) * e.ld_stats + w.tn] = make_float4(mx[r], se[r], sz[r], zt[r]);
      }
    };
    if (n0 + Cfg::BN <= N)
      rows(std::false_type{});
    else
      rows(std::true_type{});
    if constexpr (kOnePass)
      tma_tile_store(P, sc, mma_tid, w, 0);
    else
      store_passes();
  }

  // Epilogue of one consumer thread over its accumulator fragment. sc: the
  // warpgroup's shared C tile (EPI_TMA), else null.
  template <class Accum>
  static __device__ __forceinline__ void epilogue(const Params& P, Accum& acc, int mma_tid, const Unit& w,
                                                  cutlass::bfloat16_t* sc) {
    TiledMma tiled_mma;
    auto thr = tiled_mma.get_thread_slice(mma_tid);
    Tensor cD = make_identity_tensor(make_shape(Int<Cfg::BM>{}, Int<Cfg::BN>{}));  // (BM,BN) -> (m,n)
    Tensor tCcD = thr.partition_C(cD);                                              // (MMA,MMA_M,MMA_N)
    static_assert(rank(decltype(acc.layout()){}) == 3 && size<0, 0>(decltype(acc.layout()){}) == 2 &&
                      size<0, 1>(decltype(acc.layout()){}) == 2,
                  "sm90 accumulator fragment ((2,2,N/8),MMA_M,MMA_N): value pairs are adjacent columns");
    const WgEpilogue& e = P.epi;
    const int m0 = w.tm * Cfg::BM, n0 = w.tn * Cfg::BN;
    const int M = P.M, N = P.N;
    const int64_t ldc = e.ldc;
    if constexpr (Cfg::EPI_TMA) {
      // Only the bf16 epilogues, only through the shared tile (the launcher
      // runs the register-epilogue configuration for everything else).
      epilogue_tma(P, acc, mma_tid, w, sc);
      return;
    }

    if (e.kind == WgEpilogue::logits) {
      constexpr float kLog2e = 1.4426950408889634f;
      const float cap = e.softcap, inv_cap = cap > 0.f ? 1.f / cap : 0.f;
      // Softcap in place in the fragment, then store pairs.
      constexpr int NV = size<0, 2>(decltype(acc.layout()){});
      CUTE_UNROLL
      for (int mm = 0; mm < size<1>(acc); ++mm) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int m = m0 + get<0>(tCcD(make_coord(make_coord(0, h, 0), mm, 0)));
          float mx = -INFINITY;
          CUTE_UNROLL
          for (int mn = 0; mn < size<2>(acc); ++mn) {
            CUTE_UNROLL
            for (int j = 0; j < NV; ++j) {
              const int n = n0 + get<1>(tCcD(make_coord(make_coord(0, h, j), mm, mn)));
              CUTE_UNROLL
              for (int c = 0; c < 2; ++c) {
                float& v = acc(make_coord(make_coord(c, h, j), mm, mn));
                if (cap > 0.f) v = cap * tanhf(v * inv_cap);
                if (n + c < N) mx = fmaxf(mx, v);
              }
              const float z0 = acc(make_coord(make_coord(0, h, j), mm, mn));
              const float z1 = acc(make_coord(make_coord(1, h, j), mm, mn));
              if (m < M) {
                float* p = static_cast<float*>(e.C) + int64_t(m) * ldc + n;
                if (n + 1 < N && e.pairs) {
                  __stcs(reinterpret_cast<float2*>(p), make_float2(z0, z1));  // streaming: read once, by the row pass
                } else {
                  if (n < N) p[0] = z0;
                  if (n + 1 < N) p[1] = z1;
                }
              }
            }
          }
          if (e.stats) {
            // Row statistics over this tile's columns: the four lanes of a quad
            // hold one row; fixed xor-butterfly order, so bitwise reproducible.
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float se = 0.f, sz = 0.f;
            CUTE_UNROLL
            for (int mn = 0; mn < size<2>(acc); ++mn) {
              CUTE_UNROLL
              for (int j = 0; j < NV; ++j) {
                const int n = n0 + get<1>(tCcD(make_coord(make_coord(0, h, j), mm, mn)));
                CUTE_UNROLL
                for (int c = 0; c < 2; ++c) {
                  if (n + c < N) {
                    const float v = acc(make_coord(make_coord(c, h, j), mm, mn));
                    se += exp2f((v - mx) * kLog2e);  // one MUFU.EX2 (expf costs a range reduction more)
                    sz += v;
                  }
                }
              }
            }
            se += __shfl_xor_sync(0xffffffffu, se, 1);
            sz += __shfl_xor_sync(0xffffffffu, sz, 1);
            se += __shfl_xor_sync(0xffffffffu, se, 2);
            sz += __shfl_xor_sync(0xffffffffu, sz, 2);
            if ((threadIdx.x & 3) == 0 && m < M) e.stats[int64_t(m) * e.ld_stats + w.tn] = make_float4(mx, se, sz, 0.f);
          }
        }
      }
      return;
    }

    if (e.kind == WgEpilogue::logits_exp16) {
      // Per row of the fragment: softcap in place, the tile max and the target
      // logit over the quad that holds the row (fixed xor-butterfly order),
      // then e = exp(z - max) stored as bf16 pairs and summed in fp32.
      constexpr float kLog2e = 1.4426950408889634f;
      const float cap = e.softcap, inv_cap = cap > 0.f ? 1.f / cap : 0.f;
      constexpr int NV = size<0, 2>(decltype(acc.layout()){});
      CUTE_UNROLL
      for (int mm = 0; mm < size<1>(acc); ++mm) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int m = m0 + get<0>(tCcD(make_coord(make_coord(0, h, 0), mm, 0)));
          const int64_t yt = m < M ? e.y[m] : -1;
          float mx = -INFINITY, zt = 0.f;
          CUTE_UNROLL
          for (int mn = 0; mn < size<2>(acc); ++mn) {
            CUTE_UNROLL
            for (int j = 0; j < NV; ++j) {
              const int n = n0 + get<1>(tCcD(make_coord(make_coord(0, h, j), mm, mn)));
              CUTE_UNROLL
              for (int c = 0; c < 2; ++c) {
                float& v = acc(make_coord(make_coord(c, h, j), mm, mn));
                if (cap > 0.f) v = cap * tanhf(v * inv_cap);
                if (n + c < N) mx = fmaxf(mx, v);
                if (n + c == yt) zt = v;
              }
            }
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          float se = 0.f, sz = 0.f;
          CUTE_UNROLL
          for (int mn = 0; mn < size<2>(acc); ++mn) {
            CUTE_UNROLL
            for (int j = 0; j < NV; ++j) {
              const int n = n0 + get<1>(tCcD(make_coord(make_coord(0, h, j), mm, mn)));
              const float z0 = acc(make_coord(make_coord(0, h, j), mm, mn));
              const float z1 = acc(make_coord(make_coord(1, h, j), mm, mn));
              const float e0 = exp2f((z0 - mx) * kLog2e), e1 = exp2f((z1 - mx) * kLog2e);
              if (n < N) se += e0, sz += z0;
              if (n + 1 < N) se += e1, sz += z1;
              if (m < M && e.C) {
                __nv_bfloat16* p = static_cast<__nv_bfloat16*>(e.C) + int64_t(m) * ldc + n;
                if (n + 1 < N && e.pairs) {
                  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(e0, e1);
                } else {
                  if (n < N) p[0] = __float2bfloat16_rn(e0);
                  if (n + 1 < N) p[1] = __float2bfloat16_rn(e1);
                }
              }
            }
          }
          se += __shfl_xor_sync(0xffffffffu, se, 1);
          sz += __shfl_xor_sync(0xffffffffu, sz, 1);
          zt += __shfl_xor_sync(0xffffffffu, zt, 1);  // one lane of the quad holds it, the others add 0
          se += __shfl_xor_sync(0xffffffffu, se, 2);
          sz += __shfl_xor_sync(0xffffffffu, sz, 2);
          zt += __shfl_xor_sync(0xffffffffu, zt, 2);
          if ((threadIdx.x & 3) == 0 && m < M) e.stats[int64_t(m) * e.ld_stats + w.tn] = make_float4(mx, se, sz, zt);
        }
      }
      return;
    }

    if (e.kind == WgEpilogue::accumulate && !e.first) {
      // Owning read-modify-write. Loads first, a batch at a time, then the
      // adds and stores: a load after a store to a pointer that may alias it
      // cannot be hoisted by the compiler, and load-add-store element by
      // element paid one DRAM round trip per pair (measured: a whole-dW
      // read-modify-write took 4-5 ms, about 0.9 TB/s, at the Llama head).
      // Streaming hints (.cs): dW is touched once per chunk; keep L2 for the
      // operands.
      constexpr int kBatch = 16;  // pairs in flight per thread
      static_assert(size(decltype(acc.layout()){}) % (2 * kBatch) == 0, "whole batches");
      CUTE_UNROLL
      for (int i0 = 0; i0 < size(acc); i0 += 2 * kBatch) {
        float2 old[kBatch];
        CUTE_UNROLL
        for (int g = 0; g < kBatch; ++g) {
          const auto c = tCcD(i0 + 2 * g);
          const int m = m0 + get<0>(c), n = n0 + get<1>(c);
          old[g] = make_float2(0.f, 0.f);
          if (m < M && n < N) {
            const float* p = static_cast<const float*>(e.C) + int64_t(m) * ldc + n;
            if (n + 1 < N && e.pairs) {
              old[g] = __ldcs(reinterpret_cast<const float2*>(p));
            } else {
              old[g].x = __ldcs(p);
              if (n + 1 < N) old[g].y = __ldcs(p + 1);
            }
          }
        }
        CUTE_UNROLL
        for (int g = 0; g < kBatch; ++g) {
          const auto c = tCcD(i0 + 2 * g);
          const int m = m0 + get<0>(c), n = n0 + get<1>(c);
          if (m < M && n < N) {
            float* p = static_cast<float*>(e.C) + int64_t(m) * ldc + n;
            const float2 v = make_float2(old[g].x + acc(i0 + 2 * g), old[g].y + acc(i0 + 2 * g + 1));
            if (n + 1 < N && e.pairs) {
              __stcs(reinterpret_cast<float2*>(p), v);
            } else {
              __stcs(p, v.x);
              if (n + 1 < N) __stcs(p + 1, v.y);
            }
          }
        }
      }
      return;
    }

    CUTE_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const auto c = tCcD(i);
      const int m = m0 + get<0>(c), n = n0 + get<1>(c);
      if (m >= M || n >= N) continue;
      const bool two = n + 1 < N;           // the second column is in range
      const bool pair = two && e.pairs;     // ... and one 8-byte access can do both
      const float v0 = acc(i), v1 = acc(i + 1);
      const int64_t off = int64_t(m) * ldc + n;
      switch (e.kind) {
        case WgEpilogue::store_f32: {
          float* p = static_cast<float*>(e.C) + off;
          if (pair) {
            *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
          } else {
            p[0] = v0;
            if (two) p[1] = v1;
          }
          break;
        }
        case WgEpilogue::accumulate_in: {
          // The accumulators already hold dW's running sum (load_accumulators).
          float* p = static_cast<float*>(e.C) + off;
          if (pair) {
            __stcs(reinterpret_cast<float2*>(p), make_float2(v0, v1));
          } else {
            __stcs(p, v0);
            if (two) __stcs(p + 1, v1);
          }
          break;
        }
        case WgEpilogue::store_bf16: {
          __nv_bfloat16* p = static_cast<__nv_bfloat16*>(e.C) + off;
          if (pair) {
            *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
          } else {
            p[0] = __float2bfloat16_rn(v0);
            if (two) p[1] = __float2bfloat16_rn(v1);
          }
          break;
        }
        case WgEpilogue::accumulate: {
          float* p = static_cast<float*>(e.C) + off;
          if (pair) {
            float2 o = e.first ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(p);
            *reinterpret_cast<float2*>(p) = e.first ? make_float2(v0, v1) : make_float2(o.x + v0, o.y + v1);
          } else {
            p[0] = e.first ? v0 : p[0] + v0;
            if (two) p[1] = e.first ? v1 : p[1] + v1;
          }
          break;
        }
        case WgEpilogue::atomic: {
          float* p = static_cast<float*>(e.C) + off;
          if (pair) {
            // One vector reduction for both columns (SASS REDG.E.ADD.F32x2);
            // atomicAdd(float2*) compiled to two scalar REDs with nvcc 13.0.
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v0), "f"(v1) : "memory");
          } else {
            atomicAdd(p, v0);
            if (two) atomicAdd(p + 1, v1);
          }
          break;
        }
        case WgEpilogue::partial: {
          float* p = static_cast<float*>(e.C) + int64_t(w.split) * e.split_stride + off;
          if (pair) {
            *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
          } else {
            p[0] = v0;
            if (two) p[1] = v1;
          }
          break;
        }
        default: break;
      }
    }
  }
};

template <class Cfg, Major AM, Major BMj>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    gemm_wgmma_kernel(const __grid_constant__ typename Kernel<Cfg, AM, BMj>::Params P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K_ = Kernel<Cfg, AM, BMj>;
  using Mainloop = typename K_::Mainloop;
  using Pipeline = typename K_::Pipeline;
  using PipelineState = typename K_::PipelineState;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K_::SharedStorage*>(smem_raw);

  const int warp = threadIdx.x / 32;
  const int warp_group = threadIdx.x / 128;
  const uint32_t rank = cute::block_rank_in_cluster();
  if (warp == 0 && cute::elect_one_sync()) {
    Mainloop::prefetch_tma_descriptors(P.mainloop);
    if constexpr (Cfg::EPI_TMA) cute::prefetch_tma_descriptor(&P.tma_c);
  }

  typename Pipeline::Params pp;
  pp.role = warp_group == 0 ? (warp == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::NonParticipant)
                            : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = K_::kStageConsumers;
  pp.transaction_bytes = P.mainloop.tma_transaction_bytes;
  Pipeline pipeline(ss.pipeline, pp, typename K_::ClusterShape{});
  typename K_::OrderBarrier::Params op;
  op.group_id = warp_group > 0 ? uint32_t(warp_group - 1) : 0u;
  op.group_size = 128;
  typename K_::OrderBarrier order(ss.order, op);
  // The barriers' initialisation must be visible to every CTA of the cluster.
  if constexpr (Cfg::CLUSTER > 1) {
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }

  Mainloop collective;
  auto load_inputs = collective.load_init(make_shape(P.M, P.N, P.K, 1), P.mainloop);
  const int units = P.tiles_mc * P.tiles_nc * P.splits;
  // Grid (clusters x CM, CN): blockIdx.y is the CTA's place along N inside its
  // cluster, so a cluster is numbered by blockIdx.x / CM.
  const int cluster = blockIdx.x / Cfg::CLUSTER_M, clusters = gridDim.x / Cfg::CLUSTER_M;
  // The CTA's place in its cluster (constants 0 along a mode of extent 1).
  const int rank_m = Cfg::CLUSTER_M == 1 ? 0 : int(rank) % Cfg::CLUSTER_M;
  const int rank_n = Cfg::CLUSTER_N == 1 ? 0 : int(rank) / Cfg::CLUSTER_M;

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<40>();
    if (warp == 0) {
      PipelineState write = cutlass::make_producer_start_state<Pipeline>();
      const int lane = threadIdx.x % 32;
      for (int u = cluster; u < units; u += clusters) {
        const auto w = K_::unit(P, u, rank_m, rank_n);
        if (w.kt_count == 0) continue;
        auto k_iter = cute::make_coord_iterator(w.kt0, shape<3>(get<0>(load_inputs)));
        collective.load(P.mainloop, pipeline, write, load_inputs, make_coord(w.tm, w.tn, _, 0), k_iter, w.kt_count,
                        lane, rank, ss.tensors);
        write.advance(w.kt_count);
      }
      collective.load_tail(pipeline, write);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<232>();
    // Cooperative: the 256 consumer threads index one tiled MMA. Ping-pong:
    // each warpgroup is its own MMA and takes every other unit of the CTA.
    const int mma_tid = Cfg::PINGPONG ? threadIdx.x % 128 : threadIdx.x - 128;
    const int my_parity = warp_group - 1;
    // EPI_TMA: this warpgroup's shared C tile (null otherwise).
    cutlass::bfloat16_t* sc = nullptr;
    if constexpr (Cfg::EPI_TMA) sc = ss.c.data() + (Cfg::PINGPONG ? (warp_group - 1) * K_::kCElems : 0);
    PipelineState read;
    typename K_::TiledMma tiled_mma;
    int seq = 0;
    for (int u = cluster; u < units; u += clusters, ++seq) {
      const auto w = K_::unit(P, u, rank_m, rank_n);
      if (Cfg::PINGPONG && (seq & 1) != my_parity) {
        read.advance(w.kt_count);  // the other warpgroup's stages
        continue;
      }
      Tensor acc = partition_fragment_C(tiled_mma, make_shape(Int<Cfg::BM>{}, Int<Cfg::BN>{}));  // (MMA,MMA_M,MMA_N)
      // Owning dW after the first chunk: the running sum into the accumulators
      // first (ping-pong: while the other warpgroup's mainloop runs).
      const bool onto = !Cfg::EPI_TMA && P.epi.kind == WgEpilogue::accumulate_in && !P.epi.first;
      if (onto) K_::load_accumulators(P, acc, mma_tid, w);
      // Ping-pong: wait for the other warpgroup to have issued its mainloop
      // (also for an empty unit, so the turns stay in step). Besides taking
      // turns on the tensor cores, this keeps a warpgroup at most one pass of
      // the ring ahead of the stages it waits on (the full-barrier wait is by
      // phase parity).
      if (w.kt_count > 0) {
        if constexpr (Cfg::PINGPONG) order.wait();
        if (onto)
          K_::mma_onto(pipeline, read, acc, w.kt_count, mma_tid, ss.tensors);
        else
          collective.mma(pipeline, read, acc, w.kt_count, mma_tid, ss.tensors, P.mainloop);
        if constexpr (Cfg::PINGPONG) order.arrive();
        collective.mma_tail(pipeline, read, w.kt_count);
        read.advance(w.kt_count);
      } else {
        if constexpr (Cfg::PINGPONG) {
          order.wait();
          order.arrive();
        }
        if (!onto) clear(acc);  // an empty k range (a split past K) contributes zeros
      }
      if (K_::in_range(P, w)) K_::epilogue(P, acc, mma_tid, w, sc);
    }
    // EPI_TMA: the shared tile stays until the warpgroup's last store has read it.
    if constexpr (Cfg::EPI_TMA) {
      if (mma_tid == 0) tma_store_wait<0>();
    }
  }
#endif
}

}  // namespace wg

// Active clusters of one instantiation on the current device (cached per device).
template <class Kern>
int wgmma_max_clusters(Kern kernel, int cluster_m, int cluster_n, size_t smem, int threads) {
  static int cache[64] = {};
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && cache[dev] > 0) return cache[dev];
  DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(cluster_m), unsigned(cluster_n), 1);
  cfg.blockDim = dim3(unsigned(threads), 1, 1);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster_m);
  attr[0].val.clusterDim.y = unsigned(cluster_n);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  DETFUSE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  if (n <= 0) throw Error("wgmma engine: no cluster of this kernel fits on the device");
  if (dev < 64) cache[dev] = n;
  return n;
}

template <class Cfg, Major AM, Major BMj>
void launch_gemm_wgmma(const GemmParams& p, const WgEpilogue& epi, int group_m, cudaStream_t stream) {
  using K_ = wg::Kernel<Cfg, AM, BMj>;
  if (p.M <= 0 || p.N <= 0) return;
  auto aligned16 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  if (!aligned16(p.A) || !aligned16(p.B) || p.lda % 8 != 0 || p.ldb % 8 != 0)
    throw invalid_argument("wgmma engine: TMA needs 16-byte aligned operand bases and leading dimensions (multiples of 8)");
  if (p.K <= 0) throw invalid_argument("wgmma engine: K must be positive (a TMA tensor cannot be empty)");

  using StrideA = typename K_::Mainloop::StrideA;
  using StrideB = typename K_::Mainloop::StrideB;
  StrideA dA{};
  StrideB dB{};
  if constexpr (AM == Major::K) cute::get<0>(dA) = p.lda; else cute::get<1>(dA) = p.lda;
  if constexpr (BMj == Major::K) cute::get<0>(dB) = p.ldb; else cute::get<1>(dB) = p.ldb;
  typename K_::Mainloop::Arguments args{static_cast<const cutlass::bfloat16_t*>(p.A), dA,
                                        static_cast<const cutlass::bfloat16_t*>(p.B), dB};
  typename K_::Params P;
  P.mainloop = K_::Mainloop::to_underlying_arguments(cute::make_shape(p.M, p.N, p.K, 1), args, nullptr);
  P.M = p.M;
  P.N = p.N;
  P.K = p.K;
  P.splits = p.splits > 0 ? p.splits : 1;
  P.k_per_split = p.k_per_split > 0 ? p.k_per_split : (p.K + Cfg::BK - 1) / Cfg::BK * Cfg::BK;
  if (P.k_per_split % Cfg::BK != 0) throw Error("wgmma engine: k_per_split must be a multiple of BK");
  P.tiles_m = (p.M + Cfg::BM - 1) / Cfg::BM;
  P.tiles_n = (p.N + Cfg::BN - 1) / Cfg::BN;
  P.tiles_mc = (P.tiles_m + Cfg::CLUSTER_M - 1) / Cfg::CLUSTER_M;
  P.tiles_nc = (P.tiles_n + Cfg::CLUSTER_N - 1) / Cfg::CLUSTER_N;
  int gm = group_m < 1 ? P.tiles_m : group_m;
  P.group_mc = std::max(1, std::min(P.tiles_mc, (gm + Cfg::CLUSTER_M - 1) / Cfg::CLUSTER_M));
  P.epi = epi;
  // Column pairs go out as one 8-byte access when every row start is 8-byte
  // aligned: element offsets even, base aligned to the element pair.
  const size_t pair_bytes = epi.kind == WgEpilogue::store_bf16 || epi.kind == WgEpilogue::logits_exp16 ? 4 : 8;
  P.epi.pairs = epi.ldc % 2 == 0 && epi.split_stride % 2 == 0 &&
                reinterpret_cast<uintptr_t>(epi.C) % pair_bytes == 0;
  // EPI_TMA: the kernel stores bf16 through the shared tile and a TMA store
  // only; everything else runs the register-epilogue configuration (same bits).
  if constexpr (Cfg::EPI_TMA) {
    const bool bf16_out = epi.kind == WgEpilogue::store_bf16 || epi.kind == WgEpilogue::logits_exp16;
    if (!bf16_out || !wg_tma_store_ok(epi.C, epi.ldc, p.N)) {
      launch_gemm_wgmma<typename WgTmaFallback<Cfg>::type, AM, BMj>(p, epi, group_m, stream);
      return;
    }
    // C as (N, M) with the exact extents: the hardware clips at both.
    const cuuint64_t dims[2] = {cuuint64_t(p.N), cuuint64_t(p.M)};
    const cuuint64_t strides[1] = {cuuint64_t(epi.ldc) * sizeof(__nv_bfloat16)};
    const cuuint32_t box[2] = {cuuint32_t(K_::kTmaBoxN), cuuint32_t(Cfg::BM)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = cutlass::call_cuTensorMapEncodeTiled(
        &P.tma_c, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, epi.C, dims, strides, box, elem_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      throw Error("wgmma engine: cuTensorMapEncodeTiled failed for the epilogue's C (error " + std::to_string(int(r)) +
                  ", M " + std::to_string(p.M) + ", N " + std::to_string(p.N) + ", ldc " + std::to_string(epi.ldc) + ")");
  }

  auto kernel = wg::gemm_wgmma_kernel<Cfg, AM, BMj>;
  const int clusters = wgmma_max_clusters(kernel, Cfg::CLUSTER_M, Cfg::CLUSTER_N, K_::smem_bytes, Cfg::THREADS);
  const int64_t units = int64_t(P.tiles_mc) * P.tiles_nc * P.splits;
  if (units > INT32_MAX) throw invalid_argument("wgmma engine: too many tiles for one launch");
  const int grid_clusters = int(std::min<int64_t>(units, clusters));

  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(grid_clusters * Cfg::CLUSTER_M), unsigned(Cfg::CLUSTER_N), 1);
  cfg.blockDim = dim3(unsigned(Cfg::THREADS), 1, 1);
  cfg.dynamicSmemBytes = K_::smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(Cfg::CLUSTER_M);
  attr[0].val.clusterDim.y = unsigned(Cfg::CLUSTER_N);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  DETFUSE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, P));
  DETFUSE_CHECK_LAUNCH();
}

#endif  // DETFUSE_WGMMA_IMPL

}  // namespace detfuse::flce
