// Runs that know who owns them: owner judgement (same host by pid and start
// time, other hosts by heartbeat age), --resume refusing a live owner, dead
// runs marked crashed, older runs abandoned, --retry-crashed, the heartbeat,
// and real concurrent processes tuning into one store (different GPUs: both
// finish and lose nothing; the same GPU: the second --resume refuses and the
// first finishes). Results are counted before and after.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include "kernels/common/error.h"
#include "tests/tuner/fakes.h"
#include "tuner/ownership.h"
#include "tuner/records.h"
#include "tuner/resume.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {
namespace {

// A pid that no process has now: a child that exited and was reaped.
int64_t dead_pid() {
  pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, nullptr, 0);
  return p;
}

TEST(Ownership, OwnerJudgement) {
  const db::RunOwner me = this_process_owner();
  EXPECT_EQ(me.pid, getpid());
  EXPECT_EQ(me.host, this_host());
  ASSERT_GT(me.start_time, 0);
  EXPECT_EQ(process_start_ms(getpid()), me.start_time);
  EXPECT_FALSE(owner_gone(me, 0.0));
  EXPECT_FALSE(owner_gone(me, 1e9));  // same host: the pid decides, not the heartbeat

  db::RunOwner dead = me;
  dead.pid = dead_pid();
  auto why = owner_gone(dead, 0.0);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("is gone"), std::string::npos) << *why;

  db::RunOwner reused = me;  // our pid, but a process that started earlier
  reused.start_time -= 60000;
  why = owner_gone(reused, 0.0);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("started later"), std::string::npos) << *why;

  db::RunOwner elsewhere{"another-host.example", 4242, 1};
  EXPECT_FALSE(owner_gone(elsewhere, 5.0));
  EXPECT_TRUE(owner_gone(elsewhere, kStaleHeartbeatS + 1));
  EXPECT_TRUE(owner_gone(elsewhere, std::nan("")));
  EXPECT_TRUE(owner_gone(db::RunOwner{}, 0.0));  // pre-v3 run: no owner recorded
}

struct Own : ::testing::Test {
  testing::TempDir tmp;
  Registry reg = testing::fake_registry();
  DeviceInfo dev = testing::fake_device();
  testing::FakeMeasurer meas;
  std::ostringstream progress;
  FlceProblem p = testing::problem(1024, 256, 1000);

  TuneReport tune(db::Store& store, TuneOptions o) {
    Tuner t(store, reg, dev, meas, &progress);
    t.set_stop([] { return false; });
    return t.run(o);
  }
  TuneOptions opts(bool resume = false) {
    TuneOptions o;
    o.problems = {p};
    o.resume = resume;
    o.command_line = "detfuse tune (test)";
    return o;
  }
  // A run as another process leaves it: owner given, one finished result, one
  // variant still "running".
  db::Id foreign_run(db::Store& store, const db::RunOwner& owner, const std::string& started_at = "",
                     const std::string& status = db::kRunRunning) {
    const db::Id d = store.find_or_create_device(device_record(dev));
    const db::Id b = store.find_or_create_build(this_build());
    const db::Id pr = store.find_or_create_problem(problem_record(p));
    db::RunRecord rr;
    rr.repeats = 5;
    rr.owner = owner;
    rr.started_at = started_at;
    rr.status = status;
    const db::Id run = store.begin_run(rr);
    db::ResultRecord done;
    done.run_id = run;
    done.device_id = d;
    done.build_id = b;
    done.problem_id = pr;
    done.variant_id = store.find_or_create_variant(variant_record(reg.find_flce("flce.bf16.mma.owning.bm64")->desc));
    done.status = db::kResultError;
    done.reason = "finished before";
    store.record_result(done);
    if (status == db::kRunRunning)
      store.mark_running(run, d, b, pr,
                         store.find_or_create_variant(variant_record(reg.find_flce("flce.bf16.mma.atomic.bm64")->desc)), 0);
    return run;
  }
  size_t total_results(const db::Store& store) {
    size_t n = 0;
    for (const auto& r : store.list_runs()) n += store.run_results(r.id).size();
    return n;
  }
};

