// The orchestration is family-neutral: a second family (attention, fake
// variants and a scripted measurer) goes through plan, can_run refusals,
// budget, resume, selection (exact, nearest, heuristic), the problem record,
// the worker's JSON and a supervised worker, alone and in one run with FLCE
// problems. Also the attention measurer's check slice (CPU: the float64
// reference of the slice equals the slice of the full reference).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "kernels/common/error.h"
#include "reference/attention_ref.h"
#include "reference/compare.h"
#include "reference/inputs.h"
#include "tests/tuner/fakes.h"
#include "tuner/attention_measurer.h"
#include "tuner/best.h"
#include "tuner/gpu_measurer.h"
#include "tuner/presets.h"
#include "tuner/records.h"
#include "tuner/supervisor.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {
namespace {

using testing::attention_problem;
using testing::FakeAttentionMeasurer;
using testing::FakeClock;
using testing::FakeMeasurer;

struct Families : ::testing::Test {
  testing::TempDir tmp;
  Registry reg = testing::fake_registry_with_attention();
  DeviceInfo dev = testing::fake_device();
  FakeClock clock;
  FakeAttentionMeasurer meas;
  std::ostringstream progress;

  void SetUp() override { meas.clock = &clock; }

  TuneReport tune(db::Store& store, TuneOptions o, Measurer* m = nullptr) {
    Tuner t(store, reg, dev, m ? *m : meas, &progress, clock.fn());
    t.set_stop([] { return false; });
    return t.run(o);
  }
  TuneOptions opts(std::vector<Problem> ps) {
    TuneOptions o;
    o.problems = std::move(ps);
    o.command_line = "detfuse tune --kernel attention (test)";
    return o;
  }
  std::map<std::string, db::ResultRecord> results(const db::Store& store, db::Id run) {
    std::map<std::string, db::ResultRecord> m;
    for (const auto& r : store.run_results(run)) m[r.variant_name] = r.record;
    return m;
  }
};

const char* kOwning64 = "attention.bf16.mma.owning.br64_bc64_d128";
const char* kOwning128 = "attention.bf16.mma.owning.br128_bc64_d128";
const char* kAtomic64 = "attention.bf16.mma.atomic.br64_bc64_d128";
const char* kPartials64 = "attention.bf16.mma.partials.br64_bc64_d128";
const char* kOwningD64 = "attention.bf16.mma.owning.br64_bc64_d64";

TEST(FamilyProblem, AttentionRecordJsonAndPlan) {
  const Registry reg = testing::fake_registry_with_attention();
  const AttentionProblem a = attention_problem(4, 32, 8, 4096, 4096, 128, true);
  const Problem p = a;
  EXPECT_EQ(p.family(), Family::attention);
  EXPECT_EQ(p.key(), a.key());
  EXPECT_EQ(p.shape(), "4,32,8,4096,4096,128,causal");
  EXPECT_STREQ(p.label(), "attention");
  // The store's record: the shape dims and the options (d among them).
  const db::ProblemRecord r = problem_record(p);
  EXPECT_EQ(r.family, "attention");
  EXPECT_EQ(r.shape, (std::map<std::string, int64_t>{{"B", 4}, {"H", 32}, {"Hkv", 8}, {"Sq", 4096}, {"Sk", 4096}}));
  EXPECT_NE(r.options_key.find("d=128"), std::string::npos) << r.options_key;
  EXPECT_NE(r.options_key.find("causal=1"), std::string::npos) << r.options_key;
  // What crosses the worker pipe comes back equal.
  const Problem back = problem_from_json(Json::parse(json_text(p.to_json())));
  EXPECT_EQ(back.key(), p.key());
  EXPECT_TRUE(back.is<AttentionProblem>());
  EXPECT_EQ(problem_from_json(Json::parse(json_text(Problem(testing::problem(8, 16, 32)).to_json()))).key(),
            testing::problem(8, 16, 32).key());
  // The softcap and the window cross the pipe too (an older record without them: off).
  AttentionProblem sw = a;
  sw.softcap = 50.0;
  sw.window = 1024;
  const Problem back_sw = problem_from_json(Json::parse(json_text(Problem(sw).to_json())));
  EXPECT_EQ(back_sw.key(), sw.key());
  EXPECT_NE(back_sw.key().find(",win=1024"), std::string::npos) << back_sw.key();
  EXPECT_NE(back_sw.key().find(",cap="), std::string::npos) << back_sw.key();
  Json old = Problem(a).to_json();
  ASSERT_TRUE(old.contains("window"));
  old.erase("softcap");
  old.erase("window");
  EXPECT_EQ(problem_from_json(old).key(), a.key());
  // Plan: the family's variants of the dtype only.
  std::vector<std::string> names;
  for (const auto& v : plan_variants(reg, p, {})) names.push_back(v.name());
  EXPECT_EQ(names, (std::vector<std::string>{kOwning64, kOwning128, kAtomic64, kPartials64, kOwningD64}));
  EXPECT_THROW(plan_variants(reg, p, {"flce.bf16.mma.owning.bm64"}), Error);  // another family
  EXPECT_THROW(plan_variants(reg, p, {"attention.fp32.fma.owning.br64_bc64_d128"}), Error);  // another dtype
  try {
    plan_variants(reg, p, {"attention.bf16.nope"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no attention variant named 'attention.bf16.nope'"), std::string::npos);
  }
  // A Variant handle knows its family; the wrong typed view is refused.
  const Variant v = *p.find_variant(reg, kOwning64);
  EXPECT_EQ(v.family(), Family::attention);
  EXPECT_THROW(v.as<FlceVariant>(), Error);
  EXPECT_THROW(p.as<FlceProblem>(), Error);
  // can_run of forward_backward includes the backward pass.
  const AttentionProblem big = attention_problem(1, 4, 4, 8192, 8192, 128);
  const Variant partials = *p.find_variant(reg, kPartials64);
  EXPECT_FALSE(partials.can_run(big, Mode::forward, testing::fake_device()));
  ASSERT_TRUE(partials.can_run(big, Mode::forward_backward, testing::fake_device()));
  EXPECT_NE(partials.can_run(big, Mode::forward_backward, testing::fake_device())->find("backward: Sq above 4096"),
            std::string::npos);
  // FLOP conventions: forward 4*B*H*Sq*Sk*d halved when causal; backward 2.5x.
  EXPECT_DOUBLE_EQ(p.flops(Mode::forward), 4.0 * 4 * 32 * 4096.0 * 4096 * 128 / 2);
  EXPECT_DOUBLE_EQ(p.flops(Mode::forward_backward), 3.5 * p.flops(Mode::forward));
}

TEST_F(Families, AttentionRunRecordsRefusalsAndSelectsTheFastestDeterministic) {
  db::Store store(tmp / "t.db");
  meas.median_ms = {{kOwning64, 20}, {kOwning128, 15}, {kAtomic64, 5}};
  auto rep = tune(store, opts({attention_problem(2, 8, 2, 8192, 8192, 128)}));
  EXPECT_EQ(rep.status, db::kRunComplete);
  EXPECT_EQ(rep.measured, 3);
  EXPECT_EQ(rep.cannot_run, 2);  // partials (backward Sq > 4096) and the d64 variant
  EXPECT_EQ(meas.prepared.size(), 1u);
  EXPECT_EQ(meas.releases, 1);
  auto rs = results(store, rep.run_id);
  EXPECT_EQ(rs.size(), 5u);  // the fp32 variant is not planned for bf16
  EXPECT_EQ(rs[kPartials64].status, db::kResultCannotRun);
  EXPECT_NE(rs[kPartials64].reason.find("backward: Sq above 4096"), std::string::npos) << rs[kPartials64].reason;
  EXPECT_NE(rs[kOwningD64].reason.find("head dim 128"), std::string::npos) << rs[kOwningD64].reason;
  ASSERT_TRUE(rep.problems.at(0).best);
  EXPECT_EQ(rep.problems[0].best->variant, kOwning128);  // atomic is faster, not deterministic
  EXPECT_TRUE(rep.problems[0].problem.is<AttentionProblem>());
  // Every digest was stored with the right output names; the store agrees on the best.
  EXPECT_EQ(rs[kAtomic64].determinism->distinct.at("dQ"), 5);
  const auto dev_id = store.find_device(device_record(dev));
  const auto pid = store.find_problem(attention_problem(2, 8, 2, 8192, 8192, 128).key());
  ASSERT_TRUE(dev_id && pid);
  EXPECT_EQ(store.best(*dev_id, *pid, false)->variant_name, kOwning128);
  EXPECT_EQ(store.best(*dev_id, *pid, true)->variant_name, kAtomic64);
  EXPECT_NE(progress.str().find(std::string(kOwning128) + " (2,8,2,8192,8192,128)"), std::string::npos) << progress.str();
}

TEST_F(Families, AttentionBudgetThenResumeFinishesWithoutRedoing) {
  db::Store store(tmp / "t.db");
  meas.seconds_per_variant = 10;
  auto o = opts({attention_problem(1, 4, 2, 1024, 1024, 128), attention_problem(1, 4, 2, 2048, 2048, 128, true)});
  o.budget_s = 25;  // starts at t=0, 10, 20; not at 30
  auto rep = tune(store, o);
  EXPECT_EQ(rep.status, db::kRunBudget);
  EXPECT_EQ(meas.measured.size(), 3u);
  EXPECT_EQ(rep.remaining, 7);  // 5 planned per problem, 3 measured
  ASSERT_TRUE(rep.problems[0].best);
  meas.measured.clear();
  o.budget_s = 0;
  o.resume = true;
  auto rep2 = tune(store, o);
  EXPECT_TRUE(rep2.resumed);
  EXPECT_EQ(rep2.status, db::kRunComplete);
  EXPECT_EQ(rep2.skipped, 3);
  EXPECT_EQ(rep2.measured + rep2.cannot_run, 7);
  EXPECT_EQ(meas.measured.size(), 5u);  // partials of the first problem, 4 of the second (d64 refused by can_run)
  for (const auto& pr : rep2.problems) EXPECT_EQ(pr.ranked.size(), 5u);  // the whole chain in the table
  // The interrupted variant of an attention run is redone by --resume too.
  meas.measured.clear();
  VariantOutcome stopped;
  stopped.interrupted = true;
  meas.scripted[kOwning128] = stopped;
  auto o3 = opts({attention_problem(1, 4, 2, 512, 512, 128)});
  auto rep3 = tune(store, o3);
  EXPECT_EQ(rep3.status, db::kRunInterrupted);
  meas.scripted.clear();
  meas.measured.clear();
  o3.resume = true;
  auto rep4 = tune(store, o3);
  EXPECT_TRUE(rep4.resumed);
  EXPECT_EQ(rep4.skipped, 1);  // owning br64 was done
  EXPECT_EQ(meas.measured.front(), kOwning128);
}

TEST_F(Families, OneRunTunesBothFamiliesEachWithItsMeasurer) {
  db::Store store(tmp / "t.db");
  FamilyMeasurers both;
  auto flce = std::make_unique<FakeMeasurer>();
  auto attn = std::make_unique<FakeAttentionMeasurer>();
  FakeMeasurer* f = flce.get();
  FakeAttentionMeasurer* a = attn.get();
  both.add(Family::flce, std::move(flce));
  both.add(Family::attention, std::move(attn));
  auto o = opts({testing::problem(1024, 256, 1000), attention_problem(1, 4, 2, 256, 300, 128, true)});
  auto rep = tune(store, o, &both);
  EXPECT_EQ(rep.status, db::kRunComplete);
  EXPECT_EQ(f->prepares, 1);
  EXPECT_EQ(a->prepared.size(), 1u);
  EXPECT_EQ(f->measured.size(), 4u);  // the bf16 FLCE variants
  EXPECT_EQ(a->measured.size(), 4u);  // the bf16 d128 attention variants
  for (const auto& n : f->measured) EXPECT_EQ(n.rfind("flce.", 0), 0u) << n;
  for (const auto& n : a->measured) EXPECT_EQ(n.rfind("attention.", 0), 0u) << n;
  ASSERT_EQ(rep.problems.size(), 2u);
  EXPECT_EQ(rep.problems[0].best->variant.rfind("flce.", 0), 0u);
  EXPECT_EQ(rep.problems[1].best->variant.rfind("attention.", 0), 0u);
  // A family without a measurer: its problem's variants are recorded as errors, the run goes on.
  FamilyMeasurers flce_only;
  flce_only.add(Family::flce, std::make_unique<FakeMeasurer>());
  auto rep2 = tune(store, opts({attention_problem(1, 4, 2, 64, 64, 128)}), &flce_only);
  for (const auto& [name, r] : results(store, rep2.run_id)) {
    if (r.status == db::kResultCannotRun) continue;
    EXPECT_EQ(r.status, db::kResultError) << name;
    EXPECT_NE(r.reason.find("no measurer for the attention family"), std::string::npos) << r.reason;
  }
}

TEST_F(Families, BestForAttentionExactNearestThenHeuristic) {
  db::Store store(tmp / "t.db");
  meas.median_ms = {{kOwning64, 20}, {kOwning128, 15}, {kPartials64, 50}};
  tune(store, opts({attention_problem(4, 32, 8, 4096, 4096, 128)}));
  meas.median_ms = {{kOwning64, 10}, {kOwning128, 15}, {kPartials64, 50}};
  tune(store, opts({attention_problem(1, 32, 8, 32768, 32768, 128)}));
  const auto ids = device_rows_for(store, dev);
  // Exact.
  auto a = resolve_best(&store, ids, dev, attention_problem(4, 32, 8, 4096, 4096, 128), Mode::forward_backward, false,
                        reg);
  EXPECT_EQ(a.source, ChoiceSource::tuned);
  EXPECT_EQ(a.variant, kOwning128);
  // Nearest: 2 x 32k is one doubling from the 1 x 32k shape.
  a = resolve_best(&store, ids, dev, attention_problem(2, 32, 8, 32768, 32768, 128), Mode::forward_backward, false, reg);
  EXPECT_EQ(a.source, ChoiceSource::nearest);
  EXPECT_EQ(a.variant, kOwning64);
  EXPECT_DOUBLE_EQ(a.distance, 1.0);
  // Other options (causal; head dim 64): nothing comparable tuned, the family's heuristic.
  a = resolve_best(&store, ids, dev, attention_problem(4, 32, 8, 4096, 4096, 128, true), Mode::forward_backward, false,
                   reg);
  EXPECT_EQ(a.source, ChoiceSource::heuristic);
  EXPECT_EQ(a.variant, kOwning64);  // the first deterministic variant that can run
  a = resolve_best(&store, ids, dev, attention_problem(4, 32, 8, 4096, 4096, 64), Mode::forward_backward, false, reg);
  EXPECT_EQ(a.source, ChoiceSource::heuristic);
  EXPECT_EQ(a.variant, kOwningD64);
  // A heuristic written against attention's types replaces the default.
  const HeuristicFn h = heuristic_from(reg, {}, [&](const AttentionProblem&, AttentionMode m, const DeviceInfo&) -> const AttentionVariant& {
    EXPECT_EQ(m, AttentionMode::backward);
    return *reg.find_attention(kAtomic64);
  });
  a = resolve_best(nullptr, {}, dev, attention_problem(4, 32, 8, 4096, 4096, 128, true), Mode::forward_backward, false,
                   reg, h);
  EXPECT_EQ(a.variant, kAtomic64);
  // And it leaves FLCE problems to FLCE's.
  EXPECT_EQ(h(testing::problem(8, 8, 8), Mode::forward_backward, dev).rfind("flce.", 0), 0u);
  // No variant can run: a named error.
  Registry none = testing::fake_registry();
  EXPECT_THROW(resolve_best(nullptr, {}, dev, attention_problem(1, 1, 1, 8, 8, 128), Mode::forward_backward, false, none),
               Error);
}

TEST_F(Families, SupervisedWorkerMeasuresAttentionByName) {
  db::Store store(tmp / "t.db");
  SupervisedMeasurer sup(reg, [] {
    WorkerSetup s;
    s.device = testing::fake_device();
    auto m = std::make_unique<FamilyMeasurers>();
    m->add(Family::flce, std::make_unique<FakeMeasurer>());
    m->add(Family::attention, std::make_unique<FakeAttentionMeasurer>());
    s.measurer = std::move(m);
    return s;
  });
  sup.start();
  auto o = opts({attention_problem(1, 4, 2, 128, 128, 128), testing::problem(256, 64, 100)});
  auto rep = tune(store, o, &sup);
  EXPECT_EQ(rep.status, db::kRunComplete) << progress.str();
  EXPECT_EQ(rep.measured, 8);  // 4 attention (d128; the d64 one refuses) + 4 FLCE
  for (const auto& [name, r] : results(store, rep.run_id)) {
    if (r.status == db::kResultCannotRun) continue;
    EXPECT_EQ(r.status, db::kResultOk) << name << ": " << r.reason;
  }
  EXPECT_EQ(sup.workers_started(), 1);
}

TEST(FamilyPresets, LlmAttentionHasTheIssuesShapesAndKeepsOptions) {
  AttentionProblem opts;
  opts.causal = true;
  opts.dtype = DType::bf16;
  const auto ps = expand_preset_for("llm-attention", opts);
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_EQ(ps[0].shape(), "4,32,8,4096,4096,128,causal");  // Llama-3-8B at 4k (the issue's bars)
  bool d64 = false, long_ctx = false;
  for (const auto& p : ps) {
    EXPECT_NO_THROW(p.validate());
    const auto& a = p.as<AttentionProblem>();
    EXPECT_TRUE(a.causal);
    d64 = d64 || a.d == 64;
    long_ctx = long_ctx || a.Sk >= 32768;
    EXPECT_NO_THROW(p.check_fits(nullptr));
  }
  EXPECT_TRUE(d64 && long_ctx);
  EXPECT_THROW(expand_preset_for("llm-attention", testing::problem(1, 1, 1)), Error);  // an attention preset
  EXPECT_THROW(expand_preset_for("llm-heads", opts), Error);                           // an FLCE preset
  try {
    expand_preset_for("nope", opts);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llm-attention"), std::string::npos);
  }
}

// The measurer's check of large problems: O, LSE and dQ rows of the slice
// (batch 0, the heads of kv head 0, the last Sq' queries) from the full
// problem equal the reference of the slice taken as a problem of its own,
// including causal rows that see no key (Sq > Sk) and GQA.
TEST(AttentionCheckSlice, SliceReferenceEqualsTheFullReferencesRows) {
  for (bool causal : {false, true}) {
    const AttentionProblem p = attention_problem(2, 6, 2, 40, 24, 16, causal, DType::f32);
    const auto in = reference::make_attention_inputs(p, 7);
    const AttentionProblem s = attention_check_slice(p, 3.0 * 24 * 16 * 10);  // 10 rows of 3 heads
    EXPECT_EQ(s.B, 1);
    EXPECT_EQ(s.H, 3);
    EXPECT_EQ(s.Hkv, 1);
    EXPECT_EQ(s.Sq, 10);
    EXPECT_EQ(s.Sk, 24);
    EXPECT_EQ(s.softmax_scale(), p.softmax_scale());
    const auto full = reference::attention_reference(p, in, true, 2);
    const auto small = reference::attention_reference(s, slice_attention_inputs(p, in, s), true, 2);
    auto rows = [&](const std::vector<double>& t, int64_t w) {
      std::vector<float> f(t.begin(), t.end());
      return slice_query_rows(p, f, s, w);
    };
    const std::vector<float> o = rows(full.O, p.d), dq = rows(full.dQ, p.d), lse = rows(full.lse, 1);
    ASSERT_EQ(o.size(), small.O.size());
    EXPECT_LT(reference::rel_norm_error(o, small.O), 1e-6);
    EXPECT_LT(reference::rel_norm_error(dq, small.dQ), 1e-6);
    EXPECT_LT(lse_error(lse, small.lse), 1e-6);
    // Causal with Sq > Sk: the first 16 of 40 queries see no key; the slice's
    // last 10 rows all see keys. A slice that reaches them keeps -inf rows.
    if (causal) {
      const AttentionProblem s2 = attention_check_slice(p, 3.0 * 24 * 16 * 30);
      const auto small2 = reference::attention_reference(s2, slice_attention_inputs(p, in, s2), false, 2);
      EXPECT_TRUE(std::isinf(small2.lse[0]));
      std::vector<float> full_lse(full.lse.begin(), full.lse.end());
      EXPECT_LT(lse_error(slice_query_rows(p, full_lse, s2, 1), small2.lse), 1e-6);
    }
  }
  // A slice never exceeds the problem.
  const AttentionProblem p = attention_problem(1, 2, 2, 8, 8, 16);
  EXPECT_EQ(attention_check_slice(p, 1e12).Sq, 8);
  EXPECT_EQ(attention_check_slice(p, 1).Sq, 1);
}

TEST(AttentionCheckSlice, LseErrorTreatsRowsWithoutKeysExactly) {
  const double inf = std::numeric_limits<double>::infinity();
  const float finf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(lse_error({-finf, 1.0f}, {-inf, 1.0}), 0.0);
  EXPECT_TRUE(std::isinf(lse_error({0.0f, 1.0f}, {-inf, 1.0})));   // a row without keys must be -inf
  EXPECT_TRUE(std::isinf(lse_error({-finf, 1.0f}, {2.0, 1.0})));   // and only such rows
  EXPECT_TRUE(std::isinf(lse_error({std::nanf(""), 1.0f}, {2.0, 1.0})));
  EXPECT_NEAR(lse_error({1.0f, 2.0f}, {1.0, 2.0 + 1e-3}), 1e-3 / std::sqrt(1.0 + 2.001 * 2.001), 1e-7);
  EXPECT_EQ(attention_tolerances_for(DType::f32).out, 1e-5);
  EXPECT_EQ(attention_tolerances_for(DType::bf16).out, 2e-2);
  EXPECT_EQ(attention_tolerances_for(DType::bf16).lse, 1e-4);
}

}  // namespace
}  // namespace detfuse::tuner
