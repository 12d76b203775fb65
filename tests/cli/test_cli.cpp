// The detfuse command in-process, on a machine without a GPU: usage errors
// (exit 2, one line), --help everywhere, list, best from a store (exact,
// nearest shape, heuristic), db export/merge, GPU commands refusing cleanly.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "tests/tuner/fakes.h"
#include "tuner/npy.h"
#include "tuner/records.h"
#include "tuner/tuner.h"

namespace detfuse::cli {
namespace {

struct Cli : ::testing::Test {
  testing::TempDir tmp;
  Registry reg = testing::fake_registry();
  CliContext ctx;
  std::ostringstream out, err;

  void SetUp() override {
    ctx.registry = &reg;
    ctx.heuristic = [this](const FlceProblem& p, FlceMode, const DeviceInfo&) -> const FlceVariant& {
      return p.dtype == DType::f32 ? *reg.find_flce("flce.fp32.fma.owning.bm64") : *reg.find_flce("flce.bf16.mma.partials.bm64");
    };
    ctx.device_count = [](std::string* why) {
      if (why) *why = "no CUDA device found (test)";
      return 0;
    };
  }

  int run(std::vector<std::string> args) {
    out.str("");
    err.str("");
    return run_cli(args, out, err, ctx);
  }

  // Exit code 2 and exactly one line on stderr.
  void expect_usage_error(std::vector<std::string> args, const std::string& mention = "") {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(run(args), 2) << joined << "\nstderr: " << err.str();
    const std::string e = err.str();
    EXPECT_FALSE(e.empty()) << joined;
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << joined << ": " << e;
    if (!mention.empty()) EXPECT_NE(e.find(mention), std::string::npos) << joined << ": " << e;
    EXPECT_TRUE(out.str().empty()) << joined;
  }

  // A store with tuned results for two shapes on the fake H200.
  std::string tuned_db() {
    const std::string path = (tmp / "tuned.db").string();
    db::Store store(path);
    testing::FakeMeasurer m;
    m.median_ms = {{"flce.bf16.mma.owning.bm64", 20}, {"flce.bf16.mma.owning.bm128", 15}, {"flce.bf16.mma.partials.bm64", 50}};
    tuner::Tuner t(store, reg, testing::fake_device(), m);
    t.set_stop([] { return false; });
    tuner::TuneOptions o;
    o.problems = {testing::problem(4096, 1024, 32000), testing::problem(16384, 4096, 128256)};
    t.run(o);
    return path;
  }
};

TEST_F(Cli, NoArgumentsOrUnknownCommand) {
  EXPECT_EQ(run({}), 2);
  EXPECT_NE(err.str().find("usage"), std::string::npos);
  expect_usage_error({"frobnicate"}, "unknown command");
}

TEST_F(Cli, HelpWorksForEverySubcommand) {
  EXPECT_EQ(run({"--help"}), 0);
  EXPECT_NE(out.str().find("commands:"), std::string::npos);
  for (std::string cmd : {"devices", "list", "tune", "best", "verify", "bench", "db"}) {
    EXPECT_EQ(run({cmd, "--help"}), 0) << cmd << ": " << err.str();
    EXPECT_NE(out.str().find("usage: detfuse " + cmd), std::string::npos) << cmd << ": " << out.str();
    EXPECT_TRUE(err.str().empty()) << cmd;
    EXPECT_EQ(run({"help", cmd}), 0) << cmd;
  }
  EXPECT_EQ(run({"bench", "flce", "--help"}), 0);
  EXPECT_NE(out.str().find("--shape"), std::string::npos);
}

TEST_F(Cli, ParseErrorsExitTwoWithOneLine) {
  expect_usage_error({"tune", "--shape", "1,2"}, "--shape");
  expect_usage_error({"tune", "--shape", "a,b,c"}, "--shape");
  expect_usage_error({"tune"}, "--shape");
  expect_usage_error({"tune", "--shape", "64,64,64", "--preset", "llm-heads"});
  expect_usage_error({"tune", "--preset", "nope"}, "llm-heads");
  expect_usage_error({"tune", "--shape", "64,64,64", "--budget", "10x"}, "duration");
  expect_usage_error({"tune", "--shape", "64,64,64", "--repeats", "abc"});
  expect_usage_error({"tune", "--shape", "64,64,64", "--repeats", "1"}, "--repeats");
  expect_usage_error({"tune", "--shape", "64,64,64", "--dtype", "fp16"}, "dtype");
  expect_usage_error({"tune", "--shape", "64,64,64", "--reduction", "avg"}, "reduction");
  expect_usage_error({"tune", "--shape", "64,64,64", "--label-smoothing", "1.5"}, "label_smoothing");
  expect_usage_error({"tune", "--shape", "64,64,64", "--ignore-index", "5"}, "ignore_index");
  expect_usage_error({"tune", "--shape", "64,64,64", "--bogus"});
  expect_usage_error({"tune", "--shape", "64,64,64", "--kernel", "conv"}, "conv");
  expect_usage_error({"tune", "--shape", "64,64,64", "--kernel", "attention"}, "attention");
  expect_usage_error({"tune", "--shape", "64,64,64", "--variant", "flce.bf16.nope.bm1"}, "flce.bf16.nope.bm1");
  expect_usage_error({"best", "--shape", "0,1,1"}, "--shape");
  expect_usage_error({"verify", "--shape", "64,64,64"}, "--variant");
  expect_usage_error({"verify", "--shape", "64,64,64", "--variant", "x", "--all-variants"});
  expect_usage_error({"verify", "--shape", "64,64,64", "--variant", "flce.bf16.nope.bm1"});
  expect_usage_error({"bench", "flce", "--shape", "64,64"}, "--shape");
  expect_usage_error({"bench", "attention", "--shape", "64,64,64"});
  expect_usage_error({"list", "--kernel", "conv"}, "conv");
  expect_usage_error({"list", "--engine", "tpu"}, "tpu");
  expect_usage_error({"db"});
  expect_usage_error({"db", "export"}, "--csv");
  expect_usage_error({"db", "merge"});
  expect_usage_error({"db", "vacuum"}, "vacuum");
}

TEST_F(Cli, GpuCommandsWithoutAGpuSayNoCudaDeviceAndExitOne) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"devices"},
        {"tune", "--shape", "1024,256,1000", "--db", (tmp / "a.db").string()},
        {"tune", "--preset", "llm-heads", "--db", (tmp / "a.db").string()},
        {"verify", "--shape", "1024,256,1000", "--variant", "flce.bf16.mma.owning.bm64"},
        {"bench", "flce", "--shape", "1024,256,1000"},
        {"best", "--shape", "1024,256,1000"}}) {
    EXPECT_EQ(run(args), 1) << args[0];
    EXPECT_EQ(err.str().find("detfuse " + args[0] + ": no CUDA device:"), 0u) << err.str();
    const std::string e = err.str();
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1);
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "a.db"));  // nothing written before the device check
}

