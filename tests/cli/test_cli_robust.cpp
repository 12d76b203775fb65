// The command under bad input and misbehaving variants, on the CPU: shapes
// beyond the limit or beyond memory, .npy inputs that are directories or hold
// NaN, supervised tuning through `detfuse tune` with a fake worker (a variant
// that aborts, one that hangs), the budget bounding the repeats, JSON that
// parses back for any string, and a seeded fuzz of every subcommand's
// argument parser (exit 0, 1 or 2; one line on stderr for errors).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "tests/tuner/fakes.h"
#include "tuner/bench.h"
#include "tuner/json.h"
#include "tuner/npy.h"

namespace detfuse::cli {
namespace {

struct Robust : ::testing::Test {
  testing::TempDir tmp;
  Registry reg = testing::fake_registry();
  CliContext ctx;
  std::ostringstream out, err;

  void SetUp() override {
    ctx.registry = &reg;
    ctx.heuristic = [this](const FlceProblem& p, FlceMode, const DeviceInfo&) -> const FlceVariant& {
      return p.dtype == DType::f32 ? *reg.find_flce("flce.fp32.fma.owning.bm64") : *reg.find_flce("flce.bf16.mma.owning.bm64");
    };
    ctx.device_count = [](std::string* why) {
      if (why) *why = "no CUDA device found (test)";
      return 0;
    };
  }

  // A context whose `tune` forks a worker running the launching fake measurer.
  CliContext with_fake_worker(double repeat_ms = 0) {
    CliContext c = ctx;
    c.device_count = nullptr;
    c.worker_setup = [repeat_ms](const std::string&) {
      tuner::WorkerSetup s;
      s.device = testing::fake_device();
      auto m = std::make_unique<testing::LaunchingMeasurer>();
      m->repeat_ms = repeat_ms;
      s.measurer = std::move(m);
      return s;
    };
    return c;
  }

  int run(std::vector<std::string> args, const CliContext* c = nullptr) {
    out.str("");
    err.str("");
    return run_cli(args, out, err, c ? *c : ctx);
  }

