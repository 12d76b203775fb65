// The measuring loops every family's GPU case shares (tuner/flce_gpu.h,
// tuner/attention_gpu.h): K repeats with a digest of every output, and timing
// (warm-up, L2 flushed before each repetition, CUDA events around the launch
// only, every sample kept, SM clocks seen, peak extra memory). A case supplies
// what a launch, a poisoning and a digest of its outputs are.
#pragma once

#include <cstddef>
#include <functional>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "db/records.h"
#include "kernels/common/buffer.h"
#include "kernels/common/digest.h"
#include "kernels/common/error.h"
#include "kernels/common/problem.h"
#include "tuner/family.h"
#include "tuner/stats.h"

namespace detfuse::tuner {

using NamedDigests = std::vector<std::pair<std::string, Digest>>;

// A measurer's prepare: release what the last problem held, then build the
// new one; when host memory runs out (the seeded inputs and the float64
// reference live there), release again and throw an Error naming `what`.
template <class Release, class Build>
void prepare_or_release(const std::string& what, Release&& release, Build&& build) {
  release();
  try {
    build();
  } catch (const std::bad_alloc&) {
    release();
    throw Error("out of host memory preparing " + what + " (seeded inputs and the float64 reference)");
  }
}

// One output of a case as the device holds it: for the run-to-run spread.
struct OutputView {
  std::string name;
  const void* ptr = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
};

// XXH3-128 of device bytes read back through a reused pinned buffer (several
// times faster than pageable copies for a multi-GiB gradient).
class DeviceDigester {
 public:
  DeviceDigester() = default;
  ~DeviceDigester();
  DeviceDigester(const DeviceDigester&) = delete;
  DeviceDigester& operator=(const DeviceDigester&) = delete;
  Digest digest(const void* device_ptr, size_t bytes);

 private:
  void* pinned_ = nullptr;
  size_t bytes_ = 0;
};

// True when the CUDA context of the current device is unusable after an error
// (a sticky error: illegal address, launch failure...): the process must stop.
bool cuda_context_lost();

// Free device memory now (cudaMemGetInfo).
size_t free_device_memory();

// K repeats of poison_and_run(), each followed by digest_outputs(); fills d
// (digests of every repeat, distinct counts, level run_to_run or none) and,
// when output_views is given, each output's run-to-run spread against repeat 0
// computed on the device (tuner/spread.h; d.spread left empty when repeat 0's
// copy does not fit in device memory). False when stop() asked to abandon;
// `cap_spent` ends the repeats after at least 2.
bool repeat_with_digests(const std::function<void()>& poison_and_run, const std::function<NamedDigests()>& digest_outputs,
                         const std::function<std::vector<OutputView>()>& output_views, int repeats,
                         const std::function<bool()>& stop, db::Determinism& d, const std::function<bool()>& cap_spent);

// Times launch(): one timed warm-up gives the estimate, more warm-up per
// plan_warmup, then plan_repetitions(estimate, policy) timed repetitions, each
// after flush_l2(). free0: free device memory before the caller allocated the
// launch's workspace of ws_bytes (the peak extra memory is the larger of the
// two). `uncapped` receives the repetitions without policy.cap_ms. False when
// stop() asked to abandon.
bool time_launches(const std::function<void()>& launch, const std::function<void()>& flush_l2, int device_ordinal,
                   size_t free0, size_t ws_bytes, double flops, const RepetitionPolicy& policy,
                   const std::function<bool()>& stop, db::Timing& t, int* uncapped);

// A GPU measurer's measure(), the same for every family: from the start the
// variant's soft cap (ctl.time_cap_s) runs; check() against the reference
// (never cut; incorrect ends it), ctl.repeats repeats with digests (cut by the
// cap past 2), then timing of `timed` (cut past 5 repetitions). A lost CUDA
// context gives `crashed` with context_lost; other exceptions `error`.
VariantOutcome measure_case(GpuCase& c, const Variant& v, Mode timed, const MeasureControl& ctl,
                            const RepetitionPolicy& reps, const std::function<db::Correctness()>& check);

}  // namespace detfuse::tuner
