#include "tuner/study/contention_study.h"

#include "tuner/records.h"

namespace detfuse::study {

std::optional<db::Id> complete_study_run(const db::Store& store, const std::string& name, db::Id device_id,
                                         db::Id build_id, std::optional<int64_t> sms) {
  for (const auto& run : store.list_runs()) {  // newest first
    if (run.record.study != name || run.record.sms != sms) continue;
    const auto results = store.run_results(run.id);
    bool ours = !results.empty();
    for (const auto& r : results) ours = ours && r.record.device_id == device_id && r.record.build_id == build_id;
    if (!ours) continue;
    if (run.record.status == db::kRunComplete) return run.id;
    return std::nullopt;  // the newest of ours is unfinished: resume it
  }
  return std::nullopt;
}

StudyReport run_contention_study(db::Store& store, const Registry& reg, const DeviceInfo& dev,
                                 tuner::Measurer& measurer, const StudyRunOptions& o, std::ostream* progress) {
  StudyReport rep;
  rep.study_id = store.find_or_create_study(db::StudyRecord{o.plan.name, "contention", o.plan.axes_json, ""});
  if (o.resume) {
    const auto dev_id = store.find_device(tuner::device_record(dev));
    const auto build_id = store.find_build(tuner::this_build());
    if (dev_id && build_id) {
      if (auto done = complete_study_run(store, o.plan.name, *dev_id, *build_id, o.run_sms)) {
        rep.already_complete = true;
        rep.note = "study " + o.plan.name + (o.run_sms ? " on " + std::to_string(*o.run_sms) + " SMs" : "") +
                   " is complete on this device and build (run " + store.run(*done).uid + "); nothing to resume";
        if (progress) *progress << rep.note << "\n";
        return rep;
      }
    }
  }
  tuner::TuneOptions t;
  const auto& problems = o.sms > 0 ? o.plan.sm_problems : o.plan.problems;
  t.problems.assign(problems.begin(), problems.end());
  t.sms = o.run_sms;
  t.variants = o.plan.variants;
  t.repeats = o.plan.repeats;
  t.variant_time_cap_s = o.plan.time_cap_s;
  t.kill_after_s = o.kill_after_s;
  t.budget_s = o.budget_s;
  t.resume = o.resume;
  t.seed = o.seed;
  t.allow_nondeterministic = true;  // the study ranks every strategy; atomic included
  t.command_line = o.command_line;
  t.study = o.plan.name;
  tuner::Tuner tuner(store, reg, dev, measurer, progress);
  if (o.stop) tuner.set_stop(o.stop);
  rep.tune = tuner.run(t);
  rep.note = "study " + o.plan.name + (o.run_sms ? " on " + std::to_string(*o.run_sms) + " SMs" : "") + ": run " +
             rep.tune.run_uid + " " + rep.tune.status;
  return rep;
}

}  // namespace detfuse::study