TEST_F(Own, ResumeRefusesARunWhoseOwnerIsAlive) {
  db::Store store(tmp / "t.db");
  const db::Id live = foreign_run(store, this_process_owner());
  const size_t runs = store.list_runs().size(), results = total_results(store);
  try {
    tune(store, opts(true));
    ADD_FAILURE() << "resumed a live run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is still running (pid " + std::to_string(getpid())), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(store.run(live).uid), std::string::npos);
  }
  // Nothing changed: no new run, the live run and its rows untouched.
  EXPECT_EQ(store.list_runs().size(), runs);
  EXPECT_EQ(total_results(store), results);
  EXPECT_EQ(store.run(live).status, db::kRunRunning);
  for (const auto& r : store.run_results(live))
    if (r.variant_name == "flce.bf16.mma.atomic.bm64") EXPECT_EQ(r.record.status, db::kResultRunning);
  // A plain tune (no --resume) leaves the live run alone too.
  auto rep = tune(store, opts(false));
  EXPECT_TRUE(rep.dead_runs.empty());
  EXPECT_EQ(store.run(live).status, db::kRunRunning);
}

TEST_F(Own, RunsOfAGoneProcessAreMarkedCrashedAndResumed) {
  db::Store store(tmp / "t.db");
  db::RunOwner gone = this_process_owner();
  gone.pid = dead_pid();
  const db::Id run = foreign_run(store, gone);
  auto rep = tune(store, opts(true));
  ASSERT_EQ(rep.dead_runs.size(), 1u);
  EXPECT_NE(rep.dead_runs[0].find("is gone"), std::string::npos) << rep.dead_runs[0];
  EXPECT_EQ(store.run(run).status, db::kRunCrashed);
  EXPECT_NE(store.run(run).end_reason.find("pid " + std::to_string(gone.pid)), std::string::npos);
  EXPECT_TRUE(rep.resumed);
  EXPECT_EQ(rep.status, db::kRunComplete);
  EXPECT_EQ(rep.skipped, 1);            // the finished one
  EXPECT_EQ(meas.measured.size(), 3u);  // the presumed crash (atomic) again, owning.bm128, partials
  for (const auto& r : store.run_results(run)) EXPECT_NE(r.record.status, db::kResultRunning);
}

TEST_F(Own, OtherHostsAreJudgedByHeartbeatAge) {
  db::Store store(tmp / "t.db");
  const db::RunOwner remote{"gpu-node-17.example", 4242, 1};
  // An hour-old heartbeat: gone.
  const db::Id stale = foreign_run(store, remote, "2000-01-01T00:00:00.000Z");
  auto rep = tune(store, opts(true));
  EXPECT_EQ(store.run(stale).status, db::kRunCrashed);
  EXPECT_TRUE(rep.resumed);
  // A fresh one (started now): alive, refused.
  const db::Id fresh = foreign_run(store, remote);
  EXPECT_THROW(tune(store, opts(true)), Error);
  EXPECT_EQ(store.run(fresh).status, db::kRunRunning);
}

TEST_F(Own, OlderUnfinishedRunsAreAbandoned) {
  db::Store store(tmp / "t.db");
  auto o = opts();
  o.budget_s = 1e-9;  // stops after the first variant
  testing::FakeClock clock;
  meas.clock = &clock;
  Tuner t1(store, reg, dev, meas, &progress, clock.fn());
  t1.set_stop([] { return false; });
  const auto r1 = t1.run(o);
  const auto r2 = t1.run(o);  // a second, newer unfinished run of the same problem
  ASSERT_EQ(store.run(r1.run_id).status, db::kRunBudget);
  ASSERT_EQ(store.run(r2.run_id).status, db::kRunBudget);
  auto rep = tune(store, opts(true));
  EXPECT_TRUE(rep.resumed);
  EXPECT_NE(rep.resume_note.find(store.run(r2.run_id).uid), std::string::npos) << rep.resume_note;
  ASSERT_EQ(rep.abandoned.size(), 1u);
  EXPECT_EQ(rep.abandoned[0], store.run(r1.run_id).uid);
  EXPECT_EQ(store.run(r1.run_id).status, db::kRunAbandoned);
  EXPECT_EQ(store.run_results(r1.run_id).size(), 1u);  // its result is kept
}

