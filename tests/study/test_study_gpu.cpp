// GPU smoke of the attention contention study: the real quick plan's variants
// (parsed from the built-in registry: wgmma on Hopper, else fma) on two small
// problems (GQA 4/1 and causal among them) through the real measurer and the
// study runner into a fresh store. Checks what the report reads: every result
// ok and tagged, deterministic variants run_to_run with zero spread in every
// output, atomic variants' O, LSE, dK, dV bitwise repeatable and their dQ
// spread nonzero exactly when their dQ digests differ. Label gpu; skips with
// the reason where there is no GPU.
#include <gtest/gtest.h>

#include <iostream>

#include "tuner/study/contention_study.h"
#include "kernels/registry.h"
#include "tests/gpu_test.h"
#include "tests/tuner/fakes.h"
#include "tuner/attention_measurer.h"

namespace detfuse {
namespace {

TEST(StudyGpu, AttentionQuickPlanOnSmallProblems) {
  DETFUSE_REQUIRE_GPU();
  DETFUSE_CUDA_CHECK(cudaSetDevice(0));
  const DeviceInfo dev = query_device(0);
  std::vector<std::string> names;
  for (const auto& v : builtin_registry().attention()) names.push_back(v.desc.name);
  study::ContentionOptions co;
  co.family = Family::attention;
  co.quick = true;
  study::StudyRunOptions o;
  o.plan = study::plan_contention(names, co);
  // Small stand-ins for the plan's problems (the planned head dim, 8 key
  // blocks per dQ tile at bc=128): the full check against float64 runs on
  // every output.
  const int64_t d = study::attention_contention_axes(true).d;
  o.plan.problems = {testing::attention_problem(1, 4, 4, 1024, 1024, d),
                     testing::attention_problem(2, 4, 1, 1024, 1024, d, true)};
  o.command_line = "test_study_gpu";
  testing::TempDir tmp;
  db::Store store(tmp / "s.db");
  tuner::AttentionGpuMeasurer m(dev);
  const auto rep = study::run_contention_study(store, builtin_registry(), dev, m, o, &std::cout);
  ASSERT_EQ(rep.tune.status, db::kRunComplete) << rep.note;
  EXPECT_EQ(rep.tune.cannot_run, 0);
  const auto results = store.run_results(rep.tune.run_id);
  ASSERT_EQ(results.size(), o.plan.problems.size() * o.plan.variants.size());
  EXPECT_EQ(store.run(rep.tune.run_id).study, "contention-attention-quick");
  for (const auto& r : results) {
    ASSERT_EQ(r.record.status, db::kResultOk) << r.variant_name << ": " << r.record.reason;
    ASSERT_TRUE(r.record.determinism) << r.variant_name;
    const auto& det = *r.record.determinism;
    const bool atomic = r.variant_name.find(".atomic.") != std::string::npos;
    // Schema v6: the level may be config (or stronger) where variants of a
    // group agree; every level above none has run_to_run shown.
    if (!atomic) EXPECT_EQ(det.checks.run_to_run, db::kCheckShown) << r.variant_name;
    for (const char* out : {"O", "lse", "dQ", "dK", "dV"}) {
      ASSERT_EQ(det.spread.count(out), 1u) << r.variant_name << " " << out;
      const db::Spread& s = det.spread.at(out);
      EXPECT_GT(s.norm, 0) << r.variant_name << " " << out;
      EXPECT_EQ(det.distinct.at(out) > 1, s.max_abs_diff > 0) << r.variant_name << " " << out;
      if (!atomic || std::string(out) != "dQ") EXPECT_EQ(s.max_abs_diff, 0) << r.variant_name << " " << out;
    }
    std::cout << r.variant_name << ": dQ distinct " << det.distinct.at("dQ") << "/" << det.repeats << ", spread L2 "
              << det.spread.at("dQ").diff_norm / det.spread.at("dQ").norm << "\n";
  }
}

}  // namespace
}  // namespace detfuse
