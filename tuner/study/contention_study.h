// Running the contention study: the plan (contention_plan.h) through the
// existing Tuner, so correctness against the float64 reference, K repeats with
// digests and run-to-run spread, timing, peak memory, --budget and --resume all
// come from the tuner. The study is a row of the store's `studies` table and
// every run it makes carries its name (runs.study).
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "db/store.h"
#include "tuner/study/contention_plan.h"
#include "tuner/tuner.h"

namespace detfuse::study {

struct StudyRunOptions {
  ContentionPlan plan;
  // Which level of the SM-count axis this call runs: 0 the whole device
  // (plan.problems), K > 0 a slice (plan.sm_problems); the measurer given
  // runs on it. run_sms: the SMs it has (the run's runs.sms; the slice's
  // granted count, or the device's), nullopt when unknown.
  int sms = 0;
  std::optional<int64_t> run_sms;
  double budget_s = 0;  // 0: none
  bool resume = false;
  int64_t seed = 0;
  double kill_after_s = 0;
  std::string command_line;
  // When set, replaces the tuner's stop check (Ctrl-C by default); tests.
  std::function<bool()> stop;
};

struct StudyReport {
  db::Id study_id = 0;
  bool already_complete = false;  // --resume found a complete run of this study (device, build): nothing run
  std::string note;               // what was found or done, one line
  tuner::TuneReport tune;         // empty when already_complete
};

// With resume: the newest run of study `name` on `sms` SMs (runs.sms) whose
// results were all made on (device_id, build_id), if it is complete; nullopt
// otherwise.
std::optional<db::Id> complete_study_run(const db::Store& store, const std::string& name, db::Id device_id,
                                         db::Id build_id, std::optional<int64_t> sms = std::nullopt);

// Creates (or finds) the study row, then runs one SM-count level of the plan
// (o.sms) as one tuning run
// tagged with the study's name (resuming the study's unfinished run with
// resume; doing nothing when resume finds it complete on this device and build).
StudyReport run_contention_study(db::Store& store, const Registry& reg, const DeviceInfo& dev,
                                 tuner::Measurer& measurer, const StudyRunOptions& o,
                                 std::ostream* progress = nullptr);

}  // namespace detfuse::study
