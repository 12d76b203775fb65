// Measuring FLCE variants on the GPU: one problem's device state (inputs,
// outputs, an L2-flush buffer) and the three measurements the tuner, `bench`
// and `verify` share: a checked single run, K repeats with digests of every
// output, and timing (warm-up, L2 flushed between repetitions, CUDA events
// around the launch only, every sample kept, SM clocks seen, peak extra memory).
//
// Variants are launched directly (validate_call and can_run are checked once
// per problem, not inside the timed region) with a workspace allocated once per
// measurement, so allocation is never timed. Everything runs on the legacy
// default stream and synchronises after each launch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "db/records.h"
#include "kernels/common/buffer.h"
#include "kernels/common/device_info.h"
#include "kernels/common/digest.h"
#include "kernels/common/problem.h"
#include "kernels/flce/device_case.h"
#include "kernels/registry.h"
#include "reference/inputs.h"
#include "tuner/family.h"
#include "tuner/flce_family.h"
#include "tuner/gpu_loop.h"
#include "tuner/stats.h"

namespace detfuse::tuner {

// Host inputs of one FLCE problem (values as the problem's dtype holds them):
// the reference's input type, so seeded and user (--inputs) inputs are one type.
using FlceHostInputs = reference::FlceInputs;

// The user's inputs when given, else the seeded ones of (problem, seed).
FlceHostInputs inputs_or_seeded(const std::optional<FlceHostInputs>& user, const FlceProblem& p, int64_t seed);

// The output names in digest order.
inline const std::vector<std::string>& flce_output_names() {
  static const std::vector<std::string> n = {"loss", "lse", "dX", "dW"};
  return n;
}

// Digests of the outputs `mode` writes, as (name, digest) in flce_output_names() order.
std::vector<std::pair<std::string, Digest>> flce_digest_list(const flce::DeviceCase::Digests& d, FlceMode mode);

class FlceGpuCase : public GpuCase {
 public:
  // Uploads the inputs; validate_call() runs once here (bad targets throw
  // invalid_argument). `dev` is the current device.
  FlceGpuCase(const FlceProblem& p, FlceMode mode, const FlceHostInputs& in, const DeviceInfo& dev);

  const FlceProblem& problem() const { return case_.problem(); }
  FlceMode mode() const { return mode_; }
  flce::DeviceCase& device_case() { return case_; }

  // Poisons the outputs, runs v once, synchronises. Throws on failure.
  void run_once(const FlceVariant& v);

  // K repeats, each poisoned then run; every output's digest of every repeat,
  // and (schema v4) each output's run-to-run spread against repeat 0,
  // computed on the device (d.spread; left empty when repeat 0's copy does
  // not fit in device memory).
  // Returns false when stop() asked to abandon (d then holds what was done).
  // `cap_spent` (optional) ends the repeats early once it is true, after at
  // least 2 of them; d.repeats then says how many ran.
  bool repeat_digests(const FlceVariant& v, int repeats, const std::function<bool()>& stop, db::Determinism& d,
                      const std::function<bool()>& cap_spent = {});

  // Warm-up then timed repetitions (plan_repetitions with `policy`), L2 flushed
  // before each. Fills samples, median/min/max, clocks, peak extra memory,
  // flops/tflops. Returns false when stop() asked to abandon.
  // `uncapped` (optional) receives the repetitions the plan would have had
  // without policy.cap_ms, so the caller can say what the cap cut.
  bool time(const FlceVariant& v, const RepetitionPolicy& policy, const std::function<bool()>& stop, db::Timing& t,
            int* uncapped = nullptr);

  // XXH3-128 of the raw bytes of every output `mode` writes, in
  // flce_output_names() order: the same values as DeviceCase::digests(), read
  // back through a reused pinned buffer (several times faster for a multi-GiB dW).
  std::vector<std::pair<std::string, Digest>> digest_outputs();

  // The outputs `mode` writes, in flce_output_names() order: device pointer,
  // element count and element type.
  using OutputView = tuner::OutputView;
  std::vector<OutputView> output_views();

  // GpuCase (the neutral calls verify and bench make).
  void run_once(const Variant& v) override { run_once(v.as<FlceVariant>()); }
  bool repeat_digests(const Variant& v, int repeats, const std::function<bool()>& stop, db::Determinism& d,
                      const std::function<bool()>& cap_spent) override {
    return repeat_digests(v.as<FlceVariant>(), repeats, stop, d, cap_spent);
  }
  // `timed` must be the case's mode.
  bool time_mode(const Variant& v, Mode timed, const RepetitionPolicy& policy, const std::function<bool()>& stop,
                 db::Timing& t, int* uncapped) override;
  // loss.npy, lse.npy, dX.npy, dW.npy (float32; bf16 gradients widened).
  void dump_outputs(const std::filesystem::path& dir) override;
  // The portable check (tuner/levels.h): problems small enough to emulate
  // (kPortableMaxFlops) keep their host inputs for it (reference::emulate_flce).
  std::optional<std::vector<std::pair<std::string, std::string>>> emulated_digests(const Variant& v, double max_flops,
                                                                                   std::string* why) override;

 private:
  void launch(const FlceVariant& v, const DeviceBytes& ws);
  void flush_l2();

  FlceMode mode_;
  DeviceInfo dev_;
  flce::DeviceCase case_;
  std::optional<FlceHostInputs> host_;  // the inputs of a problem small enough to emulate
  DeviceBytes flush_;
  DeviceDigester digester_;
};

// Picks `count` distinct rows of [0, N) from the seed (always row 0 and N-1), sorted.
std::vector<int64_t> sample_rows(int64_t N, int count, int64_t seed);

}  // namespace detfuse::tuner