  void expect_one_line_error(int want, std::vector<std::string> args, const std::string& mention,
                             const CliContext* c = nullptr) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(run(args, c), want) << joined << "\nstderr: " << err.str();
    const std::string e = err.str();
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << joined << ": " << e;
    EXPECT_NE(e.find(mention), std::string::npos) << joined << ": " << e;
  }
};

TEST_F(Robust, ShapesBeyondTheLimitAreBadInput) {
  for (std::string cmd : {"tune", "best", "verify", "bench"}) {
    std::vector<std::string> a = {cmd, "--shape", "2147483648,4096,1000"};
    if (cmd == "verify") a.push_back("--all-variants");
    if (cmd == "best") a.insert(a.end(), {"--gpu", "x", "--db", (tmp / "none.db").string()});
    expect_one_line_error(2, a, "N: must be at most 2^30");
  }
}

TEST_F(Robust, ShapesBeyondMemoryAreANamedRuntimeError) {
  // Valid dimensions, 4 EiB of inputs: one line, exit 1, before any GPU or worker.
  for (std::string cmd : {"tune", "verify", "bench"}) {
    std::vector<std::string> a = {cmd, "--shape", "1073741824,1073741824,1"};
    if (cmd == "verify") a.push_back("--all-variants");
    const CliContext c = with_fake_worker();
    expect_one_line_error(1, a, "host memory", &c);
  }
}

TEST_F(Robust, InputsThatAreDirectoriesOrNotFiniteAreRefusedNamingTheFile) {
  const auto dir = tmp / "in";
  std::filesystem::create_directories(dir / "X.npy");
  tuner::write_npy(dir / "W.npy", std::vector<float>(10, 1.f), {5, 2});
  tuner::write_npy(dir / "y.npy", std::vector<int64_t>{0, 1, -100}, {3});
  expect_one_line_error(2, {"bench", "flce", "--inputs", dir.string()}, (dir / "X.npy").string() + ": is a directory");
  std::filesystem::remove(dir / "X.npy");
  std::vector<float> X(6, 1.f);
  X[3] = std::nanf("");
  tuner::write_npy(dir / "X.npy", X, {3, 2});
  expect_one_line_error(2, {"verify", "--inputs", dir.string(), "--all-variants"}, "X.npy: 1 NaN value(s); the first at [1, 1]");
  tuner::write_npy(dir / "X.npy", std::vector<float>(6, 1.f), {3, 2});
  std::vector<float> W(10, 1.f);
  W[0] = std::numeric_limits<float>::infinity();
  tuner::write_npy(dir / "W.npy", W, {5, 2});
  expect_one_line_error(2, {"bench", "flce", "--inputs", dir.string()}, "W.npy: 1 infinite value(s)");
}

int count_results(const std::string& path, const std::string& status = "") {
  db::Store s(path);
  int n = 0;
  for (const auto& r : s.list_runs())
    for (const auto& x : s.run_results(r.id))
      if (status.empty() || x.record.status == status) ++n;
  return n;
}

TEST_F(Robust, SupervisedTuneRecordsAbortAndHangAndGoesOn) {
  reg = Registry{};
  reg.add(testing::fake_flce("owning", 64));
  reg.add(testing::misbehaving_flce("abort"));
  reg.add(testing::misbehaving_flce("hang"));
  reg.add(testing::fake_flce("owning", 128));
  const CliContext c = with_fake_worker();
  const std::string db = (tmp / "t.db").string();
  EXPECT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--kill-after", "1s"}, &c), 0) << err.str();
  EXPECT_NE(err.str().find("crashed (the worker died of signal"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("crashed (timeout:"), std::string::npos) << err.str();
  EXPECT_NE(out.str().find("best: flce.bf16.mma.owning."), std::string::npos) << out.str();
  EXPECT_EQ(count_results(db), 4);
  EXPECT_EQ(count_results(db, db::kResultOk), 2);
  EXPECT_EQ(count_results(db, db::kResultCrashed), 2);
  // The last line is the run's summary.
  const std::string o = out.str();
  const std::string last = o.substr(o.rfind('\n', o.size() - 2) + 1);
  EXPECT_EQ(last.rfind("run ", 0), 0u) << last;
  EXPECT_NE(last.find(": complete; 4 measured"), std::string::npos) << last;
}

TEST_F(Robust, InProcessTuneMeasuresWithoutAWorkerAndRetryNeedsResume) {
  const CliContext c = with_fake_worker();
  const std::string db = (tmp / "t.db").string();
  EXPECT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--in-process"}, &c), 0) << err.str();
  EXPECT_EQ(count_results(db, db::kResultOk), 4);
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", db, "--retry-crashed"}, "only with --resume", &c);
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", db, "--gpu", "0", "--device", "0"}, "exclude", &c);
}

TEST_F(Robust, BudgetBoundsTheRepeatsAndTheLastLineSaysWhatWasCut) {
  const CliContext c = with_fake_worker(/*repeat_ms=*/10);
  const std::string db = (tmp / "t.db").string();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--repeats", "1000000000", "--budget", "1s"}, &c), 0)
      << err.str();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 6.0) << "a 1 s budget with 10^9 repeats took " << s << " s";
  const std::string o = out.str();
  const std::string last = o.substr(o.rfind('\n', o.size() - 2) + 1);
  EXPECT_NE(last.find("budget"), std::string::npos) << last;
  EXPECT_NE(last.find("cut by the time caps: flce.bf16.mma.owning.bm64: repeats "), std::string::npos) << last;
  EXPECT_NE(last.find(" of 1000000000 (budget)"), std::string::npos) << last;
  // What was measured is stored, with the repeats that ran.
  db::Store store(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].record.status, db::kRunBudget);
  int ok = 0;
  for (const auto& r : store.run_results(runs[0].id))
    if (r.record.status == db::kResultOk) {
      ++ok;
      ASSERT_TRUE(r.record.determinism);
      EXPECT_GE(r.record.determinism->repeats, 2);
      EXPECT_LT(r.record.determinism->repeats, 1000);
    }
  EXPECT_GE(ok, 1);
}

