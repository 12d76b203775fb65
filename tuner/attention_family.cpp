#include "tuner/attention_family.h"

#include "db/store.h"
#include "kernels/attention/attention.h"
#include "tuner/attention_gpu.h"
#include "tuner/footprint.h"

namespace detfuse::tuner {

std::optional<std::string> FamilyTraits<AttentionProblem>::can_run(const AttentionVariant& v,
                                                                   const AttentionProblem& p, Mode m,
                                                                   const DeviceInfo& d) {
  if (auto why = v.can_run(p, AttentionMode::forward, d)) return why;
  if (m == Mode::forward_backward)
    if (auto why = v.can_run(p, AttentionMode::backward, d)) return "backward: " + *why;
  return std::nullopt;
}

std::string FamilyTraits<AttentionProblem>::shape(const AttentionProblem& p) {
  return std::to_string(p.B) + "," + std::to_string(p.H) + "," + std::to_string(p.Hkv) + "," + std::to_string(p.Sq) +
         "," + std::to_string(p.Sk) + "," + std::to_string(p.d) + (p.causal ? ",causal" : "");
}

db::ProblemRecord FamilyTraits<AttentionProblem>::record(const AttentionProblem& p) {
  // d stays in the options: the nearest tuned shape has the same head dim.
  return db::make_problem_record(p.key(), {"B", "H", "Hkv", "Sq", "Sk"});
}

void FamilyTraits<AttentionProblem>::check_fits(const AttentionProblem& p, const DeviceInfo* dev) {
  tuner::check_fits(p, dev);
}

Json FamilyTraits<AttentionProblem>::to_json(const AttentionProblem& p) {
  return {{"B", p.B},   {"H", p.H},           {"Hkv", p.Hkv},   {"Sq", p.Sq},
          {"Sk", p.Sk}, {"d", p.d},           {"causal", p.causal}, {"scale", p.scale},
          {"dtype", to_string(p.dtype)}, {"softcap", p.softcap}, {"window", p.window}};
}

AttentionProblem FamilyTraits<AttentionProblem>::from_json(const Json& j) {
  AttentionProblem p;
  p.B = j.at("B").get<int64_t>();
  p.H = j.at("H").get<int64_t>();
  p.Hkv = j.at("Hkv").get<int64_t>();
  p.Sq = j.at("Sq").get<int64_t>();
  p.Sk = j.at("Sk").get<int64_t>();
  p.d = j.at("d").get<int64_t>();
  p.causal = j.at("causal").get<bool>();
  p.scale = j.at("scale").get<double>();
  p.dtype = parse_dtype(j.at("dtype").get<std::string>());
  // Absent in records written before the options existed: off.
  if (j.contains("softcap")) p.softcap = j.at("softcap").get<double>();
  if (j.contains("window")) p.window = j.at("window").get<int64_t>();
  return p;
}

std::string FamilyTraits<AttentionProblem>::heuristic(const Registry& reg, const AttentionProblem& p, Mode m,
                                                      const DeviceInfo& dev) {
  // The built-in registry: kernels/attention's own choice (as FLCE's default is
  // flce::heuristic_variant); backward is the pass a forward_backward run adds.
  if (&reg == &builtin_registry())
    return attention::heuristic_variant(p, m == Mode::forward ? AttentionMode::forward : AttentionMode::backward, dev)
        .desc.name;
  const AttentionVariant* first = nullptr;
  for (const auto& v : reg.attention()) {
    if (v.desc.dtype != p.dtype || can_run(v, p, m, dev)) continue;
    if (v.desc.deterministic) return v.desc.name;
    if (!first) first = &v;
  }
  if (first) return first->desc.name;
  throw invalid_argument("no registered attention variant can run " + p.key() + " (see `detfuse list --kernel attention`)");
}

std::unique_ptr<GpuCase> FamilyTraits<AttentionProblem>::make_case(const AttentionProblem& p, Mode m,
                                                                   const HostInputs& in, int64_t seed,
                                                                   const DeviceInfo& dev) {
  std::optional<AttentionHostInputs> user;
  if (in.has_value()) user = std::any_cast<const AttentionHostInputs&>(in);
  return std::make_unique<AttentionGpuCase>(p, m, attention_inputs_or_seeded(user, p, seed), dev);
}

const std::vector<std::string>& FamilyTraits<AttentionProblem>::output_names() { return attention_output_names(); }

}  // namespace detfuse::tuner
