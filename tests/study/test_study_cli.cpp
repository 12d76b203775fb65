// CPU tests of `detfuse study contention` in-process: the plan without a GPU,
// usage errors, a quick study with the synthetic measurer (in-process worker),
// resume of a complete study, and `db export` carrying the tag and the spread.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "cli/cli.h"
#include "tests/study/synth.h"

namespace detfuse {
namespace {

using namespace detfuse::testing;

struct StudyCli : ::testing::Test {
  Registry reg = synth_registry();
  cli::CliContext ctx;
  std::ostringstream out, err;
  void SetUp() override {
    ctx.registry = &reg;
    ctx.device_count = [](std::string*) { return 1; };
    ctx.worker_setup = [](const std::string&) {
      tuner::WorkerSetup s;
      s.device = synth_device();
      s.measurer = synth_measurers();
      return s;
    };
  }
  int run(const std::vector<std::string>& args) {
    out.str("");
    err.str("");
    return cli::run_cli(args, out, err, ctx);
  }
};

std::string slurp(const std::filesystem::path& f) {
  std::ifstream in(f);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(StudyCli, PlanNeedsNoGpuAndListsWhatItWouldMeasure) {
  ctx.device_count = [](std::string* why) {
    *why = "none";
    return 0;
  };
  ASSERT_EQ(run({"study", "contention", "--kernel", "flce", "--quick", "--plan"}), 0) << err.str();
  EXPECT_NE(out.str().find("study contention-flce-quick: 2 problem(s) x 13 variant(s)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("problem 8192,4096,32768"), std::string::npos);
  EXPECT_NE(out.str().find("variant flce.bf16.cublaslt.owning.mb2000"), std::string::npos);
  // Both contention axes: the row splits (sk0 included) and the SM counts.
  EXPECT_NE(out.str().find("variant flce.bf16.mma.atomic.bm128_bn128_mb1024_sk0\n"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("adders axis: row splits sk per chunk (adders per dW element; sk0: every row block) of "
                           "[atomic mma] [partials cublaslt] [partials mma] at every problem; the fixed point: "
                           "8192,4096,32768\n"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("sm-count axis: 16 SMs all SMs (one run each; sliced levels at 8192,4096,32768"),
            std::string::npos)
      << out.str();
  ASSERT_EQ(run({"study", "contention", "--quick", "--plan", "--sms", "8,66", "--sms", "all"}), 0) << err.str();
  EXPECT_NE(out.str().find("sm-count axis: 8 SMs 66 SMs all SMs"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("\"sms\":[8,66,0]"), std::string::npos) << out.str();
  // Without --plan and without a GPU: exit 1, no store written.
  TempDir tmp;
  EXPECT_EQ(run({"study", "contention", "--quick", "--db", (tmp / "s.db").string()}), 1);
  EXPECT_NE(err.str().find("no CUDA device"), std::string::npos) << err.str();
  EXPECT_FALSE(std::filesystem::exists(tmp / "s.db"));
}

TEST_F(StudyCli, AttentionPlanNeedsNoGpu) {
  ctx.device_count = [](std::string* why) {
    *why = "none";
    return 0;
  };
  ASSERT_EQ(run({"study", "contention", "--kernel", "attention", "--quick", "--plan"}), 0) << err.str();
  const std::string o = out.str();
  EXPECT_NE(o.find("study contention-attention-quick: 5 problem(s) x 4 variant(s), K=3"), std::string::npos) << o;
  EXPECT_NE(o.find("\"family\":\"attention\""), std::string::npos) << o;
  for (const char* p : {"problem 16,32,32,1024,1024,128\n", "problem 1,32,32,16384,16384,128\n",
                        "problem 4,32,32,4096,4096,128,causal\n", "problem 4,32,8,4096,4096,128\n"})
    EXPECT_NE(o.find(p), std::string::npos) << p << "\n" << o;
  EXPECT_NE(o.find("variant attention.bf16.wgmma.ordered.br64_bc128_st2_d128\n"), std::string::npos) << o;
  EXPECT_EQ(o.find(".fwd."), std::string::npos) << o;
  EXPECT_EQ(o.find(".fma."), std::string::npos) << o;
  EXPECT_EQ(o.find("_d64"), std::string::npos) << o;
  ASSERT_EQ(run({"study", "contention", "--kernel", "attention", "--plan", "--engine", "fma"}), 0) << err.str();
  EXPECT_NE(out.str().find("study contention-attention-fma: 17 problem(s) x 3 variant(s), K=5"), std::string::npos)
      << out.str();
}

TEST_F(StudyCli, AttentionUsageErrors) {
  EXPECT_EQ(run({"study", "contention", "--kernel", "attention", "--engine", "cublaslt", "--plan"}), 2);
  EXPECT_NE(err.str().find("no registered bf16 attention variant matches --engine"), std::string::npos) << err.str();
  EXPECT_EQ(run({"study", "contention", "--kernel", "attention", "--engine", "tpu", "--plan"}), 2);
  EXPECT_NE(err.str().find("unknown engine 'tpu'"), std::string::npos) << err.str();
  EXPECT_EQ(run({"study", "contention", "--kernel", "conv", "--plan"}), 2);
  EXPECT_NE(err.str().find("unknown kernel family 'conv'"), std::string::npos) << err.str();
  TempDir tmp;
  EXPECT_EQ(run({"study", "contention", "--kernel", "attention", "--budget", "soon", "--db", (tmp / "s.db").string()}), 2);
  EXPECT_NE(err.str().find("malformed duration 'soon'"), std::string::npos) << err.str();
  EXPECT_FALSE(std::filesystem::exists(tmp / "s.db"));
  EXPECT_EQ(run({"study", "--help"}), 0);
  EXPECT_NE(out.str().find("--kernel flce|attention"), std::string::npos) << out.str();
}

TEST_F(StudyCli, UsageErrors) {
  EXPECT_EQ(run({"study"}), 2);
  EXPECT_EQ(run({"study", "throughput"}), 2);
  EXPECT_NE(err.str().find("unknown study 'throughput'"), std::string::npos) << err.str();
  EXPECT_EQ(run({"study", "contention", "--engine", "tpu", "--plan"}), 2);
  EXPECT_EQ(run({"study", "contention", "--engine", "wgmma", "--plan"}), 2);  // none registered here
  EXPECT_EQ(run({"study", "--help"}), 0);
  EXPECT_NE(out.str().find("usage: detfuse study contention"), std::string::npos);
  // --sms: counts >= 1 or all, checked before any GPU work.
  for (const char* bad : {"-4", "x", "1.5", ","}) {
    EXPECT_EQ(run({"study", "contention", "--plan", "--sms", bad}), 2) << bad;
    EXPECT_NE(err.str().find("--sms"), std::string::npos) << bad << ": " << err.str();
  }
}

TEST_F(StudyCli, TuneSmsArgumentChecks) {
  TempDir tmp;
  const std::string db = (tmp / "t.db").string();
  EXPECT_EQ(run({"tune", "--shape", "512,256,1024", "--sms", "0", "--db", db}), 2);
  EXPECT_NE(err.str().find("--sms 0: must be at least 1"), std::string::npos) << err.str();
  EXPECT_FALSE(std::filesystem::exists(tmp / "t.db"));
  EXPECT_EQ(run({"tune", "--help"}), 0);
  EXPECT_NE(out.str().find("--sms"), std::string::npos);
  // bench and verify take it too, checked before the GPU.
  EXPECT_EQ(run({"bench", "flce", "--shape", "512,256,1024", "--sms", "0"}), 2);
  EXPECT_NE(err.str().find("--sms 0: must be at least 1"), std::string::npos) << err.str();
  EXPECT_EQ(run({"verify", "--shape", "512,256,1024", "--variant", "best", "--sms", "-2", "--db", db}), 2);
  EXPECT_NE(err.str().find("--sms -2: must be at least 1"), std::string::npos) << err.str();
}

TEST_F(StudyCli, QuickStudyStoresTaggedRunsAndExportsThem) {
  TempDir tmp;
  const std::string db = (tmp / "s.db").string();
  ASSERT_EQ(run({"study", "contention", "--kernel", "flce", "--quick", "--db", db, "--in-process", "--sms", "all"}), 0)
      << err.str();
  EXPECT_NE(out.str().find(": complete; 26 measured"), std::string::npos) << out.str();
  ASSERT_EQ(run({"study", "contention", "--quick", "--db", db, "--in-process", "--resume", "--sms", "all"}), 0)
      << err.str();
  EXPECT_NE(out.str().find("is complete on this device and build"), std::string::npos) << out.str();
  ASSERT_EQ(run({"db", "export", "--csv", (tmp / "csv").string(), "--db", db}), 0) << err.str();
  EXPECT_NE(slurp(tmp / "csv" / "runs.csv").find("contention-flce-quick"), std::string::npos);
  EXPECT_NE(slurp(tmp / "csv" / "studies.csv").find("contention-flce-quick,contention,"), std::string::npos);
  // 26 results x 4 outputs: one spread row each.
  const std::string spread = slurp(tmp / "csv" / "determinism_spread.csv");
  EXPECT_EQ(std::count(spread.begin(), spread.end(), '\n'), 1 + 26 * 4);
}

TEST_F(StudyCli, QuickAttentionStudyStoresTaggedRuns) {
  TempDir tmp;
  const std::string db = (tmp / "s.db").string();
  ASSERT_EQ(run({"study", "contention", "--kernel", "attention", "--quick", "--db", db, "--in-process", "--sms", "all"}),
            0)
      << err.str();
  EXPECT_NE(out.str().find("study contention-attention-quick on all SMs, run "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find(": complete; 20 measured, 0 cannot run"), std::string::npos) << out.str();
  ASSERT_EQ(run({"study", "contention", "--kernel", "attention", "--quick", "--db", db, "--in-process", "--resume",
                 "--sms", "all"}),
            0)
      << err.str();
  EXPECT_NE(out.str().find("is complete on this device and build"), std::string::npos) << out.str();
  ASSERT_EQ(run({"db", "export", "--csv", (tmp / "csv").string(), "--db", db}), 0) << err.str();
  EXPECT_NE(slurp(tmp / "csv" / "studies.csv").find("contention-attention-quick,contention,"), std::string::npos);
  // 20 results x 5 outputs (O, lse, dQ, dK, dV): one spread row each.
  const std::string spread = slurp(tmp / "csv" / "determinism_spread.csv");
  EXPECT_EQ(std::count(spread.begin(), spread.end(), '\n'), 1 + 20 * 5);
}

}  // namespace
}  // namespace detfuse
