// The autotuner: for one device and a set of problems of any family, measure
// every registered variant (can_run refusals recorded with their reason;
// correctness against the family's float64 reference; K repeats digesting every
// output; timing) and store every result, then rank them and select the best.
//
// The orchestration here (planning, resume, budget, Ctrl-C, progress, store
// bookkeeping, ranking) is independent of the GPU and of the family: it speaks
// of Problem, Variant and Measurer (tuner/family.h). The GPU measurers are
// tuner/flce_measurer.h and tuner/attention_measurer.h; the test doubles (fakes
// that measure nothing) let the CPU tests run it all.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <ostream>
#include <string>
#include <vector>

#include "db/records.h"
#include "db/store.h"
#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"
#include "kernels/registry.h"
#include "tuner/budget.h"
#include "tuner/families.h"
#include "tuner/family.h"
#include "tuner/ownership.h"
#include "tuner/selection.h"

namespace detfuse::tuner {

struct TuneOptions {
  std::vector<Problem> problems;  // of any families, measured in this order
  Mode mode = Mode::forward_backward;
  int64_t seed = 0;
  int repeats = 5;
  double budget_s = 0;          // 0: none
  double variant_time_cap_s = 20;  // soft, per variant: repeats and timing stop past their minimums
  double kill_after_s = 0;         // hard, per variant (supervised measuring): 0 none
  bool resume = false;
  bool allow_nondeterministic = false;
  std::vector<std::string> variants;  // empty: every variant of the problem's family and dtype
  std::string command_line;
  // The study this run belongs to (db::StudyRecord::name, stored in
  // runs.study); "" for a plain tuning run. The caller creates the study row.
  std::string study;
  // The SMs the measurer runs on (runs.sms): a green-context slice's actual
  // count, or the device's SM count; nullopt: not known (recorded as NULL).
  // --resume continues only a run of the same SM count.
  std::optional<int64_t> sms;
  // With resume: variants whose latest row is a crash their owner recorded
  // are measured again (presumed crashes always are; tuner/resume.h).
  bool retry_crashed = false;
  // `--levels`: after each variant's repeats, the sm_count and portable checks
  // (tuner/levels.h: 2 more runs on 16 and 66 SMs, and a CPU emulation). The
  // config check is always done, from the digests every run has.
  bool levels = false;
  // With resume and no unfinished run to continue, variants whose latest
  // final result for (device, build, problem, seed) exists in any run are
  // skipped (a repeated `make tune` ends at once); force measures them again.
  bool force = false;
  db::RunOwner owner = this_process_owner();  // recorded with the run
  OwnerCheck owner_check;                      // how other runs' owners are judged
};

struct ProblemReport {
  Problem problem;
  db::Id problem_id = 0;
  std::vector<RankedRow> ranked;  // every result of the run for this problem
  std::optional<Candidate> best;
  LevelReport levels;  // the fastest variant at each determinism level and its cost
};

struct TuneReport {
  db::Id run_id = 0;
  std::string run_uid;
  std::string status;  // complete, budget, interrupted, failed
  bool resumed = false;
  std::string resume_note;  // what --resume found
  int measured = 0, cannot_run = 0, skipped = 0, crashed_marked = 0, remaining = 0;
  int retried = 0;                      // crashed variants measured again
  std::vector<std::string> dead_runs;   // runs marked crashed because their owner is gone
  std::vector<std::string> abandoned;   // uids of older unfinished runs marked abandoned
  // What the time caps cut, one entry per variant: "flce...: repeats 812 of
  // 1000000000 (budget)"; with `remaining` this is what the last line reports.
  std::vector<std::string> cuts;
  std::vector<ProblemReport> problems;
};

class Tuner {
 public:
  // progress: where the progress lines go (stderr in the command); may be null.
  Tuner(db::Store& store, const Registry& reg, const DeviceInfo& dev, Measurer& measurer,
        std::ostream* progress = nullptr, Budget::Clock clock = monotonic_seconds);

  // Defaults to tuner::interrupt_requested (the Ctrl-C flag).
  void set_stop(std::function<bool()> stop) { stop_ = std::move(stop); }

  // Runs the tuning. Bad options throw invalid_argument before anything is
  // written; store failures propagate (the run is then marked failed).
  TuneReport run(const TuneOptions& opts);

 private:
  struct Run;
  struct PlannedProblem;
  struct PlannedVariant;
  void check_options(Run& run);
  void open_run(Run& run);
  void plan_run(Run& run);
  void measure_problems(Run& run);
  void check_config(Run& run);
  bool measure_variant(Run& run, PlannedProblem& pp, PlannedVariant& pv, Budget& budget,
                       bool& prepared, std::string& prepare_error);
  void beat(Run& run, bool force);
  void say(const std::string& line);

  db::Store& store_;
  const Registry& reg_;
  DeviceInfo dev_;
  Measurer& measurer_;
  std::ostream* progress_;
  Budget::Clock clock_;
  std::function<bool()> stop_;
};

// The ranked results of one problem over some runs (a run and the runs it
// resumed): the latest final result of each variant.
ProblemReport report_problem(const db::Store& store, const std::set<db::Id>& runs, db::Id problem_id,
                             const Problem& p, bool allow_nondeterministic);

}  // namespace detfuse::tuner
