#include "tuner/tuner.h"

#include <map>
#include <set>

#include "kernels/common/error.h"
#include "tuner/footprint.h"
#include "tuner/interrupt.h"
#include "tuner/records.h"
#include "tuner/resume.h"
#include "tuner/text.h"

namespace detfuse::tuner {

std::vector<const FlceVariant*> plan_variants(const Registry& reg, const FlceProblem& p,
                                              const std::vector<std::string>& names) {
  std::vector<const FlceVariant*> out;
  if (names.empty()) {
    for (const auto& v : reg.flce())
      if (v.desc.dtype == p.dtype) out.push_back(&v);
    return out;
  }
  std::set<std::string> seen;
  for (const auto& n : names) {
    if (!seen.insert(n).second) continue;
    const FlceVariant* v = reg.find_flce(n);
    if (!v) throw invalid_argument("--variant: no FLCE variant named '" + n + "' (see `detfuse list`)");
    if (v->desc.dtype != p.dtype)
      throw invalid_argument("--variant: '" + n + "' is a " + to_string(v->desc.dtype) + " variant, the problem is " +
                             to_string(p.dtype));
    out.push_back(v);
  }
  return out;
}

ProblemReport report_problem(const db::Store& store, const std::set<db::Id>& runs, db::Id problem_id,
                             const FlceProblem& p, bool allow_nondeterministic) {
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
  rep.ranked = rank_candidates(cands, allow_nondeterministic);
  if (!rep.ranked.empty() && rep.ranked.front().rank == 1) rep.best = rep.ranked.front().c;
  return rep;
}

Tuner::Tuner(db::Store& store, const Registry& reg, const DeviceInfo& dev, FlceMeasurer& measurer,
             std::ostream* progress, Budget::Clock clock)
    : store_(store), reg_(reg), dev_(dev), measurer_(measurer), progress_(progress), clock_(std::move(clock)),
      stop_(interrupt_requested) {}

namespace {

struct PlannedVariant {
  const FlceVariant* v = nullptr;
  db::Id variant_id = 0;
  ResumeAction action = ResumeAction::run;
  const db::VariantState* state = nullptr;
};

struct PlannedProblem {
  FlceProblem p;
  db::Id problem_id = 0;
  std::vector<db::VariantState> states;  // resumed run's rows (owned here)
  std::vector<PlannedVariant> variants;
};

}  // namespace

TuneReport Tuner::run(const TuneOptions& o) {
  // ---- validate everything before writing anything
  if (o.problems.empty()) throw invalid_argument("tune: no problem given (use --shape or --preset)");
  if (o.repeats < 2) throw invalid_argument("--repeats: must be >= 2 to check determinism, got " + std::to_string(o.repeats));
  if (o.budget_s < 0) throw invalid_argument("--budget: must be >= 0");
  std::vector<std::vector<const FlceVariant*>> variants;
  for (const auto& p : o.problems) {
    p.validate();
    check_fits(p, &dev_);  // a shape that cannot fit is an error before anything is written
    variants.push_back(plan_variants(reg_, p, o.variants));
  }

  TuneReport rep;
  const db::Id device_id = store_.find_or_create_device(device_record(dev_));
  const db::Id build_id = store_.find_or_create_build(this_build());

  std::vector<PlannedProblem> plan(o.problems.size());
  std::set<db::Id> problem_ids;
  for (size_t i = 0; i < o.problems.size(); ++i) {
    plan[i].p = o.problems[i];
    plan[i].problem_id = store_.find_or_create_problem(problem_record(o.problems[i]));
    problem_ids.insert(plan[i].problem_id);
  }

  // ---- runs whose process is gone are marked crashed (every tune does it:
  // a killed run does not stay "running" forever); live ones are left alone.
  for (const auto& line : mark_dead_runs(store_, o.owner_check)) {
    rep.dead_runs.push_back(line);
    if (progress_) *progress_ << line << "\n";
  }

  // ---- the run (a continuation of an unfinished one with --resume)
  std::set<db::Id> chain;  // runs whose results count as done
  std::string resumed_uid_text;
  if (o.resume) {
    std::string why;
    std::vector<db::Id> older;
    if (auto id = find_resumable_run(store_, device_id, build_id, problem_ids, o.seed, &why, &older)) {
      for (db::Id a : older) {
        const db::RunRecord r = store_.run(a);
        if (store_.mark_run_abandoned(a, "superseded: --resume continued the newer run " + store_.run(*id).uid))
          rep.abandoned.push_back(r.uid);
      }
      if (!rep.abandoned.empty() && progress_)
        *progress_ << "marked " << rep.abandoned.size() << " older unfinished run(s) of these problems abandoned\n";
      chain = resume_chain(store_, *id);
      const db::RunRecord old = store_.run(*id);
      resumed_uid_text = old.uid;
      rep.resumed = true;
      rep.resume_note = "resuming run " + old.uid + " (" + old.status + ", " + std::to_string(chain.size()) +
                        " run(s) in its chain)";
    } else {
      rep.resume_note = "nothing to resume (" + why + "); starting a new run";
    }
    if (progress_) *progress_ << rep.resume_note << "\n";
  }
  db::Id run_id = 0;
  {
    db::RunRecord r;
    r.budget_seconds = o.budget_s;
    r.status = db::kRunRunning;
    r.command_line = o.command_line + (rep.resumed ? resume_tag(resumed_uid_text) : "");
    r.repeats = o.repeats;
    r.seed = o.seed;
    r.allow_nondeterministic = o.allow_nondeterministic;
    r.owner = o.owner;
    r.study = o.study;
    run_id = store_.begin_run(r);
  }
  // The heartbeat: between variants and, while a supervised worker measures,
  // about every kHeartbeatEveryS (the measurer's wait hook). Cheap: one short
  // transaction. If another process marked this run crashed or abandoned (it
  // misjudged the owner), the run goes on: finish_run and record_result win.
  double last_beat = clock_();
  bool told_marked = false;
  auto beat = [&](bool force) {
    if (!force && clock_() - last_beat < kHeartbeatEveryS) return;
    last_beat = clock_();
    try {
      const std::string st = store_.heartbeat(run_id);
      if (st != db::kRunRunning && !told_marked && progress_) {
        told_marked = true;
        *progress_ << "note: another process marked this run " << st << "; it goes on and its results stand\n";
      }
    } catch (const std::exception& e) {
      if (progress_) *progress_ << "note: heartbeat failed: " << one_line(e.what()) << "\n";
    }
  };
  measurer_.set_wait_hook([&] { beat(false); });
  struct HookReset {
    FlceMeasurer& m;
    ~HookReset() { m.set_wait_hook({}); }
  } hook_reset{measurer_};
  std::map<db::Id, std::string> chain_status;
  for (db::Id id : chain) chain_status[id] = store_.run(id).status;
  chain.insert(run_id);
  rep.run_id = run_id;
  rep.run_uid = store_.run(run_id).uid;

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
  } guard{store_, run_id};

