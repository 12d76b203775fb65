// GPU tests of the tuner's attention side (run them on the H200; they skip
// with the reason where there is no GPU):
//   - the machinery, with host-reference variants (host_attention_variants.h)
//     that need no attention kernel: the measurer's full and slice checks,
//     incorrect and nondeterministic variants recognised, verify's classes,
//     bench's forward and forward+backward rows, a tuning run into a store;
//   - every registered attention variant of this build (kernels/attention),
//     through the measurer on problems with Sq != Sk, causal Sq > Sk (rows
//     without keys), GQA and odd lengths; skipped while none is registered.
#include <gtest/gtest.h>

#include <iostream>

#include "kernels/registry.h"
#include "tests/gpu_test.h"
#include "tests/tuner/fakes.h"
#include "tests/tuner_gpu/host_attention_variants.h"
#include "tuner/attention_measurer.h"
#include "tuner/bench.h"
#include "tuner/records.h"
#include "tuner/tuner.h"
#include "tuner/verify.h"

namespace detfuse::tuner {
namespace {

using testing::attention_problem;

struct AttentionGpu : ::testing::Test {
  DeviceInfo dev;
  Registry host = testing::host_attention_registry();
  void SetUp() override {
    DETFUSE_REQUIRE_GPU();
    DETFUSE_CUDA_CHECK(cudaSetDevice(0));
    dev = query_device(0);
  }
  const AttentionVariant& v(const std::string& needle, DType t = DType::bf16) {
    for (const auto& a : host.attention())
      if (a.desc.dtype == t && a.desc.name.find(needle) != std::string::npos) return a;
    throw Error("no host variant " + needle);
  }
};

TEST_F(AttentionGpu, MeasurerFullCheckRepeatsAndTimes) {
  AttentionGpuMeasurer m(dev);
  m.prepare(attention_problem(2, 4, 2, 70, 45, 64, true), Mode::forward_backward, 0);  // causal, Sq > Sk, GQA
  MeasureControl ctl;
  ctl.repeats = 3;
  const VariantOutcome o = m.measure(v("ex1"), ctl);
  ASSERT_EQ(o.status, db::kResultOk) << o.reason;
  EXPECT_EQ(o.correctness->checked_what.rfind("full", 0), 0u) << o.correctness->checked_what;
  for (const char* out : {"O", "lse", "dQ", "dK", "dV"}) EXPECT_LE(o.correctness->errors.at(out), 2e-2) << out;
  EXPECT_EQ(o.determinism->digests.size(), 15u);  // 5 outputs x 3 repeats
  EXPECT_EQ(o.determinism->level, db::kLevelRunToRun);
  EXPECT_GE(o.timing->samples_ms.size(), 5u);
  EXPECT_DOUBLE_EQ(o.timing->flops, 3.5 * attention_problem(2, 4, 2, 70, 45, 64, true).flops_forward());
  EXPECT_GE(o.timing->peak_extra_bytes, 256);
  const VariantOutcome w = m.measure(v("wr1"), ctl);
  EXPECT_EQ(w.status, db::kResultIncorrect);
  EXPECT_GT(w.correctness->errors.at("O"), 2e-2);
  const VariantOutcome n = m.measure(v("no1"), ctl);
  ASSERT_EQ(n.status, db::kResultOk) << n.reason;
  EXPECT_EQ(n.determinism->level, db::kLevelNone);
  EXPECT_EQ(n.determinism->distinct.at("dQ"), 2);
  EXPECT_EQ(n.determinism->distinct.at("dK"), 1);
  // fp32: the 1e-5 tolerance, forward only.
  m.prepare(attention_problem(1, 2, 1, 33, 65, 64, false, DType::f32), Mode::forward, 1);
  const VariantOutcome f = m.measure(v("ex1", DType::f32), ctl);
  ASSERT_EQ(f.status, db::kResultOk) << f.reason;
  EXPECT_EQ(f.correctness->errors.count("dQ"), 0u);
  EXPECT_LE(f.correctness->errors.at("O"), 1e-5);
  EXPECT_EQ(f.determinism->digests.size(), 6u);  // O, lse x 3
}

TEST_F(AttentionGpu, LargeProblemsAreCheckedOnTheSlice) {
  AttentionCheckPolicy small;
  small.full_check_macs = 1e5;  // force the slice path
  small.reduced_macs = 2 * 64.0 * 64 * 20;  // 20 query rows of 2 heads
  AttentionGpuMeasurer m(dev, small);
  m.prepare(attention_problem(2, 4, 2, 96, 64, 64, true), Mode::forward_backward, 0);
  MeasureControl ctl;
  ctl.repeats = 2;
  const VariantOutcome o = m.measure(v("ex1"), ctl);
  ASSERT_EQ(o.status, db::kResultOk) << o.reason;
  EXPECT_EQ(o.correctness->checked_what.rfind("slice b=0, heads 0-1, last 20 queries", 0), 0u)
      << o.correctness->checked_what;
  for (const char* out : {"O@slice", "lse@slice", "dQ@slice", "O", "lse", "dQ", "dK", "dV"})
    EXPECT_LE(o.correctness->errors.at(out), 2e-2) << out;
  const VariantOutcome w = m.measure(v("wr1"), ctl);
  EXPECT_EQ(w.status, db::kResultIncorrect);
  EXPECT_GT(w.correctness->errors.at("O@slice"), 2e-2);
}

TEST_F(AttentionGpu, VerifyClassesBenchRowsAndATuningRun) {
  const AttentionProblem p = attention_problem(1, 4, 2, 64, 80, 64);
  VerifyOptions vo;
  vo.problem = p;
  vo.variants = {v("ex1").desc.name, v("no1").desc.name};
  vo.repeats = 4;
  testing::TempDir tmp;
  vo.dump_dir = tmp / "dump";
  const auto rows = run_verify(nullptr, host, dev, vo, nullptr);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, kNotStored) << rows[0].reason;
  EXPECT_TRUE(rows[0].differences.empty());
  EXPECT_FALSE(rows[1].differences.empty());  // noisy: distinct dQ digests here
  for (const char* f : {"O.npy", "lse.npy", "dQ.npy", "dK.npy", "dV.npy"})
    EXPECT_TRUE(std::filesystem::exists(tmp / "dump" / v("ex1").desc.name / f)) << f;
  const auto classes = invariance_classes(rows);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_FALSE(classes[1].self_consistent);

