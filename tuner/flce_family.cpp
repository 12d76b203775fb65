#include "tuner/flce_family.h"

#include "db/store.h"
#include "kernels/flce/flce.h"
#include "tuner/flce_gpu.h"
#include "tuner/footprint.h"
#include "tuner/text.h"
#include "kernels/baseline/three_gemms.h"

namespace detfuse::tuner {

db::ProblemRecord FamilyTraits<FlceProblem>::record(const FlceProblem& p) {
  // Stored and looked up without accumulate_dW: summing onto a caller's dW
  // changes only the first chunk's dW epilogue (a load where a store was), so
  // a problem's tuned choice is its accumulating twin's too.
  FlceProblem q = p;
  q.accumulate_dW = false;
  return db::make_problem_record(q.key(), {"N", "D", "V"});
}

void FamilyTraits<FlceProblem>::check_fits(const FlceProblem& p, const DeviceInfo* dev) { tuner::check_fits(p, dev); }

Json FamilyTraits<FlceProblem>::to_json(const FlceProblem& p) {
  return {{"N", p.N},
          {"D", p.D},
          {"V", p.V},
          {"dtype", to_string(p.dtype)},
          {"grad_dtype", to_string(p.grad_dtype)},
          {"ignore_index", p.ignore_index},
          {"reduction", to_string(p.reduction)},
          {"label_smoothing", p.label_smoothing},
          {"lse_square_scale", p.lse_square_scale},
          {"softcap", p.softcap},
          {"grad_output", p.grad_output}};
}

FlceProblem FamilyTraits<FlceProblem>::from_json(const Json& j) {
  FlceProblem p;
  p.N = j.at("N").get<int64_t>();
  p.D = j.at("D").get<int64_t>();
  p.V = j.at("V").get<int64_t>();
  p.dtype = parse_dtype(j.at("dtype").get<std::string>());
  p.grad_dtype = parse_dtype(j.at("grad_dtype").get<std::string>());
  p.ignore_index = j.at("ignore_index").get<int64_t>();
  p.reduction = parse_reduction(j.at("reduction").get<std::string>());
  p.label_smoothing = j.at("label_smoothing").get<double>();
  p.lse_square_scale = j.at("lse_square_scale").get<double>();
  p.softcap = j.at("softcap").get<double>();
  p.grad_output = j.at("grad_output").get<double>();
  return p;
}

std::string FamilyTraits<FlceProblem>::heuristic(const Registry&, const FlceProblem& p, Mode m, const DeviceInfo& dev) {
  return flce::heuristic_variant(p, family_mode(m), dev).desc.name;
}

std::unique_ptr<GpuCase> FamilyTraits<FlceProblem>::make_case(const FlceProblem& p, Mode m, const HostInputs& in,
                                                              int64_t seed, const DeviceInfo& dev) {
  std::optional<FlceHostInputs> user;
  if (in.has_value()) user = std::any_cast<const FlceHostInputs&>(in);
  return std::make_unique<FlceGpuCase>(p, family_mode(m), inputs_or_seeded(user, p, seed), dev);
}

BenchBaseline FamilyTraits<FlceProblem>::bench_baseline(const FlceProblem& p, int min_reps) {
  BenchBaseline b;
  try {
    auto t = baseline::time_three_gemms(p, 2, min_reps);
    b.available = true;
    b.logits_ms = t.logits_ms;
    b.dx_ms = t.dx_ms;
    b.dw_ms = t.dw_ms;
    b.total_ms = t.total_ms();
    b.note = t.note;
  } catch (const std::exception& e) {
    b.note = std::string("three-GEMM baseline failed: ") + one_line(e.what());
  }
  return b;
}

const std::vector<std::string>& FamilyTraits<FlceProblem>::output_names() { return flce_output_names(); }

}  // namespace detfuse::tuner
