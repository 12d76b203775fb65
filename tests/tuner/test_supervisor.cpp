// Supervised measurement on the CPU: a real forked worker running a fake
// measurer that launches fake variants, some of which abort, hang, throw or
// report a lost CUDA context. Every test counts what the store holds.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "kernels/common/device_info.h"
#include "kernels/common/error.h"
#include "tests/tuner/fakes.h"
#include "tuner/bench.h"
#include "tuner/json.h"
#include "tuner/supervisor.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {
namespace {

using testing::LaunchingMeasurer;

Registry registry_with_misbehaving() {
  Registry r;
  r.add(testing::fake_flce("owning", 64));
  r.add(testing::misbehaving_flce("abort"));
  r.add(testing::fake_flce("owning", 128));
  r.add(testing::misbehaving_flce("hang"));
  r.add(testing::misbehaving_flce("lost"));
  r.add(testing::misbehaving_flce("throw"));
  r.add(testing::fake_flce("atomic", 64, DType::bf16, false));
  return r;
}

WorkerFactory fake_worker(double repeat_ms = 0) {
  return [repeat_ms] {
    WorkerSetup s;
    s.device = testing::fake_device();
    s.device.name = "fake GPU in worker " + std::to_string(getpid());
    auto m = std::make_unique<LaunchingMeasurer>();
    m->repeat_ms = repeat_ms;
    s.measurer = std::move(m);
    return s;
  };
}

std::string name_of(const Registry& r, const std::string& needle) {
  for (const auto& v : r.flce())
    if (v.desc.name.find(needle) != std::string::npos) return v.desc.name;
  return "";
}

// Alive and not a zombie (a re-parented zombie waits for a reaper that a
// container's init may not be).
bool alive(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(st, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

TEST(Supervisor, TheWorkerReportsItsDeviceAndMeasures) {
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker());
  const DeviceInfo dev = sup.start();
  EXPECT_EQ(dev.uuid, testing::fake_device().uuid);
  // The device came from another process.
  EXPECT_EQ(dev.name, "fake GPU in worker " + std::to_string(sup.worker_pid()));
  EXPECT_NE(sup.worker_pid(), getpid());
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  MeasureControl ctl;
  VariantOutcome o = sup.measure(*reg.find_flce("flce.bf16.mma.owning.bm64"), ctl);
  EXPECT_EQ(o.status, db::kResultOk) << o.reason;
  ASSERT_TRUE(o.timing && o.determinism && o.correctness);
  EXPECT_EQ(o.determinism->repeats, 5);
  EXPECT_EQ(o.timing->samples_ms.size(), 5u);
  EXPECT_EQ(sup.workers_started(), 1);
}

TEST(Supervisor, AbortingVariantIsCrashedAndTheNextRunsInANewWorker) {
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker());
  sup.start();
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  const pid_t first = sup.worker_pid();
  MeasureControl ctl;
  VariantOutcome o = sup.measure(*reg.find_flce(name_of(reg, "_ab1")), ctl);
  EXPECT_EQ(o.status, db::kResultCrashed);
  EXPECT_NE(o.reason.find("signal " + std::to_string(SIGABRT)), std::string::npos) << o.reason;
  EXPECT_FALSE(o.context_lost);  // handled: the run goes on
  EXPECT_FALSE(alive(first));
  VariantOutcome next = sup.measure(*reg.find_flce("flce.bf16.mma.owning.bm128"), ctl);
  EXPECT_EQ(next.status, db::kResultOk) << next.reason;
  EXPECT_EQ(sup.workers_started(), 2);
  EXPECT_NE(sup.worker_pid(), first);
}

TEST(Supervisor, AWorkerKilledWhileIdleIsReplacedWithoutBlamingTheNextVariant) {
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker());
  sup.start();
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  const pid_t first = sup.worker_pid();
  kill(first, SIGKILL);
  for (int i = 0; i < 200 && alive(first); ++i) usleep(5000);
  VariantOutcome o = sup.measure(*reg.find_flce("flce.bf16.mma.owning.bm64"), MeasureControl{});
  EXPECT_EQ(o.status, db::kResultOk) << o.reason;
  EXPECT_EQ(sup.workers_started(), 2);
}

