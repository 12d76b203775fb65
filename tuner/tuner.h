// The autotuner: for one device and a set of FLCE problems, measure every
// registered variant (can_run refusals recorded with their reason; correctness
// against the float64 reference; K repeats digesting every output; timing) and
// store every result, then rank them and select the best.
//
// The orchestration here (planning, resume, budget, Ctrl-C, progress, store
// bookkeeping, ranking) is independent of the GPU: the measuring is behind
// FlceMeasurer, whose GPU implementation is tuner/flce_measurer.h and whose test
// double (a fake that measures nothing) lets the CPU tests run it all.
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
#include "tuner/ownership.h"
#include "tuner/selection.h"

namespace detfuse::tuner {

// What measuring one variant produced (becomes one result row).
struct VariantOutcome {
  std::string status = db::kResultOk;  // ok, incorrect, error, crashed
  std::string reason;
  std::optional<db::Correctness> correctness;
  std::optional<db::Determinism> determinism;
  std::optional<db::Timing> timing;
  bool interrupted = false;   // abandoned on request (Ctrl-C): nothing is recorded
  // The CUDA context is unusable: record, then stop the run (in-process
  // measuring). A supervised measurer restarts its worker and clears it.
  bool context_lost = false;
  // What the variant's time cap cut, e.g. "repeats 812 of 1000000000" or
  // "timing 5 of 200 repetitions"; empty when nothing was cut.
  std::string cut;
};

struct MeasureControl {
  int repeats = 5;                  // K, for the determinism check
  // Soft cap of this variant's measuring (min(--time-cap, budget left)): from
  // the start of measure(), the K repeats and the timing repetitions stop when
  // it is spent, past their minimums (2 repeats, 5 timing repetitions; the
  // correctness check is never cut). The outcome's `cut` says what was cut.
  double time_cap_s = 20;
  // Hard cap (--kill-after): a supervised measurer kills a worker that has not
  // answered after this long and records the variant `crashed` ("timeout: ...").
  // 0: none. In-process measurers cannot enforce it.
  double kill_after_s = 0;
  std::function<bool()> stop;       // true when the caller wants to stop (Ctrl-C)
  std::function<void(const std::string&)> note;  // optional sub-step progress
};

class FlceMeasurer {
 public:
  virtual ~FlceMeasurer() = default;
  // Once per (problem, seed) before its first measured variant: inputs, device
  // buffers, the float64 reference. Throws on failure.
  virtual void prepare(const FlceProblem& p, FlceMode mode, int64_t seed) = 0;
  // Checks, repeats and times one variant of the prepared problem. Errors of
  // the variant are reported in the outcome, not thrown.
  virtual VariantOutcome measure(const FlceVariant& v, const MeasureControl& ctl) = 0;
  // Frees what prepare() holds.
  virtual void release() {}
  // Called now and then (about every second) while a supervised measurer waits
  // for its worker, so the caller can keep a heartbeat; in-process measurers
  // never call it.
  virtual void set_wait_hook(std::function<void()>) {}
};

struct TuneOptions {
  std::vector<FlceProblem> problems;
  FlceMode mode = FlceMode::forward_backward;
  int64_t seed = 0;
  int repeats = 5;
  double budget_s = 0;          // 0: none
  double variant_time_cap_s = 20;  // soft, per variant: repeats and timing stop past their minimums
  double kill_after_s = 0;         // hard, per variant (supervised measuring): 0 none
  bool resume = false;
  bool allow_nondeterministic = false;
  std::vector<std::string> variants;  // empty: every variant of the problem's dtype
  std::string command_line;
  // The study this run belongs to (db::StudyRecord::name, stored in
  // runs.study); "" for a plain tuning run. The caller creates the study row.
  std::string study;
  // With resume: variants whose latest row is a crash their owner recorded
  // are measured again (presumed crashes always are; tuner/resume.h).
  bool retry_crashed = false;
  db::RunOwner owner = this_process_owner();  // recorded with the run
  OwnerCheck owner_check;                      // how other runs' owners are judged
};

struct ProblemReport {
  FlceProblem problem;
  db::Id problem_id = 0;
  std::vector<RankedRow> ranked;  // every result of the run for this problem
  std::optional<Candidate> best;
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

// The variants of `reg` a problem is tuned over: the FLCE variants of the
// problem's dtype, restricted to `names` when not empty (an unknown name, or
// one of another dtype, is invalid_argument).
std::vector<const FlceVariant*> plan_variants(const Registry& reg, const FlceProblem& p,
                                              const std::vector<std::string>& names);

class Tuner {
 public:
  // progress: where the progress lines go (stderr in the command); may be null.
  Tuner(db::Store& store, const Registry& reg, const DeviceInfo& dev, FlceMeasurer& measurer,
        std::ostream* progress = nullptr, Budget::Clock clock = monotonic_seconds);

  // Defaults to tuner::interrupt_requested (the Ctrl-C flag).
  void set_stop(std::function<bool()> stop) { stop_ = std::move(stop); }

  // Runs the tuning. Bad options throw invalid_argument before anything is
  // written; store failures propagate (the run is then marked failed).
  TuneReport run(const TuneOptions& opts);

 private:
  db::Store& store_;
  const Registry& reg_;
  DeviceInfo dev_;
  FlceMeasurer& measurer_;
  std::ostream* progress_;
  Budget::Clock clock_;
  std::function<bool()> stop_;
};

// The ranked results of one problem over some runs (a run and the runs it
// resumed): the latest final result of each variant.
ProblemReport report_problem(const db::Store& store, const std::set<db::Id>& runs, db::Id problem_id,
                             const FlceProblem& p, bool allow_nondeterministic);

}  // namespace detfuse::tuner
