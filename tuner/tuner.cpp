#include "tuner/tuner.h"

#include <cstdio>
#include <map>
#include <set>

#include "kernels/common/error.h"
#include "tuner/interrupt.h"
#include "tuner/levels.h"
#include "tuner/records.h"
#include "tuner/resume.h"
#include "tuner/text.h"

namespace detfuse::tuner {

ProblemReport report_problem(const db::Store& store, const std::set<db::Id>& runs, db::Id problem_id,
                             const Problem& p, bool allow_nondeterministic) {
  ProblemReport rep;
  rep.problem = p;
  rep.problem_id = problem_id;
  // The latest final result per variant over the runs (a resumed chain).
  std::map<std::string, std::pair<db::Id, Candidate>> latest;
  for (db::Id run_id : runs)
    for (const auto& r : store.run_results(run_id)) {
      if (r.record.problem_id != problem_id || r.record.status == db::kResultRunning) continue;
      auto it = latest.find(r.variant_name);
      if (it == latest.end() || it->second.first < r.id) {
        Candidate c = candidate_from(r.record, r.variant_name);
        c.deterministic_by_design = store.variant(r.record.variant_id).deterministic_by_design;
        latest[r.variant_name] = {r.id, std::move(c)};
      }
    }
  std::vector<Candidate> cands;
  for (auto& [name, v] : latest) cands.push_back(std::move(v.second));
  rep.levels = level_choices(cands);
  rep.ranked = rank_candidates(cands, allow_nondeterministic);
  if (!rep.ranked.empty() && rep.ranked.front().rank == 1) rep.best = rep.ranked.front().c;
  return rep;
}

Tuner::Tuner(db::Store& store, const Registry& reg, const DeviceInfo& dev, Measurer& measurer,
             std::ostream* progress, Budget::Clock clock)
    : store_(store), reg_(reg), dev_(dev), measurer_(measurer), progress_(progress), clock_(std::move(clock)),
      stop_(interrupt_requested) {}

// A tuning run, step by step (Tuner::run below calls them in this order):
//   1. check_options     validate everything before writing anything
//   2. open_run          device, build and problem rows; dead runs marked;
//                        --resume finds the run to continue; the run row
//   3. plan_run          per problem, per variant: run, skip (done), or mark a
//                        presumed crash and run again
//   4. measure_problems  per variant: stop/budget checks, can_run, prepare
//                        (once per problem), measure, record, progress
//   5. finish            the run's status, the ranked report per problem
struct Tuner::PlannedVariant {
  Variant v;
  db::Id variant_id = 0;
  ResumeAction action = ResumeAction::run;
  const db::VariantState* state = nullptr;
};

struct Tuner::PlannedProblem {
  Problem p;
  std::vector<Variant> variants;  // from check_options
  db::Id problem_id = 0;
  std::vector<db::VariantState> states;  // resumed run's rows (owned here)
  std::vector<PlannedVariant> planned;
};

// Everything one run() call shares between its steps.
struct Tuner::Run {
  const TuneOptions& o;
  TuneReport rep;
  db::Id device_id = 0, build_id = 0, run_id = 0;
  std::vector<PlannedProblem> plan;
  std::set<db::Id> chain;                     // runs whose results count as done
  std::map<db::Id, std::string> chain_status; // their status when this run began
  int to_measure = 0, done = 0;
  double measuring_s = 0;
  std::string final_status = db::kRunComplete;
  bool stop = false;
  double last_beat = 0;
  bool told_marked = false;