TEST(Supervisor, HangingVariantTimesOutAndIsKilled) {
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker());
  sup.start();
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  const pid_t hung = sup.worker_pid();
  MeasureControl ctl;
  ctl.kill_after_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  VariantOutcome o = sup.measure(*reg.find_flce(name_of(reg, "_hg1")), ctl);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(o.status, db::kResultCrashed);
  EXPECT_EQ(o.reason.rfind("timeout:", 0), 0u) << o.reason;
  EXPECT_GE(s, 0.5);
  EXPECT_LT(s, 5.0);
  EXPECT_FALSE(alive(hung));
  EXPECT_EQ(sup.measure(*reg.find_flce("flce.bf16.mma.owning.bm64"), ctl).status, db::kResultOk);
}

TEST(Supervisor, LostContextIsCrashedWithTheCudaErrorAndTheWorkerReplaced) {
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker());
  sup.start();
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  const pid_t first = sup.worker_pid();
  MeasureControl ctl;
  VariantOutcome o = sup.measure(*reg.find_flce(name_of(reg, "_lo1")), ctl);
  EXPECT_EQ(o.status, db::kResultCrashed);
  EXPECT_NE(o.reason.find("cudaErrorIllegalAddress"), std::string::npos) << o.reason;
  EXPECT_FALSE(o.context_lost);
  EXPECT_FALSE(alive(first));
  EXPECT_EQ(sup.measure(*reg.find_flce("flce.bf16.mma.owning.bm64"), ctl).status, db::kResultOk);
  EXPECT_EQ(sup.workers_started(), 2);
}

TEST(Supervisor, ThrowingVariantIsAnErrorAndTheWorkerLives) {
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker());
  sup.start();
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  MeasureControl ctl;
  VariantOutcome o = sup.measure(*reg.find_flce(name_of(reg, "_th1")), ctl);
  EXPECT_EQ(o.status, db::kResultError);
  EXPECT_NE(o.reason.find("fake launch failure"), std::string::npos) << o.reason;
  EXPECT_EQ(sup.workers_started(), 1);
}

TEST(Supervisor, StopRequestAbandonsAHangingVariantWithinTheGrace) {
  Registry reg = registry_with_misbehaving();
  SupervisorOptions so;
  so.stop_grace_s = 0.5;
  SupervisedMeasurer sup(reg, fake_worker(), so);
  sup.start();
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  MeasureControl ctl;
  const auto t0 = std::chrono::steady_clock::now();
  ctl.stop = [&] { return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(200); };
  VariantOutcome o = sup.measure(*reg.find_flce(name_of(reg, "_hg1")), ctl);
  EXPECT_TRUE(o.interrupted);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
}

TEST(Supervisor, StopRequestReachesACooperativeWorker) {
  // A slow but well-behaved variant: the worker sees SIGINT between repeats
  // and answers "interrupted" itself (the worker stays usable).
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker(/*repeat_ms=*/50));
  sup.start();
  sup.prepare(testing::problem(256, 64, 100), Mode::forward_backward, 0);
  MeasureControl ctl;
  ctl.repeats = 1000000;
  ctl.time_cap_s = 1e9;
  const auto t0 = std::chrono::steady_clock::now();
  ctl.stop = [&] { return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(200); };
  VariantOutcome o = sup.measure(*reg.find_flce("flce.bf16.mma.owning.bm64"), ctl);
  EXPECT_TRUE(o.interrupted);
  EXPECT_EQ(sup.workers_started(), 1);
  EXPECT_TRUE(alive(sup.worker_pid()));
}

TEST(Supervisor, SetupErrorsKeepTheirKind) {
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer none(reg, [] () -> WorkerSetup { throw Error("no CUDA device: none found (test)"); });
  try {
    none.start();
    ADD_FAILURE() << "started";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::runtime);
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos);
  }
  SupervisedMeasurer bad(reg, [] () -> WorkerSetup { throw invalid_argument("--gpu 7: only 1 CUDA device(s)"); });
  try {
    bad.start();
    ADD_FAILURE() << "started";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::invalid_argument);
  }
  SupervisedMeasurer dies(reg, [] () -> WorkerSetup { std::abort(); });
  EXPECT_THROW(dies.start(), Error);
}

