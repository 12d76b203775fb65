// Running variants on a slice of the GPU's SMs (DESIGN.md, "Determinism
// levels", sm_count; the contention study's SM-count axis): a CUDA green
// context over cuDevSmResourceSplitByCount's slice of K SMs, and a stream in
// it on which the measurers launch every variant, cuBLASLt included.
//
// The driver entry points are looked up at run time
// (cudaGetDriverEntryPointByVersion), so the binaries link no libcuda and
// start on a machine without a GPU; nothing here runs until --sms is given.
//
// While a slice is installed (set_measure_slice), measure_launch() runs a
// launch on the slice's stream, ordered after the work already queued on the
// legacy default stream and before the work queued there after it (events in
// both directions), so the measurers' poisoning, L2 flushes, CUDA-event
// timers, digests and cudaDeviceSynchronize calls on the default stream see
// the slice's work exactly as they see a launch on the default stream.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

namespace detfuse::tuner {

// What a request for K SMs becomes on a device of `device_sms` SMs whose
// green-context partitions hold at least `min_partition` SMs in multiples of
// `alignment` (cuDeviceGetDevResource: minSmPartitionSize,
// smCoscheduledAlignment; Hopper: 8 and 8).
struct SmSlicePlan {
  int requested = 0;
  int granted = 0;       // max(min_partition, K rounded up to alignment), or the whole device
  bool whole_device = false;  // K (rounded) reaches the device's SM count: no green context
  std::string note;      // the rounding, in words, when granted != requested
};

// Throws invalid_argument (exit 2 from the CLI) naming --sms when K < 1 or
// K > device_sms. Pure: tested on the CPU.
SmSlicePlan plan_sm_slice(int requested, int device_sms, int min_partition, int alignment);

// The CLI's check before any GPU work: K >= 1 (the device's count is checked
// by plan_sm_slice in the worker).
void check_sms_argument(int requested);

class SmSlice {
 public:
  // A green context of the planned SM count on device `ordinal` (the current
  // device) and a stream in it. Throws detfuse::Error (runtime) when the
  // driver has no green contexts or refuses the split, saying so; K out of
  // range is invalid_argument. With a whole-device plan, no green context is
  // made: stream() is the legacy default stream.
  SmSlice(int ordinal, int requested);
  ~SmSlice();
  SmSlice(const SmSlice&) = delete;
  SmSlice& operator=(const SmSlice&) = delete;

  const SmSlicePlan& plan() const { return plan_; }
  int sm_count() const { return plan_.granted; }  // SMs the slice's work runs on
  cudaStream_t stream() const { return stream_; }
  // Runs `launch(stream())` ordered with the legacy default stream (see above).
  void launch(const std::function<void(cudaStream_t)>& launch) const;

 private:
  struct Api;
  SmSlicePlan plan_;
  std::unique_ptr<Api> api_;
  void* green_ = nullptr;  // CUgreenCtx
  cudaStream_t stream_ = nullptr;
  cudaEvent_t before_ = nullptr, after_ = nullptr;
};

// The slice the measurers launch on in this process (nullptr: the whole
// device, the legacy default stream). The worker installs it once.
void set_measure_slice(std::shared_ptr<SmSlice> slice);
const SmSlice* measure_slice();
// launch(s) on the installed slice's stream, or launch(nullptr) without one.
void measure_launch(const std::function<void(cudaStream_t)>& launch);

}  // namespace detfuse::tuner
