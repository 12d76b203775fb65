#include "tuner/verify.h"

#include <algorithm>
#include <map>
#include <set>

#include "kernels/common/error.h"
#include "reference/inputs.h"
#include "tuner/gpu_loop.h"
#include "tuner/interrupt.h"
#include "tuner/levels.h"
#include "tuner/npy.h"
#include "tuner/records.h"
#include "tuner/text.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {

bool digests_reproduce(const db::Determinism& local, const std::vector<db::DigestRow>& stored,
                       std::vector<std::string>* why) {
  std::map<std::string, std::set<std::string>> l, s;
  for (const auto& d : local.digests) l[d.output].insert(d.digest);
  for (const auto& d : stored) s[d.output].insert(d.digest);
  bool ok = true;
  bool any = false;
  auto say = [&](const std::string& w) {
    ok = false;
    if (why) why->push_back(w);
  };
  for (const auto& [out, ld] : l) {
    auto it = s.find(out);
    if (it == s.end()) continue;
    any = true;
    const auto& sd = it->second;
    if (ld.size() > 1) say(out + ": " + std::to_string(ld.size()) + " distinct digests in " + std::to_string(local.repeats) + " repeats here");
    if (sd.size() > 1) say(out + ": " + std::to_string(sd.size()) + " distinct digests were stored");
    if (ld.size() == 1 && sd.size() == 1 && *ld.begin() != *sd.begin())
      say(out + ": " + ld.begin()->substr(0, 16) + "... here, " + sd.begin()->substr(0, 16) + "... stored");
  }
  if (!any) say("no output in common with the stored digests");
  return ok;
}

std::vector<InvarianceClass> invariance_classes(const std::vector<VerifyRow>& rows) {
  std::vector<InvarianceClass> classes;
  std::map<std::vector<std::pair<std::string, std::string>>, size_t> index;
  for (const auto& r : rows) {
    if (r.local.digests.empty()) continue;
    std::vector<std::pair<std::string, std::string>> key;
    for (const auto& d : r.local.digests)
      if (d.repeat == 0) key.emplace_back(d.output, d.digest);
    std::sort(key.begin(), key.end());
    bool consistent = true;
    for (const auto& [out, n] : r.local.distinct) consistent = consistent && n == 1;
    if (!consistent) {
      classes.push_back(InvarianceClass{{r.variant}, key, false});
      continue;
    }
    auto it = index.find(key);
    if (it == index.end()) {
      index[key] = classes.size();
      classes.push_back(InvarianceClass{{r.variant}, key, true});
    } else {
      classes[it->second].variants.push_back(r.variant);
    }
  }
  return classes;
}

void apply_config_checks(std::vector<VerifyRow>& rows) {
  std::vector<LevelSubject> subjects;
  for (const auto& r : rows) subjects.push_back({r.variant, r.group, &r.local});
  const std::vector<CheckOutcome> out = config_checks(subjects);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].local.digests.empty()) continue;
    rows[i].local.checks.config = out[i].outcome;
    if (!out[i].note.empty()) rows[i].local.checks.note("config", out[i].note);
    settle_level(rows[i].local);
  }
}

std::vector<VerifyRow> run_verify(const db::Store* store, const Registry& reg, const DeviceInfo& dev,
                                  const VerifyOptions& o, std::ostream* progress) {
  o.problem.validate();
  if (o.repeats < 1) throw invalid_argument("--repeats: must be >= 1");
  const auto variants = plan_variants(reg, o.problem, o.variants);
  const bool user_inputs = o.inputs.has_value();
  std::unique_ptr<GpuCase> gc = o.problem.make_case(Mode::forward_backward, o.inputs, o.seed, dev);

  std::optional<db::Id> dev_id, build_id, problem_id;
  if (store && !user_inputs) {
    dev_id = store->find_device(device_record(dev));
    build_id = store->find_build(this_build());
    problem_id = store->find_problem(o.problem.key());
  }

  std::vector<VerifyRow> rows;
  for (const Variant& v : variants) {
    if (interrupt_requested()) throw Error("interrupted");
    VerifyRow row;
    row.variant = v.name();
    row.group = config_group(v.desc());
    if (auto why = v.can_run(o.problem, Mode::forward_backward, dev)) {
      row.status = "cannot_run";
      row.reason = *why;
      rows.push_back(row);
      continue;
    }
    if (progress) *progress << "running " << v.name() << " " << o.repeats << " times...\n";
    try {
      if (!gc->repeat_digests(v, o.repeats, interrupt_requested, row.local, {})) throw Error("interrupted");

    } catch (const std::exception& e) {
      if (interrupt_requested()) throw;
      row.status = "error";
      row.reason = one_line(e.what());
      if (cuda_context_lost()) {
        rows.push_back(row);
        throw Error("CUDA context lost while running " + v.name() + ": " + row.reason);
      }
      rows.push_back(row);
      continue;
    }
    if (o.dump_dir) gc->dump_outputs(variants.size() > 1 ? *o.dump_dir / v.name() : *o.dump_dir);
    if (o.levels) {  // after the dump: the slices' runs overwrite the outputs
      if (progress) *progress << "  levels: " << v.name() << " on 16 and 66 SMs, and against the CPU emulation...\n";
      try {
        if (!check_sm_count(*gc, v, row.local, interrupt_requested)) throw Error("interrupted");
        check_portable(*gc, v, row.local);
      } catch (const std::exception& e) {
        if (interrupt_requested()) throw;
        row.differences.push_back(std::string("levels check failed to run: ") + one_line(e.what()));
        if (cuda_context_lost()) {
          rows.push_back(row);
          throw Error("CUDA context lost while checking the levels of " + v.name() + ": " + one_line(e.what()));
        }
      }
    }
    std::optional<db::Id> var_id = store && !user_inputs ? store->find_variant(v.name()) : std::nullopt;
    if (dev_id && build_id && problem_id && var_id)
      row.stored = store->stored_digests(*dev_id, *build_id, *var_id, *problem_id, o.seed);
    if (!row.stored) {
      row.status = kNotStored;
      if (user_inputs)
        row.reason = "user inputs: nothing stored to compare against";
      else if (!store)
        row.reason = "no database";
      else if (!dev_id)
        row.reason = "this GPU (and driver) has no results in the database";
      else if (!build_id)
        row.reason = "this build (" + this_build().git_commit + ") has no results in the database";
      else
        row.reason = "no digests stored for this GPU, build, variant, problem and seed";
      // The local repeats still say whether this run agrees with itself.
      for (const auto& [out, n] : row.local.distinct)
        if (n > 1) row.differences.push_back(out + ": " + std::to_string(n) + " distinct digests in " +
                                             std::to_string(o.repeats) + " repeats here");
    } else {
      row.status = digests_reproduce(row.local, row.stored->digests, &row.differences) ? kReproduced : kMismatch;
    }
    rows.push_back(row);
  }
  apply_config_checks(rows);
  return rows;
}

}  // namespace detfuse::tuner
