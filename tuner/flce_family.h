// FLCE as a tuner family (tuner/family.h): its problem record (dims N, D, V),
// JSON form, memory check, heuristic, GPU case (tuner/flce_gpu.h) and the
// measurer interface its GPU measurer implements (tuner/flce_measurer.h).
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
struct FamilyTraits<FlceProblem> {
  using Variant = FlceVariant;
  using FamilyMode = FlceMode;
  static constexpr Family family = Family::flce;
  static constexpr const char* label = "FLCE";
  static FlceMode family_mode(Mode m) { return m == Mode::forward ? FlceMode::forward : FlceMode::forward_backward; }
  // backward is measured and chosen as part of forward_backward.
  static Mode family_mode_of(FlceMode m) { return m == FlceMode::forward ? Mode::forward : Mode::forward_backward; }
  static const std::vector<FlceVariant>& variants(const Registry& r) { return r.flce(); }
  static std::optional<std::string> can_run(const FlceVariant& v, const FlceProblem& p, Mode m, const DeviceInfo& d) {
    return v.can_run(p, family_mode(m), d);
  }
  static std::string shape(const FlceProblem& p) { return p.shape(); }
  static db::ProblemRecord record(const FlceProblem& p);
  static void check_fits(const FlceProblem& p, const DeviceInfo* dev);
  static Json to_json(const FlceProblem& p);
  static FlceProblem from_json(const Json& j);
  static double flops(const FlceProblem& p, Mode m) {
    return m == Mode::forward ? p.flops_forward() : p.flops_forward_backward();
  }
  static std::string heuristic(const Registry& reg, const FlceProblem& p, Mode m, const DeviceInfo& dev);
  static std::unique_ptr<GpuCase> make_case(const FlceProblem& p, Mode m, const HostInputs& in, int64_t seed,
                                            const DeviceInfo& dev);
  static const std::vector<std::string>& output_names();
  static std::vector<Mode> bench_modes() { return {Mode::forward_backward}; }
  static const char* headline_output() { return "dW"; }
  static constexpr bool has_baseline = true;
  // Three cuBLAS GEMMs of the shape (kernels/baseline), when this build has them.
  static BenchBaseline bench_baseline(const FlceProblem& p, int min_reps);
};

template <>
struct ProblemOf<FlceVariant> {
  using type = FlceProblem;
};

// The FLCE measurer interface (FlceGpuMeasurer, the tests' fakes).
using FlceMeasurer = MeasurerFor<FlceProblem>;

// A heuristic written against FLCE's types (flce::heuristic_variant's signature).
using FlceHeuristicFn = std::function<const FlceVariant&(const FlceProblem&, FlceMode, const DeviceInfo&)>;

// The JSON forms of an FLCE problem (what crosses the worker pipe).
inline Json to_json(const FlceProblem& p) { return FamilyTraits<FlceProblem>::to_json(p); }
inline FlceProblem flce_problem_from_json(const Json& j) { return FamilyTraits<FlceProblem>::from_json(j); }

}  // namespace detfuse::tuner