  BenchOptions bo;
  bo.problem = p;
  bo.variants = {v("ex1").desc.name};
  bo.repeats = 3;
  const BenchReport r = run_bench(host, dev, bo, nullptr);
  ASSERT_EQ(r.rows.size(), 1u);
  ASSERT_EQ(r.rows[0].status, "ok") << r.rows[0].reason;
  ASSERT_TRUE(r.rows[0].forward);
  EXPECT_DOUBLE_EQ(r.rows[0].forward->flops, p.flops_forward());
  EXPECT_DOUBLE_EQ(r.rows[0].timing.flops, 3.5 * p.flops_forward());
  EXPECT_EQ(r.rows[0].distinct.at("dQ"), 1);
  const std::string table = format_bench_table(r);
  EXPECT_NE(table.find("fwd+bwd ms"), std::string::npos) << table;
  EXPECT_NE(table.find("dQ#"), std::string::npos) << table;
  EXPECT_EQ(table.find("x GEMMs"), std::string::npos) << table;
  std::cout << table << bench_json(r);
  // A forward-only variant: the forward's time and digests, said so.
  bo.variants = {v("fw1").desc.name};
  const BenchReport rf = run_bench(host, dev, bo, nullptr);
  ASSERT_EQ(rf.rows.at(0).status, "ok") << rf.rows[0].reason;
  EXPECT_EQ(rf.rows[0].forward_only, "backward: forward only (test)");
  ASSERT_TRUE(rf.rows[0].forward);
  EXPECT_TRUE(rf.rows[0].timing.samples_ms.empty());
  EXPECT_EQ(rf.rows[0].distinct.count("dQ"), 0u);
  EXPECT_EQ(rf.rows[0].distinct.at("O"), 1);
  EXPECT_NE(format_bench_table(rf).find("forward only"), std::string::npos);
  std::cout << format_bench_table(rf);