TEST_F(Robust, TimeCapCutsRepeatsPerVariant) {
  const CliContext c = with_fake_worker(/*repeat_ms=*/10);
  const std::string db = (tmp / "t.db").string();
  EXPECT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--repeats", "1000000", "--time-cap", "0.2s",
                 "--variant", "flce.bf16.mma.owning.bm64"},
                &c),
            0)
      << err.str();
  const std::string o = out.str();
  const std::string last = o.substr(o.rfind('\n', o.size() - 2) + 1);
  EXPECT_NE(last.find("complete"), std::string::npos) << last;
  EXPECT_NE(last.find("repeats "), std::string::npos) << last;
  EXPECT_NE(last.find("(--time-cap)"), std::string::npos) << last;
}

TEST_F(Robust, StorePathErrorsAreBadInputWithTheStoresMessage) {
  const CliContext c = with_fake_worker();
  std::filesystem::create_directories(tmp / "adir");
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", ""}, "", &c);
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", (tmp / "adir").string()}, "adir", &c);
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", (tmp / "no" / "such" / "t.db").string()}, "t.db", &c);
  expect_one_line_error(2, {"best", "--shape", "256,64,100", "--gpu", "H200", "--db", (tmp / "adir").string()}, "adir");
  expect_one_line_error(2, {"db", "export", "--csv", (tmp / "csv").string(), "--db", (tmp / "adir").string()}, "adir");
  // merge validates the source before creating the target: nothing left behind.
  {
    std::ofstream f(tmp / "junk.db");
    f << "this is not sqlite, not even close; it is long enough to look like a header maybe";
  }
  const auto target = tmp / "new.db";
  expect_one_line_error(2, {"db", "merge", (tmp / "junk.db").string(), "--db", target.string()}, "not a detfuse database");
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::exists(target.string() + "-wal"));
  // The read-only commands open the store read-only: a store given to `best`
  // and `db export` is byte for byte what it was.
  const std::string db = (tmp / "t.db").string();
  ASSERT_EQ(run({"tune", "--shape", "256,64,100", "--db", db}, &c), 0) << err.str();
  auto bytes = [&] {
    std::ifstream f(db, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::string before = bytes();
  EXPECT_EQ(run({"best", "--shape", "256,64,100", "--gpu", "NVIDIA", "--db", db}), 0) << err.str();
  EXPECT_EQ(run({"db", "export", "--csv", (tmp / "csv").string(), "--db", db}), 0) << err.str();
  EXPECT_EQ(bytes(), before);
}

// A bad-input probe: a tune that fails before measuring (no GPU in
// the worker) creates no store; zero caps and budgets are bad input (exit 2).
TEST_F(Robust, TuneThatFailsBeforeMeasuringCreatesNoStore) {
  CliContext c = ctx;
  c.device_count = nullptr;  // as the real command: the parent never touches CUDA
  c.worker_setup = [](const std::string&) -> tuner::WorkerSetup {
    throw Error("no CUDA device: none found (test worker)");
  };
  for (const bool in_process : {false, true}) {
    const auto db = tmp / (in_process ? "inproc.db" : "sup.db");
    std::vector<std::string> a = {"tune", "--shape", "256,64,100", "--db", db.string()};
    if (in_process) a.push_back("--in-process");
    EXPECT_NE(run(a, &c), 0) << err.str();
    EXPECT_NE(err.str().find("no CUDA device"), std::string::npos) << err.str();
    EXPECT_FALSE(std::filesystem::exists(db)) << db;
    EXPECT_FALSE(std::filesystem::exists(db.string() + "-wal")) << db;
  }
}

TEST_F(Robust, ZeroTimeCapsAndBudgetsAreBadInput) {
  const CliContext c = with_fake_worker();
  const std::string db = (tmp / "z.db").string();
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", db, "--time-cap", "0"}, "--time-cap: must be > 0",
                        &c);
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", db, "--budget", "0s"}, "--budget: must be > 0",
                        &c);
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", db, "--kill-after", "0"},
                        "--kill-after: must be > 0", &c);
  expect_one_line_error(2, {"tune", "--shape", "256,64,100", "--db", db, "--force"}, "--force: only with --resume", &c);
  expect_one_line_error(2, {"study", "contention", "--kernel", "flce", "--quick", "--db", db, "--budget", "0"},
                        "--budget: must be > 0", &c);
  EXPECT_FALSE(std::filesystem::exists(db));
}