TEST(Supervisor, TheWorkerDiesWithItsParent) {
  // A sub-parent starts a supervised worker, reports its pid and is killed -9:
  // the worker must not outlive it (it would hold the GPU).
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t sub = fork();
  ASSERT_GE(sub, 0);
  if (sub == 0) {
    Registry reg = registry_with_misbehaving();
    SupervisedMeasurer sup(reg, fake_worker());
    sup.start();
    const pid_t w = sup.worker_pid();
    (void)!write(fds[1], &w, sizeof w);
    for (;;) pause();
  }
  pid_t worker = -1;
  ASSERT_EQ(read(fds[0], &worker, sizeof worker), ssize_t(sizeof worker));
  EXPECT_TRUE(alive(worker));
  kill(sub, SIGKILL);
  waitpid(sub, nullptr, 0);
  // The worker is the sub-parent's child, re-parented after its death; it gets
  // SIGKILL from PR_SET_PDEATHSIG. Poll until it is gone (zombies of init are
  // reaped by init).
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !alive(worker);
    if (!gone) usleep(10000);
  }
  EXPECT_TRUE(gone) << "worker " << worker << " outlived its parent";
  close(fds[0]);
  close(fds[1]);
}

TEST(Supervisor, OutcomeJsonRoundTrip) {
  VariantOutcome o;
  o.status = db::kResultIncorrect;
  o.reason = "bad \"quote\"\n\\ and \xff byte";
  o.cut = "repeats 2 of 9";
  o.correctness = db::Correctness{"full", {{"dW", std::numeric_limits<double>::quiet_NaN()}, {"dX", 0.1}}, 1e-2, false};
  db::Determinism d;
  d.repeats = 2;
  d.digests = {{0, "dW", std::string(32, 'a')}, {1, "dW", std::string(32, 'b')}};
  d.distinct = {{"dW", 2}};
  d.level = db::kLevelNone;
  o.determinism = d;
  db::Timing t;
  t.samples_ms = {1.25, 0.1 + 0.2, 3};
  t.flops = 6e12;
  t.peak_extra_bytes = int64_t(1) << 40;
  t.clock_events = 0x24;  // sw_power_cap | sw_thermal
  db::summarize(t);
  o.timing = t;
  const Json j = Json::parse(json_text(to_json(o)));
  VariantOutcome b = variant_outcome_from_json(j);
  EXPECT_EQ(b.status, o.status);
  EXPECT_EQ(b.cut, o.cut);
  EXPECT_TRUE(std::isnan(b.correctness->errors.at("dW")));
  EXPECT_EQ(b.correctness->errors.at("dX"), 0.1);
  EXPECT_EQ(b.determinism, o.determinism);
  EXPECT_EQ(b.timing, o.timing);  // doubles exactly, clock_events too
  // Unknown clock events (no NVML) stay unknown, not "none seen".
  o.timing->clock_events.reset();
  EXPECT_FALSE(variant_outcome_from_json(Json::parse(json_text(to_json(o)))).timing->clock_events.has_value());
  FlceProblem p = testing::problem(16384, 4096, 128256);
  p.label_smoothing = 0.1;
  p.softcap = 30.000000000000004;
  EXPECT_EQ(flce_problem_from_json(Json::parse(json_text(to_json(p)))).key(), p.key());
}

// The tuner over the supervisor: one run with every kind of misbehaviour
// finishes, each bad variant recorded with its reason, every good one measured.
TEST(Supervisor, TuningRunSurvivesEveryMisbehaviourAndLosesNothing) {
  testing::TempDir tmp;
  Registry reg = registry_with_misbehaving();
  SupervisedMeasurer sup(reg, fake_worker());
  const DeviceInfo dev = sup.start();
  db::Store store(tmp / "t.db");
  std::ostringstream progress;
  Tuner t(store, reg, dev, sup, &progress);
  t.set_stop([] { return false; });
  TuneOptions o;
  o.problems = {testing::problem(256, 64, 100), testing::problem(512, 64, 100)};
  o.kill_after_s = 0.5;
  TuneReport rep = t.run(o);
  EXPECT_EQ(rep.status, db::kRunComplete) << progress.str();
  std::map<std::string, int> by_status;
  std::map<std::string, std::string> reason;
  for (const auto& r : store.run_results(rep.run_id)) {
    ++by_status[r.record.status];
    reason[r.variant_name + "@" + std::to_string(r.record.problem_id)] = r.record.reason;
  }
  // 7 variants x 2 problems: abort, hang, lost -> crashed; throw -> error; 3 ok.
  EXPECT_EQ(by_status[db::kResultOk], 6) << progress.str();
  EXPECT_EQ(by_status[db::kResultCrashed], 6);
  EXPECT_EQ(by_status[db::kResultError], 2);
  EXPECT_EQ(by_status[db::kResultRunning], 0);
  EXPECT_EQ(store.run_results(rep.run_id).size(), 14u);
  for (const auto& [k, why] : reason) {
    if (k.find("_hg1") != std::string::npos) EXPECT_EQ(why.rfind("timeout:", 0), 0u) << why;
    if (k.find("_ab1") != std::string::npos) EXPECT_NE(why.find("signal"), std::string::npos) << why;
    if (k.find("_lo1") != std::string::npos) EXPECT_NE(why.find("cudaErrorIllegalAddress"), std::string::npos) << why;
  }
  ASSERT_EQ(rep.problems.size(), 2u);
  for (const auto& pr : rep.problems) {
    ASSERT_TRUE(pr.best);
    EXPECT_EQ(pr.best->variant.find("_"), std::string::npos) << pr.best->variant;  // a well-behaved one
  }
  // One worker at the start plus one after each of the 6 crashes.
  EXPECT_EQ(sup.workers_started(), 7);
}

}  // namespace
}  // namespace detfuse::tuner

