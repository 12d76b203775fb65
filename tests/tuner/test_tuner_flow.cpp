// The tuner's orchestration on the CPU: a fake registry, a scripted measurer
// and a real temporary SQLite store.
#include <gtest/gtest.h>

#include <sstream>

#include "kernels/common/error.h"
#include "tests/tuner/fakes.h"
#include "tests/tuner/tuner_fixture.h"
#include "tuner/best.h"
#include "tuner/records.h"
#include "tuner/resume.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {
namespace {

using testing::FakeClock;
using testing::FakeMeasurer;

struct Fixture : testing::TunerFixture {
  TuneOptions opts(std::vector<FlceProblem> ps) {
    TuneOptions o;
    o.problems.assign(ps.begin(), ps.end());
    o.command_line = "detfuse tune (test)";
    return o;
  }

  std::map<std::string, std::string> statuses(const db::Store& store, db::Id run) {
    std::map<std::string, std::string> m;
    for (const auto& r : store.run_results(run)) m[r.variant_name] = r.record.status;
    return m;
  }
};

TEST_F(Fixture, CompleteRunRecordsEveryVariantAndSelectsTheFastestDeterministic) {
  db::Store store(tmp / "t.db");
  meas.median_ms = {{"flce.bf16.mma.owning.bm64", 20}, {"flce.bf16.mma.owning.bm128", 15}, {"flce.bf16.mma.atomic.bm64", 5}};
  auto rep = tune(store, opts({testing::problem(8192, 256, 1000)}));
  EXPECT_EQ(rep.status, db::kRunComplete);
  EXPECT_EQ(rep.measured, 3);
  EXPECT_EQ(rep.cannot_run, 1);  // partials refuses N > 4096, recorded with the reason
  EXPECT_EQ(meas.prepares, 1);   // the reference is prepared once per problem
  auto st = statuses(store, rep.run_id);
  EXPECT_EQ(st.size(), 4u);  // fp32 variant not planned for a bf16 problem
  EXPECT_EQ(st["flce.bf16.mma.partials.bm64"], db::kResultCannotRun);
  for (const auto& r : store.run_results(rep.run_id))
    if (r.variant_name == "flce.bf16.mma.partials.bm64") EXPECT_NE(r.record.reason.find("N above"), std::string::npos);
  ASSERT_EQ(rep.problems.size(), 1u);
  ASSERT_TRUE(rep.problems[0].best);
  EXPECT_EQ(rep.problems[0].best->variant, "flce.bf16.mma.owning.bm128");  // atomic is faster but nondeterministic
  EXPECT_EQ(store.run(rep.run_id).status, db::kRunComplete);
  // The store agrees.
  auto dev_id = store.find_device(device_record(dev));
  auto pid = store.find_problem(testing::problem(8192, 256, 1000).key());
  ASSERT_TRUE(dev_id && pid);
  EXPECT_EQ(store.best(*dev_id, *pid, false)->variant_name, "flce.bf16.mma.owning.bm128");
  EXPECT_EQ(store.best(*dev_id, *pid, true)->variant_name, "flce.bf16.mma.atomic.bm64");
  EXPECT_NE(progress.str().find("[1/4]"), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("ETA"), std::string::npos);
}

TEST_F(Fixture, AllowNondeterministicLetsAtomicWin) {
  db::Store store(tmp / "t.db");
  meas.median_ms = {{"flce.bf16.mma.atomic.bm64", 5}};
  auto o = opts({testing::problem(1024, 256, 1000)});
  o.allow_nondeterministic = true;
  auto rep = tune(store, o);
  EXPECT_EQ(rep.problems[0].best->variant, "flce.bf16.mma.atomic.bm64");
}

TEST_F(Fixture, IncorrectAndErroringVariantsAreRecordedNotSelected) {
  db::Store store(tmp / "t.db");
  VariantOutcome bad;
  bad.status = db::kResultIncorrect;
  bad.reason = "error above tolerance";
  bad.correctness = db::Correctness{"full", {{"dW", 0.5}}, 1e-2, false};
  meas.scripted["flce.bf16.mma.owning.bm128"] = bad;
  meas.median_ms = {{"flce.bf16.mma.owning.bm128", 1}};
  auto rep = tune(store, opts({testing::problem(1024, 256, 1000)}));
  EXPECT_EQ(rep.problems[0].best->variant, "flce.bf16.mma.owning.bm64");
  EXPECT_EQ(statuses(store, rep.run_id)["flce.bf16.mma.owning.bm128"], db::kResultIncorrect);
}

TEST_F(Fixture, BadOptionsAreRejectedBeforeAnythingIsWritten) {
  db::Store store(tmp / "t.db");
  auto o = opts({testing::problem(1024, 256, 1000)});
  o.variants = {"flce.bf16.nope.bm1"};
  EXPECT_THROW(tune(store, o), Error);
  o.variants = {"flce.fp32.fma.owning.bm64"};  // another dtype
  EXPECT_THROW(tune(store, o), Error);
  o.variants = {};
  o.repeats = 1;
  EXPECT_THROW(tune(store, o), Error);
  EXPECT_TRUE(store.list_runs().empty());
}

TEST_F(Fixture, VariantFilter) {
  db::Store store(tmp / "t.db");
  auto o = opts({testing::problem(1024, 256, 1000)});
  o.variants = {"flce.bf16.mma.owning.bm64"};
  auto rep = tune(store, o);
  EXPECT_EQ(meas.measured, (std::vector<std::string>{"flce.bf16.mma.owning.bm64"}));
  EXPECT_EQ(rep.measured, 1);
}

TEST_F(Fixture, BudgetStopsCleanlyWithTheBestSoFarAndResumeFinishes) {
  db::Store store(tmp / "t.db");
  meas.seconds_per_variant = 10;
  auto o = opts({testing::problem(1024, 256, 1000), testing::problem(2048, 256, 1000)});
  o.budget_s = 25;  // starts at t=0, 10, 20; not at 30
  auto rep = tune(store, o);
  EXPECT_EQ(rep.status, db::kRunBudget);
  EXPECT_EQ(meas.measured.size(), 3u);
  EXPECT_EQ(rep.remaining, 5);
  EXPECT_EQ(store.run(rep.run_id).status, db::kRunBudget);
  ASSERT_TRUE(rep.problems[0].best);  // best so far
  // --resume continues without redoing the three finished variants.
  meas.measured.clear();
  o.budget_s = 0;
  o.resume = true;
  auto rep2 = tune(store, o);
  EXPECT_TRUE(rep2.resumed);
  EXPECT_EQ(rep2.status, db::kRunComplete);
  EXPECT_EQ(rep2.skipped, 3);
  EXPECT_EQ(meas.measured.size(), 5u);
  for (const auto& pr : rep2.problems) EXPECT_EQ(pr.ranked.size(), 4u);  // whole chain in the table
  // Nothing left to resume: a third --resume starts a new run that skips what
  // this build measured on this device (a repeated `make tune` ends at
  // once), with the results in its table; --force measures everything.
  meas.measured.clear();
  auto rep3 = tune(store, o);
  EXPECT_FALSE(rep3.resumed);
  EXPECT_EQ(rep3.status, db::kRunComplete);
  EXPECT_EQ(meas.measured.size(), 0u);
  EXPECT_EQ(rep3.skipped, 8);
  EXPECT_NE(rep3.resume_note.find("skips the variants this build already measured"), std::string::npos)
      << rep3.resume_note;
  for (const auto& pr : rep3.problems) {
    EXPECT_EQ(pr.ranked.size(), 4u);
    EXPECT_TRUE(pr.best);
  }
  EXPECT_EQ(rep3.problems[0].best->variant, rep2.problems[0].best->variant);
  o.force = true;
  auto rep4 = tune(store, o);
  EXPECT_FALSE(rep4.resumed);
  EXPECT_EQ(meas.measured.size(), 8u);
  EXPECT_EQ(rep4.skipped, 0);
}

TEST_F(Fixture, InterruptAbandonsTheVariantAndResumeRedoesIt) {
  db::Store store(tmp / "t.db");
  auto o = opts({testing::problem(1024, 256, 1000)});
  VariantOutcome intr;
  intr.interrupted = true;  // Ctrl-C arrived while it ran
  meas.scripted["flce.bf16.mma.owning.bm128"] = intr;
  auto rep = tune(store, o);
  EXPECT_EQ(rep.status, db::kRunInterrupted);
  EXPECT_EQ(store.run(rep.run_id).status, db::kRunInterrupted);
  EXPECT_EQ(meas.measured, (std::vector<std::string>{"flce.bf16.mma.owning.bm64", "flce.bf16.mma.owning.bm128"}));
  meas.scripted.clear();
  meas.measured.clear();
  o.resume = true;
  auto rep2 = tune(store, o);
  EXPECT_TRUE(rep2.resumed);
  EXPECT_EQ(rep2.status, db::kRunComplete);
  EXPECT_EQ(rep2.crashed_marked, 0);
  // bm64 done; bm128 re-run; the others measured.
  EXPECT_EQ(meas.measured, (std::vector<std::string>{"flce.bf16.mma.owning.bm128", "flce.bf16.mma.atomic.bm64",
                                                     "flce.bf16.mma.partials.bm64"}));
  EXPECT_EQ(rep2.problems[0].ranked.size(), 4u);
}

TEST_F(Fixture, StopBetweenVariantsMarksTheRunInterrupted) {
  db::Store store(tmp / "t.db");
  auto rep = tune(store, opts({testing::problem(1024, 256, 1000)}), [&] { return meas.measured.size() >= 1; });
  EXPECT_EQ(rep.status, db::kRunInterrupted);
  EXPECT_EQ(meas.measured.size(), 1u);
}

TEST_F(Fixture, ResumeAfterTheProcessDiedRecordsTheRunningVariantAsCrashed) {
  db::Store store(tmp / "t.db");
  auto o = opts({testing::problem(1024, 256, 1000)});
  // Simulate a process killed while measuring owning.bm128: the run is still
  // "running" and so is that variant's marker.
  meas.on_measure = [&](const std::string& name) {
    if (name == "flce.bf16.mma.owning.bm128") throw std::string("killed");  // not a std::exception: escapes
  };
  try {
    tune(store, o);
    FAIL() << "expected the simulated death to escape";
  } catch (const std::string&) {
  }
  // The guard marked the run failed (a real kill would leave it running: both resume the same way).
  auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  const size_t finished_before = store.run_results(runs[0].id).size() - 1;  // less the "running" marker
  meas.on_measure = nullptr;
  meas.measured.clear();
  o.resume = true;
  auto rep = tune(store, o);
  EXPECT_TRUE(rep.resumed);
  EXPECT_EQ(rep.crashed_marked, 1);
  // The process died from outside (its run ended without recording the
  // variant): a presumed crash, kept as history, and the variant measured again.
  EXPECT_EQ(meas.measured, (std::vector<std::string>{"flce.bf16.mma.owning.bm128", "flce.bf16.mma.atomic.bm64",
                                                      "flce.bf16.mma.partials.bm64"}));
  int crashed_rows = 0;
  for (const auto& r : store.run_results(runs[0].id)) crashed_rows += r.record.status == db::kResultCrashed;
  EXPECT_EQ(crashed_rows, 1);
  EXPECT_EQ(store.run_results(runs[0].id).size(), finished_before + 1);  // nothing finished was lost
  bool found = false;
  for (const auto& r : rep.problems[0].ranked)
    if (r.c.variant == "flce.bf16.mma.owning.bm128") {
      found = true;
      EXPECT_EQ(r.c.status, db::kResultOk);
    }
  EXPECT_TRUE(found);
}

TEST_F(Fixture, ResumeOfARunStillMarkedRunning) {
  db::Store store(tmp / "t.db");
  // Build the state a SIGKILL leaves: run "running", one result, one marker.
  const db::Id dev_id = store.find_or_create_device(device_record(dev));
  const db::Id build_id = store.find_or_create_build(this_build());
  const auto p = testing::problem(1024, 256, 1000);
  const db::Id pid = store.find_or_create_problem(problem_record(p));
  db::RunRecord rr;
  rr.seed = 0;
  rr.repeats = 5;
  const db::Id run = store.begin_run(rr);
  const db::Id v1 = store.find_or_create_variant(variant_record(reg.find_flce("flce.bf16.mma.owning.bm64")->desc));
  const db::Id v2 = store.find_or_create_variant(variant_record(reg.find_flce("flce.bf16.mma.atomic.bm64")->desc));
  db::ResultRecord done;
  done.run_id = run;
  done.device_id = dev_id;
  done.build_id = build_id;
  done.problem_id = pid;
  done.variant_id = v1;
  done.status = db::kResultError;
  done.reason = "whatever";
  store.record_result(done);
  store.mark_running(run, dev_id, build_id, pid, v2, 0);
  auto o = opts({p});
  o.resume = true;
  auto rep = tune(store, o);
  EXPECT_TRUE(rep.resumed);
  // The run (no owner recorded: as written before schema v3) is judged gone,
  // marked crashed with its running row; that variant is measured again.
  ASSERT_EQ(rep.dead_runs.size(), 1u);
  EXPECT_EQ(store.run(run).status, db::kRunCrashed);
  EXPECT_EQ(rep.skipped, 1);
  EXPECT_EQ(rep.retried, 1);
  EXPECT_EQ(meas.measured, (std::vector<std::string>{"flce.bf16.mma.owning.bm128", "flce.bf16.mma.atomic.bm64",
                                                      "flce.bf16.mma.partials.bm64"}));
  std::map<std::string, std::string> old_rows;
  for (const auto& r : store.run_results(run)) old_rows[r.variant_name] = r.record.status;
  EXPECT_EQ(old_rows["flce.bf16.mma.owning.bm64"], db::kResultError);   // kept
  EXPECT_EQ(old_rows["flce.bf16.mma.atomic.bm64"], db::kResultCrashed);  // history
  for (const auto& s : store.variant_states(dev_id, build_id, pid, 0))
    if (s.variant_name == "flce.bf16.mma.atomic.bm64") EXPECT_EQ(s.status, db::kResultOk);
}

TEST_F(Fixture, ResumeIgnoresRunsOfOtherSeedsOrProblems) {
  db::Store store(tmp / "t.db");
  auto o = opts({testing::problem(1024, 256, 1000)});
  o.budget_s = 5;  // one variant, then budget
  tune(store, o);
  meas.measured.clear();
  o.budget_s = 0;
  o.resume = true;
  o.seed = 7;
  auto rep = tune(store, o);
  EXPECT_FALSE(rep.resumed);
  EXPECT_NE(rep.resume_note.find("seed"), std::string::npos) << rep.resume_note;
  EXPECT_EQ(meas.measured.size(), 4u);
  o.seed = 0;
  o.problems = {testing::problem(4096, 256, 1000)};
  meas.measured.clear();
  rep = tune(store, o);
  EXPECT_FALSE(rep.resumed);
}

TEST(Resume, PlanAndTags) {
  db::VariantState s;
  s.status = db::kResultOk;
  EXPECT_EQ(plan_resume(nullptr, db::kRunInterrupted), ResumeAction::run);
  EXPECT_EQ(plan_resume(&s, db::kRunRunning), ResumeAction::skip);
  s.status = db::kResultRunning;
  EXPECT_EQ(plan_resume(&s, db::kRunInterrupted), ResumeAction::run);
  EXPECT_EQ(plan_resume(&s, db::kRunRunning), ResumeAction::mark_crashed_and_run);
  EXPECT_EQ(plan_resume(&s, db::kRunFailed), ResumeAction::mark_crashed_and_run);
  s.status = db::kResultCrashed;  // recorded by its owner: the variant took its worker down
  s.crash_presumed = false;
  EXPECT_EQ(plan_resume(&s, db::kRunComplete), ResumeAction::skip);
  EXPECT_EQ(plan_resume(&s, db::kRunComplete, /*retry_crashed=*/true), ResumeAction::run);
  s.crash_presumed = true;  // presumed by another process: the owner died
  EXPECT_EQ(plan_resume(&s, db::kRunCrashed), ResumeAction::run);
  EXPECT_EQ(resumed_uid("detfuse tune --resume" + resume_tag("abc")), "abc");
  EXPECT_EQ(resumed_uid("detfuse tune"), "");
}

// ------------------------------------------------------- best / nearest shape
TEST_F(Fixture, BestFallsBackToTheNearestTunedShapeThenTheHeuristic) {
  db::Store store(tmp / "t.db");
  meas.median_ms = {{"flce.bf16.mma.owning.bm64", 20}, {"flce.bf16.mma.owning.bm128", 15}, {"flce.bf16.mma.partials.bm64", 50}};
  tune(store, opts({testing::problem(4096, 1024, 32000)}));
  meas.median_ms = {{"flce.bf16.mma.owning.bm64", 10}, {"flce.bf16.mma.owning.bm128", 15}};
  tune(store, opts({testing::problem(16384, 4096, 128256)}));
  HeuristicFn h = heuristic_from(reg, [this](const FlceProblem&, FlceMode, const DeviceInfo&) -> const FlceVariant& {
    return *reg.find_flce("flce.bf16.mma.partials.bm64");
  });
  auto ids = device_rows_for(store, dev);
  ASSERT_EQ(ids.size(), 1u);
  // Exact.
  auto a = resolve_best(&store, ids, dev, testing::problem(4096, 1024, 32000), Mode::forward_backward, false, reg, h);
  EXPECT_EQ(a.source, ChoiceSource::tuned);
  EXPECT_EQ(a.variant, "flce.bf16.mma.owning.bm128");
  // Nearest: 8192,4096,128256 is one doubling from the big one.
  a = resolve_best(&store, ids, dev, testing::problem(8192, 4096, 128256), Mode::forward_backward, false, reg, h);
  EXPECT_EQ(a.source, ChoiceSource::nearest);
  EXPECT_EQ(a.variant, "flce.bf16.mma.owning.bm64");
  EXPECT_DOUBLE_EQ(a.distance, 1.0);
  EXPECT_EQ(a.tuned_problem_key, testing::problem(16384, 4096, 128256).key());
  // Nothing tuned with these options (label smoothing): heuristic, said so.
  auto p = testing::problem(4096, 1024, 32000);
  p.label_smoothing = 0.1;
  a = resolve_best(&store, ids, dev, p, Mode::forward_backward, false, reg, h);
  EXPECT_EQ(a.source, ChoiceSource::heuristic);
  EXPECT_EQ(a.variant, "flce.bf16.mma.partials.bm64");
  // No store at all.
  a = resolve_best(nullptr, {}, dev, p, Mode::forward_backward, false, reg, h);
  EXPECT_EQ(a.source, ChoiceSource::heuristic);
  // A stored best that this build lacks is passed over with a note.
  Registry small;
  small.add(testing::fake_flce("partials", 64, DType::bf16, true, 1 << 30));
  HeuristicFn h2 = heuristic_from(small, [&](const FlceProblem&, FlceMode, const DeviceInfo&) -> const FlceVariant& {
    return small.flce()[0];
  });
  a = resolve_best(&store, ids, dev, testing::problem(4096, 1024, 32000), Mode::forward_backward, false, small, h2);
  EXPECT_EQ(a.source, ChoiceSource::heuristic);
  bool noted = false;
  for (const auto& n : a.notes) noted = noted || n.find("has no variant") != std::string::npos;
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace detfuse::tuner