TEST_F(Own, RetryCrashedMeasuresOwnerRecordedCrashesAgain) {
  db::Store store(tmp / "t.db");
  VariantOutcome crash;
  crash.status = db::kResultCrashed;
  crash.reason = "the worker died of signal 6 (Aborted)";
  meas.scripted["flce.bf16.mma.owning.bm128"] = crash;
  auto o = opts();
  o.budget_s = 0;
  testing::FakeClock clock;
  meas.clock = &clock;
  o.budget_s = 25;  // 3 of 4 variants (10 s each), then budget
  Tuner t(store, reg, dev, meas, &progress, clock.fn());
  t.set_stop([] { return false; });
  const auto first = t.run(o);
  ASSERT_EQ(first.status, db::kRunBudget);
  meas.scripted.clear();
  meas.measured.clear();
  auto r = tune(store, opts(true));  // without --retry-crashed: the crash stands
  EXPECT_EQ(r.retried, 0);
  EXPECT_EQ(std::count(meas.measured.begin(), meas.measured.end(), "flce.bf16.mma.owning.bm128"), 0);
  // Interrupt-free chain is complete now; a new budget run to retry within.
  meas.scripted["flce.bf16.mma.owning.bm128"] = crash;
  meas.measured.clear();
  const auto second = t.run(o);
  ASSERT_EQ(second.status, db::kRunBudget);
  meas.scripted.clear();
  meas.measured.clear();
  auto ro = opts(true);
  ro.retry_crashed = true;
  r = tune(store, ro);
  EXPECT_EQ(r.retried, 1);
  EXPECT_EQ(std::count(meas.measured.begin(), meas.measured.end(), "flce.bf16.mma.owning.bm128"), 1);
  for (const auto& pr : r.problems)
    for (const auto& row : pr.ranked)
      if (row.c.variant == "flce.bf16.mma.owning.bm128") EXPECT_EQ(row.c.status, db::kResultOk);
}

// A measurer that waits like a supervised one: it calls the wait hook while
// "measuring", the clock moving `step` seconds before each call; `probe` runs
// before and after the waiting.
struct WaitingMeasurer : testing::FakeMeasurer {
  std::function<void()> hook, probe;
  double step = 4;
  void set_wait_hook(std::function<void()> h) override { hook = std::move(h); }
  VariantOutcome measure(const FlceVariant& v, const MeasureControl& c) override {
    probe();
    for (int i = 0; i < 5 && hook; ++i) {
      clock->now += step;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));  // timestamps have ms resolution
      hook();
    }
    probe();
    return FakeMeasurer::measure(v, c);
  }
};

TEST_F(Own, HeartbeatIsWrittenWhileAVariantIsMeasured) {
  db::Store store(tmp / "t.db");
  testing::FakeClock clock;
  WaitingMeasurer wm;
  wm.clock = &clock;
  wm.seconds_per_variant = 0;
  std::vector<std::string> seen;
  wm.probe = [&] {
    for (const auto& u : store.unfinished_runs()) seen.push_back(u.record.heartbeat_at);
  };
  Tuner t(store, reg, dev, wm, &progress, clock.fn());
  t.set_stop([] { return false; });
  auto o = opts();
  o.variants = {"flce.bf16.mma.owning.bm64"};
  t.run(o);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[0], seen[1]);      // 20 s of waiting: the hook wrote heartbeats
  EXPECT_TRUE(wm.hook == nullptr);  // the tuner took its hook back
  // Rate-limited: waiting that takes no time writes none.
  seen.clear();
  wm.step = 0;
  t.run(o);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], seen[1]);
}

// ------------------------------------------------ several processes, one store

