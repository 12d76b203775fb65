// The detfuse command with the attention family, in-process on a machine
// without a GPU: fake attention variants, a forked worker measuring with
// scripted measurers. list, tune (--shape, --preset llm-attention), best from
// the store, bad input (exit 2, one line naming the field), --inputs .npy
// checks, and the GPU commands refusing cleanly.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "tests/tuner/fakes.h"
#include "tuner/gpu_measurer.h"
#include "tuner/npy.h"

namespace detfuse::cli {
namespace {

struct AttentionCli : ::testing::Test {
  testing::TempDir tmp;
  Registry reg = testing::fake_registry_with_attention();
  CliContext ctx;
  std::ostringstream out, err;

  void SetUp() override {
    ctx.registry = &reg;
    ctx.heuristic = [this](const FlceProblem&, FlceMode, const DeviceInfo&) -> const FlceVariant& {
      return *reg.find_flce("flce.bf16.mma.owning.bm64");
    };
    ctx.device_count = [](std::string* why) {
      if (why) *why = "no CUDA device found (test)";
      return 0;
    };
  }

  // `tune` forks a worker measuring with the scripted FLCE and attention measurers.
  CliContext with_fake_worker() {
    CliContext c = ctx;
    c.device_count = nullptr;
    c.worker_setup = [](const std::string&) {
      tuner::WorkerSetup s;
      s.device = testing::fake_device();
      auto m = std::make_unique<tuner::FamilyMeasurers>();
      m->add(Family::flce, std::make_unique<testing::FakeMeasurer>());
      auto a = std::make_unique<testing::FakeAttentionMeasurer>();
      a->median_ms = {{"attention.bf16.mma.owning.br128_bc64_d128", 5}, {"attention.bf16.mma.owning.br64_bc64_d64", 4}};
      m->add(Family::attention, std::move(a));
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

  void expect_one_line_error(int want, std::vector<std::string> args, const std::string& mention) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(run(args), want) << joined << "\nstderr: " << err.str();
    const std::string e = err.str();
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << joined << ": " << e;
    EXPECT_NE(e.find(mention), std::string::npos) << joined << ": " << e;
    EXPECT_TRUE(out.str().empty()) << joined;
  }
};

TEST_F(AttentionCli, ListShowsTheAttentionVariants) {
  EXPECT_EQ(run({"list", "--kernel", "attention"}), 0) << err.str();
  for (const auto& v : reg.attention()) EXPECT_NE(out.str().find(v.desc.name), std::string::npos) << v.desc.name;
  EXPECT_NE(out.str().find("attention: 6 variant(s)"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("flce."), std::string::npos);
  EXPECT_NE(out.str().find("br=64 bc=64 d=128"), std::string::npos) << out.str();
}

TEST_F(AttentionCli, TuneAShapeThenBestFromTheStore) {
  const CliContext c = with_fake_worker();
  const std::string db = (tmp / "a.db").string();
  ASSERT_EQ(run({"tune", "--kernel", "attention", "--shape", "1,4,2,256,300,128", "--causal", "--db", db}, &c), 0)
      << err.str();
  const std::string o = out.str();
  EXPECT_NE(o.find("attention:B=1,H=4,Hkv=2,Sq=256,Sk=300,d=128,causal=1"), std::string::npos) << o;
  // The two owning variants' (fake) digests agree: the config level is shown
  // for both; the partials variant is alone in its group (run_to_run).
  EXPECT_NE(o.find("best: attention.bf16.mma.owning.br128_bc64_d128 5.000 ms (config)"), std::string::npos) << o;
  EXPECT_NE(o.find("partials.br64_bc64_d128      10.000     2.0%     350.0         0 B  run_to_run"), std::string::npos) << o;
  EXPECT_NE(o.find("config      attention.bf16.mma.owning.br128_bc64_d128       5.000      1.000"), std::string::npos) << o;
  EXPECT_NE(o.find("portable    (none shown)"), std::string::npos) << o;
  EXPECT_NE(o.find("cannot_run"), std::string::npos) << o;  // the d64 variant, with its reason in the table
  EXPECT_NE(o.find(": complete; 4 measured, 1 cannot run"), std::string::npos) << o;
  EXPECT_NE(err.str().find("tuning 1 problem(s)"), std::string::npos) << err.str();
  // best: exact, then the nearest tuned shape (Sq doubled), then causal off: heuristic.
  EXPECT_EQ(run({"best", "--kernel", "attention", "--shape", "1,4,2,256,300,128", "--causal", "--gpu", "NVIDIA",
                 "--db", db}),
            0)
      << err.str();
  EXPECT_EQ(out.str().rfind("attention.bf16.mma.owning.br128_bc64_d128  (tuned)", 0), 0u) << out.str();
  EXPECT_EQ(run({"best", "--kernel", "attention", "--shape", "1,4,2,512,300,128", "--causal", "--gpu", "NVIDIA",
                 "--db", db, "--json"}),
            0)
      << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j.at("source"), "nearest");
  EXPECT_EQ(j.at("distance"), 1.0);
  EXPECT_EQ(run({"best", "--kernel", "attention", "--shape", "1,4,2,256,300,128", "--gpu", "NVIDIA", "--db", db}), 0);
  EXPECT_NE(out.str().find("attention.bf16.mma.owning.br64_bc64_d128  (heuristic)"), std::string::npos) << out.str();
  // The FLCE heuristic of the context is not asked about attention; a
  // context's attention heuristic is.
  CliContext h = ctx;
  h.attention_heuristic = [this](const AttentionProblem&, AttentionMode, const DeviceInfo&) -> const AttentionVariant& {
    return *reg.find_attention("attention.bf16.mma.atomic.br64_bc64_d128");
  };
  EXPECT_EQ(run({"best", "--kernel", "attention", "--shape", "1,4,2,256,300,128", "--gpu", "NVIDIA", "--db", db}, &h), 0);
  EXPECT_NE(out.str().find("attention.bf16.mma.atomic.br64_bc64_d128  (heuristic)"), std::string::npos) << out.str();
}

// --softcap and --window build the attention problem (the key says them);
// bad values exit 2 naming the field; --window is not an FLCE option.
TEST_F(AttentionCli, SoftcapAndWindowOptions) {
  const CliContext c = with_fake_worker();
  const std::string db = (tmp / "sw.db").string();
  ASSERT_EQ(run({"tune", "--kernel", "attention", "--shape", "1,4,2,256,300,128", "--causal", "--softcap", "50",
                 "--window", "128", "--db", db},
                &c),
            0)
      << err.str();
  EXPECT_NE(out.str().find("attention:B=1,H=4,Hkv=2,Sq=256,Sk=300,d=128,causal=1,scale="), std::string::npos)
      << out.str();
  AttentionProblem want;
  want.B = 1, want.H = 4, want.Hkv = 2, want.Sq = 256, want.Sk = 300, want.d = 128, want.causal = true;
  want.softcap = 50.0, want.window = 128;
  EXPECT_NE(out.str().find(want.key()), std::string::npos) << want.key() << "\n" << out.str();
  EXPECT_NE(want.key().find(",win=128"), std::string::npos) << want.key();
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--window", "-3", "--db", db},
                        "window");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--softcap", "-1", "--db",
                            db},
                        "softcap");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--window", "2000000000",
                            "--db", db},
                        "window");
  expect_one_line_error(2, {"tune", "--shape", "64,64,64", "--window", "16"}, "--window: an attention option");
  expect_one_line_error(2, {"bench", "attention", "--shape", "1,4,2,64,64,128", "--softcap", "nan"}, "softcap");
}