  db::ResultRecord result_row(const PlannedProblem& pp, const PlannedVariant& pv) const {
    db::ResultRecord r;
    r.run_id = run_id;
    r.device_id = device_id;
    r.build_id = build_id;
    r.problem_id = pp.problem_id;
    r.variant_id = pv.variant_id;
    r.seed = o.seed;
    return r;
  }
};

void Tuner::check_options(Run& run) {
  const TuneOptions& o = run.o;
  if (o.problems.empty()) throw invalid_argument("tune: no problem given (use --shape or --preset)");
  if (o.repeats < 2) throw invalid_argument("--repeats: must be >= 2 to check determinism, got " + std::to_string(o.repeats));
  if (o.budget_s < 0) throw invalid_argument("--budget: must be >= 0");
  for (const Problem& p : o.problems) {
    p.validate();
    p.check_fits(&dev_);  // a shape that cannot fit is an error before anything is written
    PlannedProblem pp;
    pp.p = p;
    pp.variants = plan_variants(reg_, p, o.variants);
    run.plan.push_back(std::move(pp));
  }
}

void Tuner::open_run(Run& run) {
  const TuneOptions& o = run.o;
  TuneReport& rep = run.rep;
  run.device_id = store_.find_or_create_device(device_record(dev_));
  run.build_id = store_.find_or_create_build(this_build());
  std::set<db::Id> problem_ids;
  for (auto& pp : run.plan) {
    pp.problem_id = store_.find_or_create_problem(problem_record(pp.p));
    problem_ids.insert(pp.problem_id);
  }

  // Runs whose process is gone are marked crashed (every tune does it: a
  // killed run does not stay "running" forever); live ones are left alone.
  for (const auto& line : mark_dead_runs(store_, o.owner_check)) {
    rep.dead_runs.push_back(line);
    say(line);
  }

  // The run (a continuation of an unfinished one with --resume).
  std::string resumed_uid_text;
  if (o.resume) {
    std::string why;
    std::vector<db::Id> older;
    auto id = find_resumable_run(store_, run.device_id, run.build_id, problem_ids, o.seed, &why, &older);
    if (id && store_.run(*id).sms != o.sms) {  // measured on another SM count (--sms): not this run's
      const auto n = [](const std::optional<int64_t>& k) { return k ? std::to_string(*k) + " SMs" : "the whole GPU"; };
      why = "the newest unfinished run of these problems, " + store_.run(*id).uid + ", ran on " + n(store_.run(*id).sms) +
            ", this one on " + n(o.sms);
      id.reset();
      older.clear();
    }
    if (id) {
      for (db::Id a : older) {
        const db::RunRecord r = store_.run(a);
        if (store_.mark_run_abandoned(a, "superseded: --resume continued the newer run " + store_.run(*id).uid))
          rep.abandoned.push_back(r.uid);
      }
      if (!rep.abandoned.empty())
        say("marked " + std::to_string(rep.abandoned.size()) + " older unfinished run(s) of these problems abandoned");
      run.chain = resume_chain(store_, *id);
      const db::RunRecord old = store_.run(*id);
      resumed_uid_text = old.uid;
      rep.resumed = true;
      rep.resume_note = "resuming run " + old.uid + " (" + old.status + ", " + std::to_string(run.chain.size()) +
                        " run(s) in its chain)";
    } else if (o.force) {
      rep.resume_note = "nothing to resume (" + why + "); starting a new run (--force: every variant measured)";
    } else {
      rep.resume_note = "nothing to resume (" + why + "); starting a new run that skips the variants this build "
                        "already measured on this GPU (seed " + std::to_string(o.seed) + "; --force measures them "
                        "again)";
    }
    say(rep.resume_note);
  }
  db::RunRecord r;
  r.budget_seconds = o.budget_s;
  r.status = db::kRunRunning;
  r.command_line = o.command_line + (rep.resumed ? resume_tag(resumed_uid_text) : "");
  r.repeats = o.repeats;
  r.seed = o.seed;
  r.allow_nondeterministic = o.allow_nondeterministic;
  r.owner = o.owner;
  r.study = o.study;
  r.sms = o.sms;
  run.run_id = store_.begin_run(r);
  for (db::Id id : run.chain) run.chain_status[id] = store_.run(id).status;
  run.chain.insert(run.run_id);
  rep.run_id = run.run_id;
  rep.run_uid = store_.run(run.run_id).uid;
  run.last_beat = clock_();
}

void Tuner::plan_run(Run& run) {
  TuneReport& rep = run.rep;
  // --resume with nothing unfinished to continue (a completed run, say): the
  // final results this build already has on this device for the problem and
  // seed count as done, from any run, unless --force (tuner/resume.h).
  const bool reuse = run.o.resume && !rep.resumed && !run.o.force;
  for (auto& pp : run.plan) {
    if (rep.resumed) {
      for (const auto& st : store_.variant_states(run.device_id, run.build_id, pp.problem_id, run.o.seed))
        if (run.chain.count(st.run_id) && st.run_id != run.run_id) pp.states.push_back(st);
    } else if (reuse) {
      for (const auto& st : store_.finished_variants(run.device_id, run.build_id, pp.problem_id, run.o.seed))
        if (st.run_id != run.run_id) pp.states.push_back(st);
    }
    for (const Variant& v : pp.variants) {
      PlannedVariant pv{v};
      pv.variant_id = store_.find_or_create_variant(variant_record(v.desc()));
      for (const auto& st : pp.states)
        if (st.variant_id == pv.variant_id) pv.state = &st;
      if (reuse) {
        pv.action = pv.state ? plan_resume(pv.state, pv.state->run_status, run.o.retry_crashed) : ResumeAction::run;
        // The skipped variant's result is part of this run's report.
        if (pv.action == ResumeAction::skip) run.chain.insert(pv.state->run_id);
      } else {
        pv.action = rep.resumed && pv.state
                        ? plan_resume(pv.state, run.chain_status[pv.state->run_id], run.o.retry_crashed)
                        : ResumeAction::run;
      }
      if (pv.state && pv.state->status == db::kResultCrashed && pv.action == ResumeAction::run) ++rep.retried;
      if (pv.action != ResumeAction::skip) ++run.to_measure;
      pp.planned.push_back(pv);
    }
  }
}

// The heartbeat: between variants and, while a supervised worker measures,
// about every kHeartbeatEveryS (the measurer's wait hook). Cheap: one short
// transaction. If another process marked this run crashed or abandoned (it
// misjudged the owner), the run goes on: finish_run and record_result win.
void Tuner::beat(Run& run, bool force) {
  if (!force && clock_() - run.last_beat < kHeartbeatEveryS) return;
  run.last_beat = clock_();
  try {
    const std::string st = store_.heartbeat(run.run_id);
    if (st != db::kRunRunning && !run.told_marked) {
      run.told_marked = true;
      say("note: another process marked this run " + st + "; it goes on and its results stand");
    }
  } catch (const std::exception& e) {
    say(std::string("note: heartbeat failed: ") + one_line(e.what()));
  }
}

// One variant: false when the run must stop (interrupt, budget, lost context).
bool Tuner::measure_variant(Run& run, PlannedProblem& pp, PlannedVariant& pv, Budget& budget, bool& prepared,
                            std::string& prepare_error) {
  const TuneOptions& o = run.o;
  TuneReport& rep = run.rep;
  if (pv.action == ResumeAction::skip) {
    ++rep.skipped;
    return true;
  }
  if (pv.action == ResumeAction::mark_crashed_and_run) {
    // Its run ended without recording it: a presumed crash (history), then measured again.
    if (store_.mark_crashed(pv.state->result_id, kCrashedReason)) ++rep.crashed_marked;
    say("recorded " + pv.v.name() + " as crashed (it was running when its run ended); measuring it again");
    pv.action = ResumeAction::run;
  }
  beat(run, true);
  if (stop_ && stop_()) {
    run.final_status = db::kRunInterrupted;
    return false;
  }
  if (!budget.may_start()) {
    run.final_status = db::kRunBudget;
    return false;
  }
  const double t0 = clock_();
  const std::string label = pv.v.name() + " (" + pp.p.shape() + ")";

  // can_run refusals are results too, with the reason; nothing to measure.
  std::optional<std::string> refusal;
  try {
    refusal = pv.v.can_run(pp.p, o.mode, dev_);
  } catch (const std::exception& e) {
    refusal = std::string("can_run threw: ") + e.what();
  }
  if (refusal) {
    db::ResultRecord r = run.result_row(pp, pv);
    r.status = db::kResultCannotRun;
    r.reason = *refusal;
    store_.record_result(r);
    ++rep.cannot_run;
    ++run.done;
    run.measuring_s += clock_() - t0;
    say("[" + std::to_string(run.done) + "/" + std::to_string(run.to_measure) + "] " + label +
        ": cannot run: " + one_line(*refusal));
    return true;
  }

  store_.mark_running(run.run_id, run.device_id, run.build_id, pp.problem_id, pv.variant_id, o.seed);
  if (!prepared && prepare_error.empty()) {
    say("preparing " + pp.p.shape() + " " + to_string(pp.p.dtype()) +
        ": seeded inputs, device buffers, float64 reference...");
    const double tp = clock_();
    try {
      measurer_.prepare(pp.p, o.mode, o.seed);
      prepared = true;
      say("  prepared in " + format_duration(clock_() - tp));
    } catch (const std::exception& e) {
      prepare_error = one_line(e.what());
      say("  preparing failed: " + prepare_error);
    }
  }
  VariantOutcome out;
  bool by_budget = false;  // whether the budget, not --time-cap, set this variant's cap
  if (!prepared) {
    out.status = db::kResultError;
    out.reason = "preparing the problem failed: " + prepare_error;
  } else {
    MeasureControl ctl;
    ctl.repeats = o.repeats;
    ctl.time_cap_s = budget.cap(o.variant_time_cap_s);
    by_budget = ctl.time_cap_s < o.variant_time_cap_s;
    ctl.kill_after_s = o.kill_after_s;
    ctl.levels = o.levels;
    ctl.stop = stop_;
    try {
      out = measurer_.measure(pv.v, ctl);
    } catch (const std::exception& e) {
      out = VariantOutcome{};
      out.status = db::kResultError;
      out.reason = one_line(e.what());
    }
  }
  if (out.interrupted) {
    // Leave the "running" marker: the run ends "interrupted", so --resume
    // re-runs this variant.
    run.final_status = db::kRunInterrupted;
    say(label + ": interrupted");
    return false;
  }
  if (!out.cut.empty()) rep.cuts.push_back(pv.v.name() + ": " + out.cut + (by_budget ? " (budget)" : " (--time-cap)"));
  db::ResultRecord r = run.result_row(pp, pv);
  r.status = out.status;
  r.reason = out.reason;
  r.correctness = out.correctness;
  r.determinism = out.determinism;
  r.timing = out.timing;
  store_.record_result(r);
  ++rep.measured;
  ++run.done;
  run.measuring_s += clock_() - t0;
  if (progress_) {
    std::string what = label + ": " + out.status;
    if (out.timing) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %.3f ms", out.timing->median_ms);
      what += buf;
    }
    if (out.determinism) what += " " + out.determinism->level;
    if (!out.reason.empty()) what += " (" + one_line(out.reason) + ")";
    *progress_ << "[" << run.done << "/" << run.to_measure << "] " << what << "... "
               << format_duration(clock_() - t0) << ", " << format_eta(run.done, run.to_measure, run.measuring_s)
               << "\n";
  }
  if (out.context_lost) {
    run.final_status = db::kRunFailed;
    return false;
  }
  return true;
}