namespace detfuse::tuner {
namespace {

// NVML's clock-event bits by name, unknown bits in hex.
TEST(ClockEvents, NamesTheBitsInOrder) {
  EXPECT_EQ(clock_event_names(0), "");
  EXPECT_EQ(clock_event_names(clock_event::kSwPowerCap), "sw_power_cap");
  EXPECT_EQ(clock_event_names(clock_event::kSwThermal | clock_event::kGpuIdle | clock_event::kHwSlowdown),
            "gpu_idle,hw_slowdown,sw_thermal");
  EXPECT_EQ(clock_event_names(clock_event::kDisplayClock | 0x200), "display_clock,0x200");
}

// bench's table and JSON carry the SM clock seen during the samples and what
// held it down; a row without NVML readings says nothing about the clock.
TEST(ClockEvents, BenchTableAndJsonShowTheClock) {
  BenchReport r;
  r.problem = testing::problem(8, 8, 8);
  r.device = testing::fake_device();
  r.repeats = 2;
  BenchRow row;
  row.variant = "flce.bf16.mma.owning.bm64";
  row.status = "ok";
  row.timing.samples_ms = {1.5, 1.6};
  row.timing.clock_min_mhz = 1590;
  row.timing.clock_max_mhz = 1980;
  row.timing.clock_events = int64_t(clock_event::kSwPowerCap);
  row.stats.median = 1.55;
  row.distinct = {{"dW", 1}};
  BenchRow plain = row;
  plain.variant = "flce.bf16.mma.owning.bm128";
  plain.timing.clock_min_mhz = plain.timing.clock_max_mhz = 1980;
  plain.timing.clock_events = 0;
  BenchRow blind = row;
  blind.variant = "flce.bf16.mma.owning.bm256";
  blind.timing.clock_min_mhz = blind.timing.clock_max_mhz = 0;
  blind.timing.clock_events.reset();
  r.rows = {row, plain, blind};
  const std::string table = format_bench_table(r);
  auto line_of = [&](const std::string& name) {
    const size_t a = table.find(name + " ");
    return a == std::string::npos ? std::string() : table.substr(a, table.find('\n', a) - a);
  };
  EXPECT_NE(line_of(row.variant).find("SM 1590-1980 MHz, held by sw_power_cap"), std::string::npos) << table;
  EXPECT_NE(line_of(plain.variant).find("SM 1980 MHz"), std::string::npos) << table;
  EXPECT_EQ(line_of(plain.variant).find("held by"), std::string::npos) << table;
  EXPECT_FALSE(line_of(blind.variant).empty()) << table;
  EXPECT_EQ(line_of(blind.variant).find("MHz"), std::string::npos) << table;
  const Json j = Json::parse(bench_json(r));
  EXPECT_EQ(j.at("variants").at(0).at("clock_events"), Json::array({"sw_power_cap"}));
  EXPECT_EQ(j.at("variants").at(0).at("clock_mhz"), Json::array({1590, 1980}));
  EXPECT_EQ(j.at("variants").at(1).at("clock_events"), Json::array());
  EXPECT_TRUE(j.at("variants").at(2).at("clock_events").is_null());
}

}  // namespace
}  // namespace detfuse::tuner