TEST_F(AttentionCli, TuneThePresetAndFilterByEngine) {
  const CliContext c = with_fake_worker();
  const std::string db = (tmp / "p.db").string();
  ASSERT_EQ(run({"tune", "--kernel", "attention", "--preset", "llm-attention", "--db", db}, &c), 0) << err.str();
  EXPECT_NE(out.str().find("attention:B=4,H=32,Hkv=8,Sq=4096,Sk=4096,d=128,causal=0"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find(",d=64,"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Sq=32768"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("best: attention.bf16.mma.owning.br64_bc64_d64"), std::string::npos) << out.str();
  // --engine: only variants of that engine (none is fma among the bf16 fakes... the fp32 one is).
  ASSERT_EQ(run({"tune", "--kernel", "attention", "--dtype", "fp32", "--shape", "1,2,1,64,64,128", "--engine", "fma",
                 "--db", db},
                &c),
            0)
      << err.str();
  EXPECT_NE(out.str().find("best: attention.fp32.fma.owning.br64_bc64_d128"), std::string::npos) << out.str();
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,2,1,64,64,128", "--engine", "wgmma", "--db", db},
                        "no registered attention variant matches");
}

TEST_F(AttentionCli, BadInputExitsTwoNamingTheField) {
  const std::string db = (tmp / "x.db").string();
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,6,4,64,64,128", "--db", db}, "Hkv");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,64", "--db", db},
                        "B,H,Hkv,Sq,Sk,d");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,0,64,128", "--db", db}, "--shape");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--scale", "-1", "--db", db},
                        "scale");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--reduction", "none"},
                        "--reduction: an FLCE option");
  expect_one_line_error(2, {"tune", "--shape", "64,64,64", "--causal"}, "--causal: an attention option");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--preset", "llm-heads", "--db", db}, "an FLCE preset");
  expect_one_line_error(2, {"tune", "--preset", "llm-attention", "--db", db}, "an attention preset");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--db", db}, "--shape B,H,Hkv,Sq,Sk,d");
  expect_one_line_error(2, {"tune", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--variant",
                            "flce.bf16.mma.owning.bm64", "--db", db},
                        "no attention variant named 'flce.bf16.mma.owning.bm64'");
  expect_one_line_error(2, {"bench", "attention", "--kernel", "flce", "--shape", "1,4,2,64,64,128"}, "disagree");
  expect_one_line_error(2, {"verify", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--variant", "nope"},
                        "nope");
  expect_one_line_error(2, {"best", "--kernel", "attention", "--shape", "1,4,3,64,64,128", "--gpu", "x"}, "Hkv");
  EXPECT_FALSE(std::filesystem::exists(db));  // nothing written
}