// Runs `body` in a child process; returns a waiter for its exit status.
pid_t in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 98;
    }
    _exit(code);
  }
  return pid;
}
int exit_code(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST_F(Own, TwoProcessesOnDifferentGpusIntoOneStoreLoseNothing) {
  const auto path = tmp / "shared.db";
  { db::Store init(path); }
  const std::vector<FlceProblem> problems = {testing::problem(1024, 256, 1000), testing::problem(2048, 256, 1000)};
  auto tuner_on = [&](int gpu, bool resume, double budget) {
    return [&, gpu, resume, budget] {
      db::Store store(path);
      DeviceInfo d = testing::fake_device();
      d.ordinal = gpu;
      d.uuid = "GPU-0000000" + std::to_string(gpu) + "-1111-2222-3333-444444444444";
      testing::FakeClock clock;
      testing::FakeMeasurer m;
      m.clock = &clock;
      m.on_measure = [](const std::string&) { std::this_thread::sleep_for(std::chrono::milliseconds(15)); };
      Tuner t(store, reg, d, m, nullptr, clock.fn());
      t.set_stop([] { return false; });
      TuneOptions o;
      o.problems.assign(problems.begin(), problems.end());
      o.resume = resume;
      o.budget_s = budget;
      const TuneReport r = t.run(o);
      if (resume && (!r.resumed || r.skipped != 3)) return 10;
      return r.status == (budget > 0 ? db::kRunBudget : db::kRunComplete) ? 0 : 11;
    };
  };
  // Both stop on their budget after 3 variants, at the same time...
  pid_t a = in_child(tuner_on(0, false, 25)), b = in_child(tuner_on(1, false, 25));
  EXPECT_EQ(exit_code(a), 0);
  EXPECT_EQ(exit_code(b), 0);
  // ...then both resume at the same time: each its own GPU's run.
  a = in_child(tuner_on(0, true, 0));
  b = in_child(tuner_on(1, true, 0));
  EXPECT_EQ(exit_code(a), 0);
  EXPECT_EQ(exit_code(b), 0);
  db::Store store(path);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 4u);
  int complete = 0;
  for (const auto& r : runs) complete += r.record.status == db::kRunComplete;
  EXPECT_EQ(complete, 2);
  // Per GPU: 2 problems x 4 bf16 variants, each recorded once, none running.
  EXPECT_EQ(total_results(store), 16u);
  for (const auto& r : runs)
    for (const auto& x : store.run_results(r.id)) EXPECT_NE(x.record.status, db::kResultRunning);
  EXPECT_EQ(store.list_devices().size(), 2u);
}

TEST_F(Own, SecondResumeOnTheSameGpuRefusesWhileTheFirstRuns) {
  // Two `tune --resume` on one GPU and store. The first
  // must finish with every result; the second must refuse, changing nothing.
  const auto path = tmp / "shared.db";
  { db::Store init(path); }
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t first = in_child([&] {
    db::Store store(path);
    testing::FakeMeasurer m;
    int n = 0;
    m.on_measure = [&](const std::string&) {
      if (++n == 2) (void)!write(go[1], "x", 1);  // one result stored: tell the parent
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    };
    Tuner t(store, reg, dev, m, nullptr);
    t.set_stop([] { return false; });
    TuneOptions o;
    o.problems = {p};
    o.resume = true;
    const TuneReport r = t.run(o);
    return r.status == db::kRunComplete && r.measured == 4 ? 0 : 12;
  });
  char c;
  ASSERT_EQ(read(go[0], &c, 1), 1);
  {
    db::Store store(path);
    const size_t before = total_results(store);
    try {
      tune(store, opts(true));
      ADD_FAILURE() << "the second --resume went ahead";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("still running (pid " + std::to_string(first)), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(store.list_runs().size(), 1u);
    EXPECT_GE(total_results(store), before);
  }
  EXPECT_EQ(exit_code(first), 0);
  db::Store store(path);
  ASSERT_EQ(store.list_runs().size(), 1u);
  EXPECT_EQ(store.list_runs()[0].record.status, db::kRunComplete);
  EXPECT_EQ(store.run_results(store.list_runs()[0].id).size(), 4u);  // the four bf16 fakes, all final
  close(go[0]);
  close(go[1]);
}

}  // namespace
}  // namespace detfuse::tuner