TEST_F(Cli, ListPrintsEveryVariantWithoutAGpu) {
  EXPECT_EQ(run({"list"}), 0);
  const std::string o = out.str();
  for (const auto& v : reg.flce()) EXPECT_NE(o.find(v.desc.name), std::string::npos) << v.desc.name;
  EXPECT_NE(o.find("owning"), std::string::npos);
  EXPECT_NE(o.find("bm=64"), std::string::npos);
  EXPECT_NE(o.find("fake atomic variant for tests"), std::string::npos);
  EXPECT_NE(o.find("attention: no variants registered"), std::string::npos);
  EXPECT_EQ(run({"list", "--kernel", "flce", "--dtype", "fp32"}), 0);
  EXPECT_NE(out.str().find("flce.fp32.fma.owning.bm64"), std::string::npos);
  EXPECT_EQ(out.str().find("flce.bf16"), std::string::npos);
  EXPECT_EQ(out.str().find("attention"), std::string::npos);
  EXPECT_EQ(run({"list", "--kernel", "flce", "--engine", "mma"}), 0);
  EXPECT_NE(out.str().find("flce.bf16.mma.owning.bm64"), std::string::npos);
  EXPECT_EQ(out.str().find("flce.fp32"), std::string::npos);
  EXPECT_EQ(run({"list", "--kernel", "flce", "--engine", "cublaslt"}), 0);
  EXPECT_NE(out.str().find("flce: no variants registered in this build on engine cublaslt"), std::string::npos);
}

TEST_F(Cli, ListOfTheBuiltinRegistry) {
  CliContext real;
  std::ostringstream o, e;
  EXPECT_EQ(run_cli({"list"}, o, e, real), 0) << e.str();
  for (const VariantDesc* d : builtin_registry().descriptors()) EXPECT_NE(o.str().find(d->name), std::string::npos);
  // The contention study's row-split levels are listed, marked as study variants.
  EXPECT_NE(o.str().find(" [study]\n"), std::string::npos);
  EXPECT_NE(o.str().find("study variants, marked [study]"), std::string::npos);
}