void Tuner::measure_problems(Run& run) {
  Budget budget(run.o.budget_s, clock_);
  for (auto& pp : run.plan) {
    bool prepared = false;
    std::string prepare_error;
    for (auto& pv : pp.planned)
      if (!measure_variant(run, pp, pv, budget, prepared, prepare_error)) {
        run.stop = true;
        break;
      }
    if (prepared) measurer_.release();
    if (run.stop) break;
  }
}

// The config level check (tuner/levels.h) of every problem: the latest
// result of each variant in the run's chain (what its report ranks) compared
// within its config group; the outcomes are stored on this run's results
// (results of older runs in the chain are compared with, not changed).
void Tuner::check_config(Run& run) {
  for (const auto& pp : run.plan) {
    std::map<std::string, db::StoredResult> latest;
    for (db::Id run_id : run.chain)
      for (auto& r : store_.run_results(run_id)) {
        if (r.record.problem_id != pp.problem_id || r.record.status != db::kResultOk || !r.record.determinism) continue;
        auto it = latest.find(r.variant_name);
        if (it == latest.end() || it->second.id < r.id) latest[r.variant_name] = std::move(r);
      }
    std::vector<LevelSubject> subjects;
    std::vector<const db::StoredResult*> rows;
    for (const auto& [name, r] : latest) {
      subjects.push_back({name, config_group(store_.variant(r.record.variant_id)), &*r.record.determinism});
      rows.push_back(&r);
    }
    const std::vector<CheckOutcome> out = config_checks(subjects);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i]->record.run_id != run.run_id) continue;
      db::LevelChecks c = rows[i]->record.determinism->checks;
      if (c.config == out[i].outcome && out[i].note.empty()) continue;
      c.config = out[i].outcome;
      if (!out[i].note.empty()) c.note("config", out[i].note);
      store_.set_level_checks(rows[i]->id, c);
    }
  }
}

void Tuner::say(const std::string& line) {
  if (progress_) *progress_ << line << "\n";
}

TuneReport Tuner::run(const TuneOptions& o) {
  Run run{o};
  check_options(run);
  open_run(run);

  measurer_.set_wait_hook([&] { beat(run, false); });
  struct HookReset {
    Measurer& m;
    ~HookReset() { m.set_wait_hook({}); }
  } hook_reset{measurer_};
  // From here on an escaping exception marks the run failed.
  struct FailGuard {
    db::Store& s;
    db::Id id;
    bool armed = true;
    ~FailGuard() {
      if (!armed) return;
      try {
        s.finish_run(id, db::kRunFailed);
      } catch (...) {
      }
    }
  } guard{store_, run.run_id};

  plan_run(run);
  measure_problems(run);
  check_config(run);

  run.rep.remaining = run.to_measure - run.done;
  store_.finish_run(run.run_id, run.final_status);
  guard.armed = false;
  run.rep.status = run.final_status;
  for (const auto& pp : run.plan)
    run.rep.problems.push_back(report_problem(store_, run.chain, pp.problem_id, pp.p, o.allow_nondeterministic));
  return run.rep;
}

}  // namespace detfuse::tuner
