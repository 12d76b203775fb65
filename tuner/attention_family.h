// Attention as a tuner family (tuner/family.h): problem record (dims B, H, Hkv,
// Sq, Sk; the head dim d, causal, scale and dtype are options, so the nearest
// tuned shape always has the same head dim), JSON form, memory check,
// heuristic, GPU case (tuner/attention_gpu.h) and measurer interface
// (tuner/attention_measurer.h). The tuned mode is forward then backward;
// Mode::forward times the forward alone.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "tuner/family.h"

namespace detfuse::tuner {

template <>
struct FamilyTraits<AttentionProblem> {
  using Variant = AttentionVariant;
  using FamilyMode = Mode;
  static constexpr Family family = Family::attention;
  static constexpr const char* label = "attention";
  static Mode family_mode(Mode m) { return m; }
  static const std::vector<AttentionVariant>& variants(const Registry& r) { return r.attention(); }
  // forward: can_run(forward); forward_backward: both passes.
  static std::optional<std::string> can_run(const AttentionVariant& v, const AttentionProblem& p, Mode m,
                                            const DeviceInfo& d);
  static std::string shape(const AttentionProblem& p);  // "B,H,Hkv,Sq,Sk,d" (+ ",causal")
  static db::ProblemRecord record(const AttentionProblem& p);
  static void check_fits(const AttentionProblem& p, const DeviceInfo* dev);
  static Json to_json(const AttentionProblem& p);
  static AttentionProblem from_json(const Json& j);
  // forward 4*B*H*Sq*Sk*d (half if causal); forward+backward 3.5 times that.
  static double flops(const AttentionProblem& p, Mode m) {
    return m == Mode::forward ? p.flops_forward() : p.flops_forward() + p.flops_backward();
  }
  // The default choice before any tuning: over the built-in registry
  // kernels/attention's heuristic_variant; over another registry (tests) the
  // first deterministic variant of the dtype that can run the problem in this
  // mode, else the first that can (throws when none can).
  static std::string heuristic(const Registry& reg, const AttentionProblem& p, Mode m, const DeviceInfo& dev);
  static std::unique_ptr<GpuCase> make_case(const AttentionProblem& p, Mode m, const HostInputs& in, int64_t seed,
                                            const DeviceInfo& dev);
  static const std::vector<std::string>& output_names();  // O, lse, dQ, dK, dV
  static std::vector<Mode> bench_modes() { return {Mode::forward, Mode::forward_backward}; }
  static const char* headline_output() { return "dQ"; }
  static constexpr bool has_baseline = false;
  static BenchBaseline bench_baseline(const AttentionProblem&, int) { return {}; }
};

template <>
struct ProblemOf<AttentionVariant> {
  using type = AttentionProblem;
};

// The attention measurer interface (AttentionGpuMeasurer, the tests' fakes).
using AttentionMeasurer = MeasurerFor<AttentionProblem>;

// A heuristic written against attention's types.
using AttentionHeuristicFn =
    std::function<const AttentionVariant&(const AttentionProblem&, AttentionMode, const DeviceInfo&)>;

inline Json to_json(const AttentionProblem& p) { return FamilyTraits<AttentionProblem>::to_json(p); }
inline AttentionProblem attention_problem_from_json(const Json& j) {
  return FamilyTraits<AttentionProblem>::from_json(j);
}

}  // namespace detfuse::tuner