TEST_F(AttentionCli, GpuCommandsWithoutAGpuSayNoCudaDevice) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"tune", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--db",
                                 (tmp / "a.db").string()},
        {"verify", "--kernel", "attention", "--shape", "1,4,2,64,64,128", "--all-variants"},
        {"bench", "attention", "--shape", "1,4,2,64,64,128", "--causal"},
        {"best", "--kernel", "attention", "--shape", "1,4,2,64,64,128"}}) {
    EXPECT_EQ(run(args), 1) << args[0] << ": " << err.str();
    EXPECT_EQ(err.str().find("detfuse " + args[0] + ": no CUDA device:"), 0u) << err.str();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "a.db"));
}

TEST_F(AttentionCli, InputsAreCheckedBeforeTheGpu) {
  const auto dir = tmp / "in";
  std::filesystem::create_directories(dir);
  // B=1, H=4, Hkv=2, Sq=3, Sk=5, d=2.
  auto put = [&](const char* f, std::vector<int64_t> shape) {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    tuner::write_npy(dir / f, std::vector<float>(n, 0.5f), shape);
  };
  put("Q.npy", {1, 4, 3, 2});
  put("K.npy", {1, 2, 5, 2});
  put("V.npy", {1, 2, 5, 2});
  put("dO.npy", {1, 4, 2, 2});  // wrong Sq
  expect_one_line_error(2, {"bench", "attention", "--inputs", dir.string()}, "dO.npy: has shape 1,4,2,2");
  put("dO.npy", {1, 4, 3, 2});
  put("V.npy", {1, 2, 4, 2});
  expect_one_line_error(2, {"verify", "--kernel", "attention", "--inputs", dir.string(), "--all-variants"}, "V.npy");
  put("V.npy", {1, 2, 5, 2});
  put("K.npy", {1, 3, 5, 2});
  put("V.npy", {1, 3, 5, 2});
  expect_one_line_error(2, {"bench", "attention", "--inputs", dir.string()}, "Hkv");  // 3 does not divide 4
  put("K.npy", {1, 2, 5, 2});
  put("V.npy", {1, 2, 5, 2});
  expect_one_line_error(2, {"bench", "attention", "--inputs", dir.string(), "--shape", "1,4,2,3,6,2"},
                        "does not match");
  tuner::write_npy(dir / "Q.npy", std::vector<float>{0, 1, 2, 3}, {4});
  expect_one_line_error(2, {"bench", "attention", "--inputs", dir.string()}, "Q.npy: expected a 4-d float32 array");
  std::vector<float> q(24, 0.5f);
  q[5] = std::numeric_limits<float>::quiet_NaN();
  tuner::write_npy(dir / "Q.npy", q, {1, 4, 3, 2});
  expect_one_line_error(2, {"bench", "attention", "--inputs", dir.string()}, "Q.npy: 1 NaN value(s)");
  // Valid inputs get as far as the device check.
  put("Q.npy", {1, 4, 3, 2});
  EXPECT_EQ(run({"bench", "attention", "--inputs", dir.string()}), 1);
  EXPECT_NE(err.str().find("no CUDA device"), std::string::npos) << err.str();
  EXPECT_EQ(run({"verify", "--kernel", "attention", "--inputs", dir.string(), "--all-variants", "--dump",
                 (tmp / "dump").string()}),
            1);
  EXPECT_NE(err.str().find("no CUDA device"), std::string::npos) << err.str();
}

TEST_F(AttentionCli, HelpNamesTheAttentionForms) {
  for (std::string cmd : {"tune", "best", "verify", "bench"}) {
    EXPECT_EQ(run({cmd, "--help"}), 0);
    EXPECT_NE(out.str().find(cmd == "bench" ? "bench attention" : "--kernel attention"), std::string::npos)
        << cmd << ": " << out.str();
    EXPECT_NE(out.str().find("B,H,Hkv,Sq,Sk,d"), std::string::npos) << cmd;
    EXPECT_NE(out.str().find("--causal"), std::string::npos) << cmd;
    EXPECT_NE(out.str().find("--window"), std::string::npos) << cmd;
    EXPECT_NE(out.str().find("--softcap"), std::string::npos) << cmd;
  }
  EXPECT_EQ(run({"tune", "--help"}), 0);
  EXPECT_NE(out.str().find("llm-attention"), std::string::npos);
}

}  // namespace
}  // namespace detfuse::cli
