// The GPU FlceMeasurer of the tuner: seeded inputs, the float64 reference
// computed once per (problem, seed) and reused for every variant, then per
// variant: correctness, K repeats with digests, timing.
//
// What is checked against the reference (the result row's checked_what says it):
//   - problems with N*D*V <= full_check_macs: every output in full ("full");
//   - larger ones: at full size, the LSE (and the per-row loss for reduction
//     none) and the dX of `sample_rows` seeded rows; plus every output (loss,
//     LSE, dX, dW) of the same problem reduced to its first n_small rows with
//     the same D and V, n_small = reduced_macs / (D*V) (at least 1).
// Tolerances (relative norm error): fp32 1e-5 everywhere; bf16 1e-2 for dX and
// dW, 1e-4 for loss and LSE.
#pragma once

#include <memory>
#include <optional>

#include "reference/flce_ref.h"
#include "tuner/flce_gpu.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {

struct CheckPolicy {
  double full_check_macs = 2e10;
  double reduced_macs = 2e10;
  int sample_rows = 16;
  int reference_threads = 0;  // 0: every hardware thread
};

struct Tolerances {
  double loss = 1e-4, lse = 1e-4, grad = 1e-2;
};
Tolerances tolerances_for(DType dtype);

class FlceGpuMeasurer : public FlceMeasurer {
 public:
  explicit FlceGpuMeasurer(const DeviceInfo& dev, CheckPolicy check = {}, RepetitionPolicy reps = {});
  ~FlceGpuMeasurer() override;

  void prepare(const FlceProblem& p, FlceMode mode, int64_t seed) override;
  VariantOutcome measure(const FlceVariant& v, const MeasureControl& ctl) override;
  void release() override;

 private:
  db::Correctness check(const FlceVariant& v);
  void prepare_(const FlceProblem& p, FlceMode mode, int64_t seed);

  DeviceInfo dev_;
  CheckPolicy check_;
  RepetitionPolicy reps_;
  FlceMode mode_ = FlceMode::forward_backward;
  std::unique_ptr<FlceGpuCase> full_;   // the problem itself
  std::unique_ptr<FlceGpuCase> small_;  // the reduced-N problem (large problems only)
  std::vector<int64_t> rows_;           // sampled rows (large problems only)
  reference::FlceResult ref_full_;      // full reference, or the sampled rows'
  reference::FlceResult ref_small_;
  std::string checked_what_;
};

}  // namespace detfuse::tuner