TEST_F(Cli, BestFromTheStoreWithoutAGpu) {
  const std::string db = tuned_db();
  // Exact shape.
  EXPECT_EQ(run({"best", "--shape", "4096,1024,32000", "--gpu", "NVIDIA H200", "--db", db}), 0) << err.str();
  EXPECT_EQ(out.str().rfind("flce.bf16.mma.owning.bm128  (tuned)", 0), 0u) << out.str();
  // Nearest tuned shape, marked as such.
  EXPECT_EQ(run({"best", "--shape", "8192,4096,128256", "--gpu", "GPU-0000", "--db", db}), 0) << err.str();
  EXPECT_NE(out.str().find("(nearest)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("16384"), std::string::npos) << out.str();
  // JSON.
  EXPECT_EQ(run({"best", "--shape", "8192,4096,128256", "--gpu", "nvidia h2", "--db", db, "--json"}), 0);
  {
    const nlohmann::json j = nlohmann::json::parse(out.str());
    EXPECT_EQ(j.at("source"), "nearest") << out.str();
    EXPECT_EQ(j.at("distance"), 1.0) << out.str();
    EXPECT_EQ(j.at("variant"), "flce.bf16.mma.owning.bm128") << out.str();
    EXPECT_EQ(j.at("median_ms"), 15.0) << out.str();
  }
  // Other options were never tuned: heuristic, marked as such.
  EXPECT_EQ(run({"best", "--shape", "4096,1024,32000", "--z-loss", "1e-4", "--gpu", "NVIDIA H200", "--db", db}), 0);
  EXPECT_NE(out.str().find("flce.bf16.mma.partials.bm64  (heuristic)"), std::string::npos) << out.str();
  EXPECT_EQ(run({"best", "--shape", "4096,1024,32000", "--dtype", "fp32", "--gpu", "NVIDIA H200", "--db", db, "--json"}), 0);
  EXPECT_EQ(nlohmann::json::parse(out.str()).at("source"), "heuristic") << out.str();
  // Unknown GPU, or no database: exit 2 with one line.
  expect_usage_error({"best", "--shape", "4096,1024,32000", "--gpu", "A100", "--db", db}, "A100");
  expect_usage_error({"best", "--shape", "4096,1024,32000", "--gpu", "H200", "--db", (tmp / "none.db").string()},
                     "no database");
}

// Determinism levels: best --level over a store where the fastest
// deterministic variant (partials, alone in its group) has only run_to_run
// and the two owning variants (same fake digests) have config.
TEST_F(Cli, BestAtADeterminismLevel) {
  const std::string db = (tmp / "levels.db").string();
  {
    db::Store store(db);
    testing::FakeMeasurer m;
    m.median_ms = {{"flce.bf16.mma.owning.bm64", 20}, {"flce.bf16.mma.owning.bm128", 15},
                   {"flce.bf16.mma.partials.bm64", 5}, {"flce.bf16.mma.atomic.bm64", 2}};
    tuner::Tuner t(store, reg, testing::fake_device(), m);
    t.set_stop([] { return false; });
    tuner::TuneOptions o;
    o.problems = {testing::problem(4096, 1024, 32000)};
    t.run(o);
  }
  const std::vector<std::string> base = {"best", "--shape", "4096,1024,32000", "--gpu", "NVIDIA H200", "--db", db};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_EQ(run(base), 0) << err.str();
  EXPECT_EQ(out.str().rfind("flce.bf16.mma.partials.bm64  (tuned)", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("determinism run_to_run"), std::string::npos) << out.str();
  EXPECT_EQ(run(with({"--level", "run_to_run"})), 0) << err.str();
  EXPECT_EQ(out.str().rfind("flce.bf16.mma.partials.bm64  (tuned)", 0), 0u) << out.str();
  EXPECT_EQ(run(with({"--level", "config"})), 0) << err.str();
  EXPECT_EQ(out.str().rfind("flce.bf16.mma.owning.bm128  (tuned)", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("determinism config"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("checks   run_to_run shown, sm_count not_checked, config shown, portable not_checked"),
            std::string::npos)
      << out.str();
  EXPECT_EQ(run(with({"--level", "none"})), 0) << err.str();
  EXPECT_EQ(out.str().rfind("flce.bf16.mma.atomic.bm64  (tuned)", 0), 0u) << out.str();
  EXPECT_EQ(run(with({"--level", "config", "--json"})), 0) << err.str();
  {
    const nlohmann::json j = nlohmann::json::parse(out.str());
    EXPECT_EQ(j.at("variant"), "flce.bf16.mma.owning.bm128");
    EXPECT_EQ(j.at("level"), "config");
    EXPECT_EQ(j.at("level_asked"), "config");
    EXPECT_EQ(j.at("checks").at("config"), "shown");
    EXPECT_EQ(j.at("checks").at("sm_count"), "not_checked");
  }
  // No stored result has sm_count (tune without --levels): the heuristic,
  // said so, and exit 1.
  EXPECT_EQ(run(with({"--level", "sm_count"})), 1) << err.str();
  EXPECT_NE(out.str().find("(heuristic)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("has level sm_count"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("its determinism level was never shown (asked for sm_count)"), std::string::npos) << out.str();
  // Bad level names: exit 2, one line, before anything else.
  expect_usage_error(with({"--level", "gpu_to_gpu"}), "--level: unknown determinism level 'gpu_to_gpu'");
  expect_usage_error({"best", "--shape", "4096,1024,32000", "--level", "fast"}, "unknown determinism level 'fast'");
  // --levels cannot be combined with --sms (it compares slices with the whole GPU).
  expect_usage_error({"tune", "--shape", "1024,256,1000", "--levels", "--sms", "16", "--db", (tmp / "x.db").string()},
                     "--levels");
  expect_usage_error({"verify", "--shape", "1024,256,1000", "--variant", "flce.bf16.mma.owning.bm64", "--levels",
                      "--sms", "16"},
                     "--levels");
  EXPECT_FALSE(std::filesystem::exists(tmp / "x.db"));
}

TEST_F(Cli, DbExportAndIdempotentMerge) {
  const std::string db = tuned_db();
  EXPECT_EQ(run({"db", "export", "--csv", (tmp / "csv").string(), "--db", db}), 0) << err.str();
  EXPECT_TRUE(std::filesystem::exists(tmp / "csv" / "results.csv")) << out.str();
  const std::string other = (tmp / "other.db").string();
  EXPECT_EQ(run({"db", "merge", db, "--db", other}), 0) << err.str();
  EXPECT_NE(out.str().find("results added"), std::string::npos);
  EXPECT_EQ(out.str().find(" 0 results added"), std::string::npos) << out.str();
  EXPECT_EQ(run({"db", "merge", db, "--db", other}), 0);
  EXPECT_NE(out.str().find(" 0 results added"), std::string::npos) << out.str();
  expect_usage_error({"db", "merge", (tmp / "missing.db").string(), "--db", other}, "missing.db");
  // A file that is not a detfuse database: bad input (exit 2), one line.
  {
    std::ofstream f(tmp / "junk.db");
    f << "this is not sqlite";
  }
  EXPECT_EQ(run({"db", "merge", (tmp / "junk.db").string(), "--db", other}), 2);
  const std::string e = err.str();
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
}

TEST_F(Cli, MalformedInputsAreRefusedBeforeTheGpu) {
  const auto dir = tmp / "in";
  std::filesystem::create_directories(dir);
  tuner::write_npy(dir / "X.npy", std::vector<float>(6, 1.f), {3, 2});
  tuner::write_npy(dir / "W.npy", std::vector<float>(10, 1.f), {5, 2});
  tuner::write_npy(dir / "y.npy", std::vector<int64_t>{0, 9, -100}, {3});  // 9 >= V
  expect_usage_error({"verify", "--inputs", dir.string(), "--variant", "flce.bf16.mma.owning.bm64"}, "y.npy");
  tuner::write_npy(dir / "y.npy", std::vector<int64_t>{0, 1}, {2});  // wrong N
  expect_usage_error({"bench", "flce", "--inputs", dir.string()}, "y.npy");
  tuner::write_npy(dir / "y.npy", std::vector<int64_t>{0, 1, -100}, {3});
  expect_usage_error({"bench", "flce", "--inputs", dir.string(), "--shape", "4,2,5"}, "does not match");
  {
    std::ofstream f(dir / "W.npy", std::ios::binary | std::ios::trunc);
    f << "garbage";
  }
  expect_usage_error({"bench", "flce", "--inputs", dir.string()}, "W.npy");
  // Valid inputs get as far as the device check.
  tuner::write_npy(dir / "W.npy", std::vector<float>(10, 1.f), {5, 2});
  EXPECT_EQ(run({"bench", "flce", "--inputs", dir.string()}), 1);
  EXPECT_NE(err.str().find("no CUDA device"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace detfuse::cli