  int to_measure = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    auto& pp = plan[i];
    if (rep.resumed) {
      for (const auto& st : store_.variant_states(device_id, build_id, pp.problem_id, o.seed))
        if (chain.count(st.run_id) && st.run_id != run_id) pp.states.push_back(st);
    }
    for (const FlceVariant* v : variants[i]) {
      PlannedVariant pv;
      pv.v = v;
      pv.variant_id = store_.find_or_create_variant(variant_record(v->desc));
      for (const auto& st : pp.states)
        if (st.variant_id == pv.variant_id) pv.state = &st;
      pv.action = rep.resumed && pv.state ? plan_resume(pv.state, chain_status[pv.state->run_id], o.retry_crashed)
                                          : ResumeAction::run;
      if (pv.state && pv.state->status == db::kResultCrashed && pv.action == ResumeAction::run) ++rep.retried;
      if (pv.action != ResumeAction::skip) ++to_measure;
      pp.variants.push_back(pv);
    }
  }

  Budget budget(o.budget_s, clock_);
  std::string final_status = db::kRunComplete;
  int done = 0;
  double measuring_s = 0;
  bool stop = false;

  auto make_result = [&](const PlannedProblem& pp, const PlannedVariant& pv) {
    db::ResultRecord r;
    r.run_id = run_id;
    r.device_id = device_id;
    r.build_id = build_id;
    r.problem_id = pp.problem_id;
    r.variant_id = pv.variant_id;
    r.seed = o.seed;
    return r;
  };

  for (auto& pp : plan) {
    if (stop) break;
    bool prepared = false;
    std::string prepare_error;
    for (auto& pv : pp.variants) {
      if (pv.action == ResumeAction::skip) {
        ++rep.skipped;
        continue;
      }
      if (pv.action == ResumeAction::mark_crashed_and_run) {
        // Its run ended without recording it: a presumed crash (history), then measured again.
        if (store_.mark_crashed(pv.state->result_id, kCrashedReason)) ++rep.crashed_marked;
        if (progress_)
          *progress_ << "recorded " << pv.v->desc.name << " as crashed (it was running when its run ended); measuring it again\n";
        pv.action = ResumeAction::run;
      }
      beat(true);
      if (stop_ && stop_()) {
        final_status = db::kRunInterrupted;
        stop = true;
        break;
      }
      if (!budget.may_start()) {
        final_status = db::kRunBudget;
        stop = true;
        break;
      }
      const double t0 = clock_();
      const std::string label = pv.v->desc.name + " (" + pp.p.shape() + ")";

      // can_run refusals are results too, with the reason; nothing to measure.
      std::optional<std::string> refusal;
      try {
        refusal = pv.v->can_run(pp.p, o.mode, dev_);
      } catch (const std::exception& e) {
        refusal = std::string("can_run threw: ") + e.what();
      }
      if (refusal) {
        db::ResultRecord r = make_result(pp, pv);
        r.status = db::kResultCannotRun;
        r.reason = *refusal;
        store_.record_result(r);
        ++rep.cannot_run;
        ++done;
        measuring_s += clock_() - t0;
        if (progress_)
          *progress_ << "[" << done << "/" << to_measure << "] " << label << ": cannot run: " << one_line(*refusal)
                     << "\n";
        continue;
      }

      store_.mark_running(run_id, device_id, build_id, pp.problem_id, pv.variant_id, o.seed);
      VariantOutcome out;
      if (!prepared && prepare_error.empty()) {
        if (progress_)
          *progress_ << "preparing " << pp.p.shape() << " " << to_string(pp.p.dtype)
                     << ": seeded inputs, device buffers, float64 reference...\n";
        const double tp = clock_();
        try {
          measurer_.prepare(pp.p, o.mode, o.seed);
          prepared = true;
          if (progress_) *progress_ << "  prepared in " << format_duration(clock_() - tp) << "\n";
        } catch (const std::exception& e) {
          prepare_error = one_line(e.what());
          if (progress_) *progress_ << "  preparing failed: " << prepare_error << "\n";
        }
      }
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
        ctl.stop = stop_;
        try {
          out = measurer_.measure(*pv.v, ctl);
        } catch (const std::exception& e) {
          out = VariantOutcome{};
          out.status = db::kResultError;
          out.reason = one_line(e.what());
        }
      }
      if (out.interrupted) {
        // Leave the "running" marker: the run ends "interrupted", so --resume
        // re-runs this variant.
        final_status = db::kRunInterrupted;
        stop = true;
        if (progress_) *progress_ << label << ": interrupted\n";
        break;
      }
      if (!out.cut.empty())
        rep.cuts.push_back(pv.v->desc.name + ": " + out.cut +
                           (by_budget ? " (budget)" : " (--time-cap)"));
      db::ResultRecord r = make_result(pp, pv);
      r.status = out.status;
      r.reason = out.reason;
      r.correctness = out.correctness;
      r.determinism = out.determinism;
      r.timing = out.timing;
      store_.record_result(r);
      ++rep.measured;
      ++done;
      measuring_s += clock_() - t0;
      if (progress_) {
        std::string what = label + ": " + out.status;
        if (out.timing) {
          char buf[64];
          std::snprintf(buf, sizeof buf, " %.3f ms", out.timing->median_ms);
          what += buf;
        }
        if (out.determinism) what += " " + out.determinism->level;
        if (!out.reason.empty()) what += " (" + one_line(out.reason) + ")";
        *progress_ << "[" << done << "/" << to_measure << "] " << what << "... "
                   << format_duration(clock_() - t0) << ", " << format_eta(done, to_measure, measuring_s) << "\n";
      }
      if (out.context_lost) {
        final_status = db::kRunFailed;
        stop = true;
        break;
      }
    }
    if (prepared) measurer_.release();
  }
  rep.remaining = to_measure - done;
  store_.finish_run(run_id, final_status);
  guard.armed = false;
  rep.status = final_status;
  for (const auto& pp : plan)
    rep.problems.push_back(report_problem(store_, chain, pp.problem_id, pp.p, o.allow_nondeterministic));
  return rep;
}

}  // namespace detfuse::tuner
