// One CUTLASS 4.2 sm90 GEMM, entirely CUTLASS's: CollectiveBuilder mainloop
// (TMA, warp-specialized ping-pong or cooperative) and CollectiveBuilder
// epilogue (TMA store), GemmUniversal with the persistent tile scheduler,
// GemmUniversalAdapter. Only the cutlass_*.cu files of this folder include it
// (sm_90a, CUTLASS headers); see cutlass_gemms.h for the contract.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

#include "experiments/gemm_cutlass_probe/cutlass_gemms.h"

namespace detfuse::probe {

// Ping-pong: TMA warp-specialized ping-pong mainloop, TmaWarpSpecialized epilogue.
struct PingPong {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};
// Cooperative: both consumer warpgroups on one tile.
struct Cooperative {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};

template <class Sched, class TileShape, class ClusterShape, class LayoutB>
struct CutlassGemm {
  using T = cutlass::bfloat16_t;
  static constexpr int kAlign = 16 / sizeof(T);  // 8 elements: 16-byte TMA accesses
  using LayoutA = cutlass::layout::RowMajor;     // A [M, K], K contiguous
  using LayoutD = cutlass::layout::RowMajor;     // D [M, N], N contiguous

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD, kAlign,  // no C operand (beta 0)
      T, LayoutD, kAlign, typename Sched::Epilogue>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutA, kAlign, T, LayoutB, kAlign, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Sched::Kernel>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

// A packed stride for a matrix of extents (rows, cols) of mode 0 and mode 1:
// whichever of the two strides is not the static 1 is the other extent.
template <class Stride>
Stride packed_stride(int rows, int cols) {
  Stride s{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(cute::get<1>(s))>>::value)
    cute::get<0>(s) = cols;  // mode 1 contiguous
  else
    cute::get<1>(s) = rows;  // mode 0 contiguous
  cute::get<2>(s) = int64_t(rows) * cols;
  return s;
}

inline const char* status_name(cutlass::Status st) { return cutlass::cutlassGetStatusString(st); }

template <class G>
CutlassLaunch make_cutlass_launch(const CutlassArgs& a, std::string* why) {
  using Gemm = typename G::Gemm;
  using Kernel = typename G::GemmKernel;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementD = typename Kernel::ElementD;
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = cute::make_shape(a.M, a.N, a.K, 1);
  args.mainloop.ptr_A = static_cast<const ElementA*>(a.A);
  args.mainloop.dA = packed_stride<typename Kernel::StrideA>(a.M, a.K);
  args.mainloop.ptr_B = static_cast<const ElementB*>(a.B);
  args.mainloop.dB = packed_stride<typename Kernel::StrideB>(a.N, a.K);
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = packed_stride<typename Kernel::StrideC>(a.M, a.N);
  args.epilogue.ptr_D = static_cast<ElementD*>(a.D);
  args.epilogue.dD = packed_stride<typename Kernel::StrideD>(a.M, a.N);
  int dev = 0;
  cudaGetDevice(&dev);
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  using RO = cutlass::gemm::kernel::detail::RasterOrderOptions;  // tile_scheduler_detail.hpp
  args.scheduler.raster_order = a.raster == Raster::along_m   ? RO::AlongM
                                : a.raster == Raster::along_n ? RO::AlongN
                                                              : RO::Heuristic;
  args.scheduler.max_swizzle_size = a.swizzle;

  auto gemm = std::make_shared<Gemm>();
  cutlass::Status st = gemm->can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    *why = std::string("can_implement: ") + status_name(st);
    return {};
  }
  const size_t ws_bytes = Gemm::get_workspace_size(args);
  std::shared_ptr<void> ws;
  if (ws_bytes > 0) {
    void* p = nullptr;
    if (cudaMalloc(&p, ws_bytes) != cudaSuccess) {
      *why = "workspace allocation failed";
      return {};
    }
    ws.reset(p, [](void* q) { cudaFree(q); });
  }
  st = gemm->initialize(args, ws.get(), a.stream);
  if (st != cutlass::Status::kSuccess) {
    *why = std::string("initialize: ") + status_name(st);
    return {};
  }
  cudaStream_t stream = a.stream;
  return [gemm, ws, stream] {
    const cutlass::Status s = gemm->run(stream);
    if (s != cutlass::Status::kSuccess) throw std::runtime_error(std::string("CUTLASS run: ") + status_name(s));
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUTLASS launch: ") + cudaGetErrorString(e));
  };
}

// The two operand layouts of one configuration.
template <class Sched, class TileShape, class ClusterShape>
CutlassConfig cutlass_config(const char* name) {
  return {name, &make_cutlass_launch<CutlassGemm<Sched, TileShape, ClusterShape, cutlass::layout::ColumnMajor>>,
          &make_cutlass_launch<CutlassGemm<Sched, TileShape, ClusterShape, cutlass::layout::RowMajor>>};
}

}  // namespace detfuse::probe