  // A tuning run (in-process) into a store, then verify reproduces it.
  {
    db::Store store(tmp / "t.db");
    AttentionGpuMeasurer m(dev);
    Tuner t(store, host, dev, m);
    t.set_stop([] { return false; });
    TuneOptions o;
    o.problems = {p};
    const TuneReport rep = t.run(o);
    ASSERT_EQ(rep.status, db::kRunComplete);
    ASSERT_TRUE(rep.problems.at(0).best);
    EXPECT_EQ(rep.problems[0].best->variant, v("ex1").desc.name);  // wrong is incorrect, noisy nondeterministic, fwd refused
    EXPECT_EQ(rep.cannot_run, 1);
  }
  db::Store ro = db::Store::open_read_only(tmp / "t.db");
  vo.variants = {v("ex1").desc.name};
  vo.dump_dir.reset();
  const auto again = run_verify(&ro, host, dev, vo, nullptr);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].status, kReproduced) << again[0].reason;
}

// Every registered attention variant of this build against the float64
// reference through the tuner's measurer.
TEST_F(AttentionGpu, EveryRegisteredVariantIsCorrectThroughTheMeasurer) {
  const auto& all = builtin_registry().attention();
  // The fma variants are always built: an empty list is a broken build, not a skip.
  ASSERT_FALSE(all.empty()) << "no attention variant is registered in this build (kernels/attention)";
  const std::vector<AttentionProblem> problems = {
      attention_problem(2, 4, 2, 128, 128, 64),          // GQA
      attention_problem(1, 4, 4, 100, 257, 128, true),   // causal, Sq < Sk, odd lengths
      attention_problem(1, 4, 1, 200, 77, 64, true),     // causal, Sq > Sk: rows without keys
  };
  // forward_backward for every variant that runs both passes; the forward
  // alone for variants that refuse the backward (forward-only kernels).
  int measured = 0;
  for (DType t : {DType::bf16, DType::f32}) {
    for (AttentionProblem p : problems) {
      p.dtype = t;
      for (Mode mode : {Mode::forward_backward, Mode::forward}) {
        AttentionGpuMeasurer m(dev);
        bool prepared = false;
        for (const auto& var : all) {
          if (var.desc.dtype != t) continue;
          if (mode == Mode::forward && !FamilyTraits<AttentionProblem>::can_run(var, p, Mode::forward_backward, dev))
            continue;  // measured with its backward above
          if (auto why = FamilyTraits<AttentionProblem>::can_run(var, p, mode, dev)) {
            std::cout << var.desc.name << " refuses " << p.key() << " (" << to_string(mode) << "): " << *why << "\n";
            continue;
          }
          if (!prepared) m.prepare(p, mode, 3);
          prepared = true;
          MeasureControl ctl;
          ctl.repeats = 5;
          ctl.time_cap_s = 2;  // past 2 repeats and 5 timing repetitions: a correctness sweep, not a tuning
          const VariantOutcome o = m.measure(var, ctl);
          ++measured;
          EXPECT_EQ(o.status, db::kResultOk) << var.desc.name << " on " << p.key() << " (" << to_string(mode)
                                             << "): " << o.reason;
          if (o.correctness)
            for (const auto& [k, e] : o.correctness->errors)
              std::cout << var.desc.name << " " << to_string(mode) << " " << k << " " << e << "\n";
          if (o.determinism && var.desc.deterministic)
            EXPECT_EQ(o.determinism->level, db::kLevelRunToRun) << var.desc.name << " on " << p.key();
        }
      }
    }
  }
  std::cout << measured << " (variant, problem, mode) measurements\n";
  EXPECT_GT(measured, 0) << "every registered attention variant refused every problem";
}

}  // namespace
}  // namespace detfuse::tuner