// --resume after a completed run: the variants this build measured on this
// GPU (same seed) are skipped, the best is printed from their results; --force
// measures them again.
TEST_F(Robust, ResumeAfterACompletedRunSkipsWhatThisBuildMeasured) {
  const CliContext c = with_fake_worker();
  const std::string db = (tmp / "r.db").string();
  ASSERT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--in-process"}, &c), 0) << err.str();
  const int first = count_results(db);
  ASSERT_GT(first, 0);
  const std::string best_line = out.str().substr(out.str().find("best: "));
  ASSERT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--in-process", "--resume"}, &c), 0) << err.str();
  EXPECT_NE(err.str().find("skips the variants this build already measured"), std::string::npos) << err.str();
  EXPECT_NE(out.str().find(": complete; 0 measured, "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find(std::to_string(first) + " already done"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find(best_line.substr(0, best_line.find(' ', 6))), std::string::npos) << out.str();
  EXPECT_EQ(count_results(db), first);
  // Another seed was never measured: measured.
  ASSERT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--in-process", "--resume", "--seed", "7"}, &c), 0)
      << err.str();
  EXPECT_EQ(count_results(db), 2 * first);
  // --force: measured again.
  ASSERT_EQ(run({"tune", "--shape", "256,64,100", "--db", db, "--in-process", "--resume", "--force"}, &c), 0)
      << err.str();
  EXPECT_NE(out.str().find(": complete; " + std::to_string(first) + " measured"), std::string::npos) << out.str();
  EXPECT_EQ(count_results(db), 3 * first);
}

TEST_F(Robust, JsonIsValidForAnyString) {
  // A store whose path (echoed in the notes) has quotes, backslashes, control
  // characters and bytes that are not UTF-8.
  const std::string weird = (tmp / "we\"ird\\ \x01\t\xff\xfe name.db").string();
  {
    db::Store store(weird);
    testing::FakeMeasurer m;
    tuner::Tuner t(store, reg, testing::fake_device(), m);
    t.set_stop([] { return false; });
    tuner::TuneOptions o;
    o.problems = {testing::problem(4096, 1024, 32000)};
    t.run(o);
  }
  ASSERT_EQ(run({"best", "--shape", "5000,1024,32000", "--gpu", "NVIDIA", "--db", weird, "--json"}), 0) << err.str();
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(out.str())) << out.str();
  EXPECT_EQ(j.at("source"), "nearest");
  ASSERT_EQ(run({"best", "--shape", "5000,1024,32000", "--gpu", "NVIDIA", "--db", (tmp / "no\"ne\xff.db").string()}), 2);
  // bench's JSON, from a report holding awkward strings and numbers.
  tuner::BenchReport r;
  r.problem = testing::problem(8, 8, 8);
  r.device = testing::fake_device();
  r.device.name = "GPU \"quoted\" \\ \n \xc3\x28 bad utf-8";
  r.gemms.available = true;
  r.gemms.note = "note\twith\x02" "control";
  r.gemms.total_ms = std::numeric_limits<double>::quiet_NaN();
  tuner::BenchRow row;
  row.variant = "flce.bf16.mma.owning.bm64";
  row.reason = "";
  row.timing.samples_ms = {1.5, std::numeric_limits<double>::infinity()};
  row.stats.median = 1.5;
  row.distinct = {{"dW", 1}, {"we\"ird", 2}};
  r.rows = {row};
  const std::string text = tuner::bench_json(r);
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  EXPECT_TRUE(j.at("three_gemms").at("total_ms").is_null());
  EXPECT_TRUE(j.at("variants").at(0).at("samples_ms").at(1).is_null());
  EXPECT_EQ(j.at("variants").at(0).at("distinct_digests").at("we\"ird"), 2);
  EXPECT_EQ(j.at("device").at("name").get<std::string>().rfind("GPU \"quoted\" \\ \n ", 0), 0u);
}

// Seeded random argument lists for every subcommand, from a vocabulary of
// options, good values and junk (paths only inside the temporary directory).
TEST_F(Robust, ArgumentParserFuzz) {
  const std::string dbp = (tmp / "f.db").string();
  const std::vector<std::string> cmds = {"devices", "list", "tune", "best", "verify", "bench", "db", "help", "frob", ""};
  const std::vector<std::string> opts = {
      "--shape", "--dtype", "--kernel", "--db", "--json", "--gpu", "--variant", "--repeats", "--budget", "--time-cap",
      "--kill-after", "--seed", "--reduction", "--ignore-index", "--label-smoothing", "--z-loss", "--softcap",
      "--grad-output", "--grad-dtype", "--preset", "--resume", "--all-variants", "--inputs", "--dump", "--csv",
      "--engine", "--device", "--allow-nondeterministic", "--no-baseline", "--in-process", "--retry-crashed",
      "export", "merge", "flce", "attention", "-h", "--", "-", "--shape=", "--repeats=-1"};
  const std::vector<std::string> vals = {
      "1,2,3", "256,64,100", "0,0,0", "-1,2,3", "1,2", "1,,3", "99999999999999999999,1,1", "2147483648,1,1",
      "1073741824,1073741824,1", "bf16", "fp32", "fp64", "flce", "attention", "mean", "none", "sum", "avg", "-100",
      "1e308", "nan", "inf", "-0", "0.5", "1", "0", "-5", "2147483648", "10m", "1h", "0s", "-1s", "1e400s", "x",
      "llm-heads", "smoke", "nope", "flce.bf16.mma.owning.bm64", "best", "\xff\xfe", "", " ", "a\nb", dbp,
      (tmp / "dir").string(), (tmp / "csv").string()};
  std::filesystem::create_directories(tmp / "dir");
  // Relative paths among the values (--csv x, --dump 1,2,3) land in the
  // temporary directory, not wherever the test runs.
  struct Cwd {
    std::filesystem::path old = std::filesystem::current_path();
    ~Cwd() { std::filesystem::current_path(old); }
  } cwd;
  std::filesystem::current_path(tmp.dir);
  std::mt19937 rng(7);
  int by_code[256] = {};
  for (int it = 0; it < 20000; ++it) {
    std::vector<std::string> a;
    const std::string cmd = cmds[rng() % cmds.size()];
    if (!cmd.empty()) a.push_back(cmd);
    const int n = int(rng() % 7);
    for (int k = 0; k < n; ++k) {
      switch (rng() % 4) {
        case 0:
        case 1: a.push_back(opts[rng() % opts.size()]); break;
        case 2: a.push_back(vals[rng() % vals.size()]); break;
        default: {
          std::string junk(rng() % 6, ' ');
          for (char& c : junk) c = char(rng() % 255 + 1);
          a.push_back(junk);
        }
      }
    }
    std::string joined;
    for (const auto& x : a) joined += "[" + x + "] ";
    const int code = run(a);
    ASSERT_TRUE(code == 0 || code == 1 || code == 2) << joined << " -> " << code << "\n" << err.str();
    ++by_code[code];
    if (code != 0 && !(a.size() == 0)) {
      const std::string e = err.str();
      ASSERT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << joined << " -> " << code << ": " << e;
    }
  }
  // The vocabulary reaches every outcome (the fuzz is not only usage errors).
  EXPECT_GT(by_code[0], 0);
  EXPECT_GT(by_code[1], 0);
  EXPECT_GT(by_code[2], 0);
}

}  // namespace
}  // namespace detfuse::cli
