#include "tuner/best.h"

#include <cstdio>

#include "kernels/common/error.h"
#include "tuner/records.h"

namespace detfuse::tuner {

const char* to_string(ChoiceSource s) {
  switch (s) {
    case ChoiceSource::tuned: return "tuned";
    case ChoiceSource::nearest: return "nearest";
    case ChoiceSource::heuristic: return "heuristic";
  }
  return "?";
}

HeuristicFn default_heuristic(const Registry& reg) {
  return [&reg](const Problem& p, Mode m, const DeviceInfo& d) { return p.heuristic(reg, m, d); };
}

HeuristicFn heuristic_from(const Registry& reg, FlceHeuristicFn flce, AttentionHeuristicFn attention) {
  return [&reg, flce, attention](const Problem& p, Mode m, const DeviceInfo& d) -> std::string {
    if (flce && p.is<FlceProblem>())
      return flce(p.as<FlceProblem>(), FamilyTraits<FlceProblem>::family_mode(m), d).desc.name;
    if (attention && p.is<AttentionProblem>())
      return attention(p.as<AttentionProblem>(), m == Mode::forward ? AttentionMode::forward : AttentionMode::backward, d)
          .desc.name;
    return p.heuristic(reg, m, d);
  };
}

std::vector<db::Id> device_rows_for(const db::Store& store, const DeviceInfo& dev) {
  std::vector<db::Id> ids;
  if (auto id = store.find_device(device_record(dev))) ids.push_back(*id);
  if (!dev.uuid.empty())
    for (const auto& e : store.find_devices(dev.uuid))
      if (e.record.uuid == dev.uuid && (ids.empty() || e.id != ids.front())) ids.push_back(e.id);
  return ids;
}

namespace {
std::string usable(const Registry& reg, const std::string& name, const Problem& p, Mode mode, const DeviceInfo& dev) {
  const std::optional<Variant> v = p.find_variant(reg, name);
  if (!v) return "this build has no variant '" + name + "'";
  try {
    if (auto why = v->can_run(p, mode, dev)) return name + " cannot run this problem: " + *why;
  } catch (const std::exception& e) {
    return name + ": can_run failed: " + e.what();
  }
  return "";
}

std::string fmt_g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

std::string fmt_ms(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", ms);
  return b;
}
}  // namespace

BestAnswer resolve_best(const db::Store* store, const std::vector<db::Id>& device_ids, const DeviceInfo& dev,
                        const Problem& p, Mode mode, bool allow_nondeterministic, const Registry& reg,
                        const HeuristicFn& heuristic, const std::string& level) {
  if (!level.empty()) db::check_level_name(level, "level");
  p.validate();
  BestAnswer a;
  a.problem_key = p.key();
  a.device = dev.name + " (" + dev.uuid + ")";
  const db::BuildRecord build = this_build();
  auto build_note = [&](const db::BestResult& r) {
    if (!(r.build == build))
      a.notes.push_back("measured by build " + r.build.version + " " + r.build.git_commit + " (this is " +
                        build.version + " " + build.git_commit + ")");
  };
  if (store && !device_ids.empty()) {
    const db::ProblemRecord pr = problem_record(p);
    const auto pid = store->find_problem(pr.key);
    // 1. exact problem
    for (size_t i = 0; pid && i < device_ids.size(); ++i) {
      auto r = store->best(device_ids[i], *pid, allow_nondeterministic, std::nullopt, level);
      if (!r) continue;
      std::string why = usable(reg, r->variant_name, p, mode, dev);
      if (!why.empty()) {
        a.notes.push_back("tuned best passed over: " + why);
        continue;
      }
      a.source = ChoiceSource::tuned;
      a.variant = r->variant_name;
      a.tuned_problem_key = r->problem_key;
      if (i > 0) a.notes.push_back("tuned on this GPU under another driver (" + store->device(device_ids[i]).driver_release + ")");
      build_note(*r);
      a.result = r;
      return a;
    }
    // 2. nearest tuned shape
    for (size_t i = 0; i < device_ids.size(); ++i) {
      auto m = store->nearest_tuned(device_ids[i], pr, allow_nondeterministic, std::nullopt, level);
      if (!m) continue;
      if (m->problem.record.key == pr.key) continue;  // exact, already passed over
      std::string why = usable(reg, m->best.variant_name, p, mode, dev);
      if (!why.empty()) {
        a.notes.push_back("nearest tuned shape passed over: " + why);
        continue;
      }
      a.source = ChoiceSource::nearest;
      a.variant = m->best.variant_name;
      a.tuned_problem_key = m->problem.record.key;
      a.distance = m->distance;
      a.notes.push_back("this shape was not tuned; nearest tuned shape " + m->problem.record.key +
                        " (distance " + fmt_g(m->distance) + "), where it ran in " +
                        fmt_ms(m->best.median_ms));
      if (!level.empty() && level != db::kLevelNone)
        a.notes.push_back("level " + level + " was shown on that shape, not on this one");
      if (i > 0) a.notes.push_back("tuned on this GPU under another driver");
      build_note(m->best);
      a.result = m->best;
      return a;
    }
    a.notes.push_back(level.empty() ? "nothing tuned for this dtype and these options on this GPU"
                                    : "no result stored for this dtype and these options on this GPU has level " +
                                          level);
  } else if (!store) {
    a.notes.push_back("no tuning database");
  } else {
    a.notes.push_back("this GPU has no results in the database");
  }
  // 3. heuristic
  a.source = ChoiceSource::heuristic;
  a.variant = heuristic ? heuristic(p, mode, dev) : p.heuristic(reg, mode, dev);
  a.notes.push_back("built-in heuristic choice (not measured)");
  if (!level.empty() && level != db::kLevelNone)
    a.notes.push_back("its determinism level was never shown (asked for " + level + ")");
  return a;
}

}  // namespace detfuse::tuner
