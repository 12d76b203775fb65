// GPU smoke of the SM-count runner (tuner/sm_slice.h): a few FLCE variants
// (mma owning and partials, cuBLASLt owning, mma atomic with every row block
// adding) through the real measurer and the study runner, once on a 16-SM
// green-context slice and once on the whole GPU, into one store. Checks: the
// slice holds the SMs asked for (16 is a multiple of every architecture's
// granularity), each level is a run of its own with its SM count, every
// result is correct, the deterministic variants give the same bits of every
// output on 16 SMs as on the whole GPU, and the slice really is smaller (the
// owning variant is slower on it). Prints the atomic variant's dW digests per
// level. Label gpu; skips with the reason where there is no GPU.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "kernels/registry.h"
#include "tests/gpu_test.h"
#include "tests/tuner/fakes.h"
#include "tuner/flce_measurer.h"
#include "tuner/sm_slice.h"
#include "tuner/study/contention_study.h"

namespace detfuse {
namespace {

TEST(SmSliceGpu, SixteenSmsGiveTheWholeGpusBitsToDeterministicVariants) {
  DETFUSE_REQUIRE_GPU();
  DETFUSE_CUDA_CHECK(cudaSetDevice(0));
  const DeviceInfo dev = query_device(0);
  ASSERT_GT(dev.sm_count, 16) << "the smoke needs a GPU of more than 16 SMs";
  // One variant of each kind, by parsing the registry's names.
  std::map<std::string, std::string> pick;  // role -> name
  for (const auto& v : builtin_registry().flce()) {
    const auto p = study::parse_variant_name(v.desc.name);
    if (!p || p->dtype != "bf16") continue;
    auto take = [&](const std::string& role) { pick.emplace(role, v.desc.name); };
    if (p->engine == "mma" && p->strategy == "owning") take("owning");
    if (p->engine == "mma" && p->strategy == "partials" && !v.desc.study_only) take("partials");
    if (p->engine == "cublaslt" && p->strategy == "owning") take("cublaslt");
    if (p->engine == "mma" && p->strategy == "atomic" && p->param("sk", -1) == 0) take("atomic_sk0");
  }
  ASSERT_EQ(pick.size(), 4u) << "expected mma owning, partials, atomic sk0 and cublaslt owning variants";
  study::StudyRunOptions o;
  study::ContentionOptions co;
  o.plan = study::plan_contention({pick["owning"]}, co);  // a plan to carry the name; variants set below
  o.plan.variants.clear();
  for (const auto& [role, name] : pick) o.plan.variants.push_back(name);
  o.plan.problems = {testing::problem(2048, 512, 8192)};
  o.plan.sm_problems = o.plan.problems;
  o.plan.repeats = 3;
  o.plan.time_cap_s = 5;
  o.command_line = "test_sm_slice_gpu";
  testing::TempDir tmp;
  db::Store store(tmp / "s.db");
  std::map<int, db::Id> run_of;  // granted SMs -> run
  for (int level : {16, 0}) {
    std::shared_ptr<tuner::SmSlice> slice;
    if (level > 0) {
      try {
        slice = std::make_shared<tuner::SmSlice>(0, level);
      } catch (const Error& e) {
        FAIL() << "green contexts refused on " << dev.name << ": " << e.what();
      }
      EXPECT_EQ(slice->sm_count(), 16) << slice->plan().note;
    }
    tuner::set_measure_slice(slice);
    tuner::FlceGpuMeasurer m(dev);
    o.sms = level;
    o.run_sms = slice ? slice->sm_count() : dev.sm_count;
    const auto rep = study::run_contention_study(store, builtin_registry(), dev, m, o, &std::cout);
    tuner::set_measure_slice(nullptr);
    ASSERT_EQ(rep.tune.status, db::kRunComplete) << rep.note;
    EXPECT_EQ(store.run(rep.tune.run_id).sms, o.run_sms);
    run_of[int(*o.run_sms)] = rep.tune.run_id;
  }
  ASSERT_EQ(run_of.size(), 2u);
  // name -> SMs -> result
  std::map<std::string, std::map<int, db::StoredResult>> by;
  for (const auto& [sms, run] : run_of)
    for (const auto& r : store.run_results(run)) by[r.variant_name][sms] = r;
  for (const auto& [name, levels] : by) {
    ASSERT_EQ(levels.size(), 2u) << name;
    const auto& sliced = levels.begin()->second.record;
    const auto& whole = levels.rbegin()->second.record;
    ASSERT_EQ(sliced.status, db::kResultOk) << name << ": " << sliced.reason;
    ASSERT_EQ(whole.status, db::kResultOk) << name << ": " << whole.reason;
    ASSERT_TRUE(sliced.determinism && whole.determinism && sliced.timing && whole.timing) << name;
    auto first = [](const db::Determinism& d) {
      std::map<std::string, std::string> f;
      for (const auto& g : d.digests)
        if (g.repeat == 0) f[g.output] = g.digest;
      return f;
    };
    const auto a = first(*sliced.determinism), b = first(*whole.determinism);
    std::cout << name << ": 16 SMs " << sliced.timing->median_ms << " ms, dW " << a.at("dW") << " (distinct "
              << sliced.determinism->distinct.at("dW") << "); " << dev.sm_count << " SMs " << whole.timing->median_ms
              << " ms, dW " << b.at("dW") << " (distinct " << whole.determinism->distinct.at("dW") << ")\n";
    const bool atomic = name.find(".atomic.") != std::string::npos;
    for (const auto& [out, dg] : b) {
      if (atomic && out == "dW") continue;  // the one output allowed to differ
      EXPECT_EQ(a.at(out), dg) << name << " " << out << ": different bits on 16 SMs";
    }
  }
  // The slice is a slice: the owning GEMMs (hundreds of tiles) run on 16 SMs.
  const double t16 = by[pick["owning"]].begin()->second.record.timing->median_ms;
  const double tall = by[pick["owning"]].rbegin()->second.record.timing->median_ms;
  EXPECT_GT(t16, 1.5 * tall) << "owning on 16 SMs is not slower than on " << dev.sm_count
                             << ": did the launches run on the green context's stream?";
}

}  // namespace
}  // namespace detfuse
