// The GPU AttentionMeasurer of the tuner: seeded inputs, the float64
// reference (reference/attention_ref.h) computed once per (problem, seed) and
// reused for every variant, then per variant: correctness, K repeats digesting
// O, LSE, dQ, dK, dV, and timing of the tuned mode (forward then backward;
// Mode::forward: the forward alone) with TFLOP/s by the DESIGN.md convention.
//
// What is checked against the reference (the result row's checked_what says it):
//   - problems with B*H*Sq*Sk*d <= full_check_macs: every output in full;
//   - larger ones: a slice of the full-size run, batch 0, the query heads of kv
//     head 0 and the last Sq' queries: O, LSE (and dQ, whose rows depend only on
//     their own query, dO row and every key) against the reference of that
//     slice taken as a problem of its own (B=1, H=H/Hkv, Hkv=1, Sq', all Sk
//     keys: the bottom-right causal alignment keeps every row's visible keys);
//     plus every output of that slice run as its own GPU problem.
//     Sq' = reduced_macs / (H/Hkv * Sk * d), at least 1.
// Tolerances (relative norm error): O, dQ, dK, dV 1e-5 fp32 and 2e-2 bf16; LSE
// 1e-4 (rows that see no key must give -inf exactly).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reference/attention_ref.h"
#include "tuner/attention_gpu.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {

struct AttentionCheckPolicy {
  double full_check_macs = 2e10;
  double reduced_macs = 2e10;
  int reference_threads = 0;  // 0: every hardware thread
};

struct AttentionTolerances {
  double out = 2e-2;  // O, dQ, dK, dV
  double lse = 1e-4;
};
AttentionTolerances attention_tolerances_for(DType dtype);

// The slice a large problem is checked on (see above), as a problem.
AttentionProblem attention_check_slice(const AttentionProblem& p, double reduced_macs);
// The slice's inputs cut from the full problem's.
AttentionHostInputs slice_attention_inputs(const AttentionProblem& p, const AttentionHostInputs& in,
                                           const AttentionProblem& slice);
// The slice's rows of a full-size [B, H, Sq, width] output (width d for O and
// dQ, 1 for LSE), in the slice's layout.
std::vector<float> slice_query_rows(const AttentionProblem& p, const std::vector<float>& full,
                                    const AttentionProblem& slice, int64_t width);
// LSE error: +inf when a row whose reference is -inf (no visible key) is not
// -inf, or a finite reference row is not finite; else the relative norm error
// over the finite rows (0 when there are none).
double lse_error(const std::vector<float>& got, const std::vector<double>& ref);

class AttentionGpuMeasurer : public AttentionMeasurer {
 public:
  explicit AttentionGpuMeasurer(const DeviceInfo& dev, AttentionCheckPolicy check = {}, RepetitionPolicy reps = {});
  ~AttentionGpuMeasurer() override;

  void prepare(const AttentionProblem& p, Mode mode, int64_t seed) override;
  VariantOutcome measure(const AttentionVariant& v, const MeasureControl& ctl) override;
  void release() override;

  // The check alone (tests): runs v once on the prepared problem.
  db::Correctness check(const AttentionVariant& v);

 private:
  void prepare_(const AttentionProblem& p, Mode mode, int64_t seed);

  DeviceInfo dev_;
  AttentionCheckPolicy check_;
  RepetitionPolicy reps_;
  Mode mode_ = Mode::forward_backward;
  std::unique_ptr<AttentionGpuCase> full_;
  std::unique_ptr<AttentionGpuCase> small_;  // the slice as a problem (large problems only)
  reference::AttentionResult ref_full_;      // full reference (small problems), else empty
  reference::AttentionResult ref_small_;     // the slice's reference (large problems)
  std::string checked_what_;
};

}  // namespace detfuse::tuner
