// CPU tests of the contention study: the sweep planning (pure functions), the
// runner over the tuner with a synthetic measurer (tagging, resume, budget),
// the schema v4 records (study, spread) and their CSV export.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tuner/study/contention_plan.h"
#include "tuner/study/contention_study.h"
#include "tuner/records.h"
#include "tuner/sm_slice.h"
#include "tests/study/synth.h"

namespace detfuse {
namespace {

using namespace detfuse::testing;

std::vector<std::string> names_of(const Registry& r) {
  std::vector<std::string> n;
  for (const auto& v : r.flce()) n.push_back(v.desc.name);
  return n;
}

TEST(StudyPlan, ParsesCanonicalNames) {
  auto v = study::parse_variant_name("flce.bf16.wgmma.partials.bm128_bn256_bk64_c2_st4_mb1024_sk4_vs512");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->family, "flce");
  EXPECT_EQ(v->dtype, "bf16");
  EXPECT_EQ(v->engine, "wgmma");
  EXPECT_EQ(v->strategy, "partials");
  EXPECT_EQ(v->param("bn"), 256);
  EXPECT_EQ(v->param("sk"), 4);
  EXPECT_EQ(v->param("vs"), 512);
  EXPECT_EQ(v->param("zz", -7), -7);
  EXPECT_EQ(v->tile(), "bm128_bn256_bk64_c2_st4");
  EXPECT_FALSE(study::parse_variant_name("flce.bf16.mma.owning"));
  EXPECT_FALSE(study::parse_variant_name("flce.bf16.mma.owning.bm"));
  EXPECT_FALSE(study::parse_variant_name("flce.bf16.mma.owning.128"));
  EXPECT_FALSE(study::parse_variant_name("flce.bf16.mma.owning.bm12x"));
  EXPECT_FALSE(study::parse_variant_name("flce..mma.owning.bm128"));
}

TEST(StudyPlan, ProblemsSpanTheAxes) {
  const auto full = study::contention_problems(study::contention_axes(false), DType::bf16);
  const auto a = study::contention_axes(false);
  EXPECT_EQ(a.N_sweep.front(), 512);
  EXPECT_EQ(a.N_sweep.back(), 65536);
  // contention sweep, then V and D sweeps at N_fixed, the shared point once.
  size_t contention = 0, at_fixed_n = 0;
  std::set<std::string> keys;
  for (const auto& p : full) {
    EXPECT_TRUE(keys.insert(p.key()).second) << p.shape();
    EXPECT_EQ(p.dtype, DType::bf16);
    if (p.D == a.D && p.V == a.V) ++contention;
    if (p.N == a.N_fixed) ++at_fixed_n;
  }
  EXPECT_EQ(contention, a.N_sweep.size());
  EXPECT_EQ(full.size(), a.N_sweep.size() + a.V_sweep.size() + a.D_sweep.size() - 2);  // (N_fixed, D, V) thrice
  EXPECT_EQ(at_fixed_n, a.V_sweep.size() + a.D_sweep.size() - 1);
  const auto quick = study::contention_problems(study::contention_axes(true), DType::bf16);
  EXPECT_GE(quick.size(), 2u);
  EXPECT_LE(quick.size(), 4u);
  EXPECT_EQ(quick.front().N, 512);
  EXPECT_EQ(quick.back().N, 8192);  // the adders axis' fixed point
}

TEST(StudyPlan, QuickTakesOneOrTwoVariantsPerEngineAndStrategy) {
  const Registry reg = synth_registry();
  study::ContentionOptions o;
  o.quick = true;
  const auto v = study::contention_variants(names_of(reg), o);
  // Owning at its smallest and largest budget; atomic and partials at every
  // row-split level of the first shape (the adders axis), in registry order.
  const std::vector<std::string> want = {
      "flce.bf16.mma.owning.bm128_bn128_mb512",      "flce.bf16.mma.owning.bm128_bn128_mb1920",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk4", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk4_vs256",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk1", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk1_vs1024",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk16", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk16_vs64",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk0", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk0_vs0",
      "flce.bf16.cublaslt.owning.mb512",             "flce.bf16.cublaslt.owning.mb2000",
      "flce.bf16.cublaslt.partials.mb1024_sk2_vs0"};
  EXPECT_EQ(v, want);
}

std::vector<std::string> study_names_of(const Registry& r) {
  std::vector<std::string> n;
  for (const auto& v : r.flce())
    if (v.desc.study_only) n.push_back(v.desc.name);
  return n;
}

TEST(StudyPlan, StudyVariantsAreNeverAnotherShapesDefault) {
  // A second shape with only study variants at sk1 and sk0 besides its
  // default sk4: the full plan takes its default, never sk1 (first by sk).
  Registry reg = synth_registry();
  reg.add(synth_variant("mma", "atomic", {{"bm", 256}, {"bn", 128}, {"mb", 1024}, {"sk", 1}}, true));
  reg.add(synth_variant("mma", "atomic", {{"bm", 256}, {"bn", 128}, {"mb", 1024}, {"sk", 4}}));
  reg.add(synth_variant("mma", "atomic", {{"bm", 256}, {"bn", 128}, {"mb", 1024}, {"sk", 0}}, true));
  study::ContentionOptions o;
  o.study_variants = study_names_of(reg);
  const auto v = study::contention_variants(names_of(reg), o);
  EXPECT_NE(std::find(v.begin(), v.end(), "flce.bf16.mma.atomic.bm256_bn128_mb1024_sk4"), v.end());
  EXPECT_EQ(std::find(v.begin(), v.end(), "flce.bf16.mma.atomic.bm256_bn128_mb1024_sk1"), v.end());
  EXPECT_EQ(std::find(v.begin(), v.end(), "flce.bf16.mma.atomic.bm256_bn128_mb1024_sk0"), v.end());
  // The first shape sweeps every level, sk0 included.
  EXPECT_NE(std::find(v.begin(), v.end(), "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk0"), v.end());
}

TEST(StudyPlan, SmCountAxis) {
  const Registry reg = synth_registry();
  study::ContentionOptions q;
  q.quick = true;
  const auto quick = study::plan_contention(names_of(reg), q);
  EXPECT_EQ(quick.sms, (std::vector<int>{16, 0}));
  // Sliced levels measure the fixed point of the contention axis only.
  ASSERT_EQ(quick.sm_problems.size(), 1u);
  EXPECT_EQ(quick.sm_problems[0].shape(), "8192,4096,32768");
  EXPECT_NE(quick.axes_json.find("\"sms\":[16,0]"), std::string::npos) << quick.axes_json;
  const auto full = study::plan_contention(names_of(reg), {});
  EXPECT_EQ(full.sms, (std::vector<int>{8, 16, 33, 66, 0}));
  ASSERT_EQ(full.sm_problems.size(), 1u);  // (N_fixed, D, V) once, though three sweeps pass it
  EXPECT_EQ(full.sm_problems[0].shape(), "8192,4096,32768");
  study::ContentionOptions e;
  e.sms = {132, 8};
  EXPECT_EQ(study::plan_contention(names_of(reg), e).sms, (std::vector<int>{132, 8}));
  e.sms = {-1};
  EXPECT_THROW(study::plan_contention(names_of(reg), e), Error);
  // Attention: the sliced levels at S_gqa, non-causal, Hkv = H.
  std::vector<std::string> att_names;
  for (const auto& v : reg.attention()) att_names.push_back(v.desc.name);
  study::ContentionOptions ao;
  ao.family = Family::attention;
  ao.quick = true;
  const auto att = study::plan_contention(att_names, ao);
  ASSERT_EQ(att.sm_problems.size(), 1u);
  EXPECT_EQ(att.sm_problems[0].shape(), "4,32,32,4096,4096,128");
}

TEST(StudyPlan, FullTakesEveryShapeAndTheFirstShapesKnobs) {
  const Registry reg = synth_registry();
  const auto v = study::contention_variants(names_of(reg), {});
  const std::vector<std::string> want = {
      "flce.bf16.mma.owning.bm128_bn128_mb512",      "flce.bf16.mma.owning.bm128_bn128_mb1024",
      "flce.bf16.mma.owning.bm128_bn128_mb1920",     "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk4",
      "flce.bf16.mma.partials.bm128_bn128_mb1024_sk4_vs256",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk1", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk1_vs1024",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk16", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk16_vs64",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk0", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk0_vs0",
      "flce.bf16.mma.owning.bm64_bn128_mb1024",      // second shape: its median budget only
      "flce.bf16.mma.atomic.bm64_bn128_mb1024_sk4",  "flce.bf16.mma.partials.bm64_bn128_mb1024_sk4_vs256",
      "flce.bf16.cublaslt.owning.mb512",             "flce.bf16.cublaslt.owning.mb2000",
      "flce.bf16.cublaslt.partials.mb1024_sk2_vs0"};
  EXPECT_EQ(v, want);
}

TEST(StudyPlan, EngineFilterAndErrors) {
  const Registry reg = synth_registry();
  study::ContentionOptions o;
  o.engines = {"cublaslt"};
  for (const auto& n : study::contention_variants(names_of(reg), o)) EXPECT_NE(n.find(".cublaslt."), std::string::npos);
  o.engines = {"wgmma"};
  EXPECT_THROW(study::plan_contention(names_of(reg), o), Error);
  study::ContentionOptions q;
  q.quick = true;
  const auto plan = study::plan_contention(names_of(reg), q);
  EXPECT_EQ(plan.name, "contention-flce-quick");
  EXPECT_GE(plan.repeats, 2);
  EXPECT_NE(plan.axes_json.find("\"N_sweep\":[512,8192]"), std::string::npos);
  EXPECT_EQ(study::plan_contention(names_of(reg), {}).name, "contention-flce");
  study::ContentionOptions e;
  e.engines = {"cublaslt"};
  EXPECT_EQ(study::plan_contention(names_of(reg), e).name, "contention-flce-cublaslt");
}

std::vector<std::string> attention_names_of(const Registry& r) {
  std::vector<std::string> n;
  for (const auto& v : r.attention()) n.push_back(v.desc.name);
  return n;
}

study::ContentionOptions attention_options(bool quick, std::vector<std::string> engines = {}) {
  study::ContentionOptions o;
  o.family = Family::attention;
  o.quick = quick;
  o.engines = std::move(engines);
  return o;
}

TEST(StudyPlan, ParsesAttentionNames) {
  auto v = study::parse_variant_name("attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst2_d128");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->family, "attention");
  EXPECT_EQ(v->strategy, "owning");
  EXPECT_EQ(v->param("d"), 128);
  EXPECT_EQ(v->param("qbc"), 64);
  EXPECT_EQ(v->tile(), "br64_bc128_st2_qbc64_qst2_d128");
  v = study::parse_variant_name("attention.bf16.fma.partials.br64_bc64_w8_d128_mb256");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->param("mb"), 256);
  EXPECT_EQ(v->tile(), "br64_bc64_w8_d128");  // mb: the partials workspace knob, not the shape
}

TEST(StudyPlan, AttentionProblemsSpanTheAxes) {
  const auto a = study::attention_contention_axes(false);
  const auto full = study::attention_contention_problems(a, DType::bf16);
  EXPECT_EQ(a.S_sweep.front(), 512);
  EXPECT_EQ(a.S_sweep.back(), 32768);
  std::set<std::string> keys;
  size_t noncausal = 0, causal = 0, gqa = 0;
  for (const auto& p : full) {
    EXPECT_TRUE(keys.insert(p.key()).second) << p.key();
    EXPECT_NO_THROW(p.validate()) << p.key();
    EXPECT_EQ(p.dtype, DType::bf16);
    EXPECT_EQ(p.H, 32);
    EXPECT_EQ(p.d, 128);
    EXPECT_EQ(p.Sq, p.Sk);
    // About 16k tokens: B*S constant up to S=16384, then B=1.
    EXPECT_EQ(p.B, std::max<int64_t>(1, 16384 / p.Sk)) << p.key();
    if (p.Hkv != p.H) {
      ++gqa;
      EXPECT_EQ(p.Sk, a.S_gqa);
      EXPECT_FALSE(p.causal);
    } else {
      ++(p.causal ? causal : noncausal);
    }
  }
  EXPECT_EQ(noncausal, a.S_sweep.size());
  EXPECT_EQ(causal, a.causal_S.size());
  EXPECT_EQ(gqa, 3u);  // Hkv 8, 4, 1 (Hkv = 32 is the S sweep's point)
  EXPECT_EQ(full.size(), 7u + 7u + 3u);
  // Sweep order: contention, causal, GQA.
  EXPECT_EQ(full.front().Sk, 512);
  EXPECT_FALSE(full.front().causal);
  EXPECT_EQ(full.back().Hkv, 1);

  const auto quick = study::attention_contention_problems(study::attention_contention_axes(true), DType::bf16);
  std::vector<std::string> shapes;
  for (const auto& p : quick) shapes.push_back(tuner::Problem(p).shape());
  const std::vector<std::string> want = {"16,32,32,1024,1024,128", "4,32,32,4096,4096,128", "1,32,32,16384,16384,128",
                                         "4,32,32,4096,4096,128,causal", "4,32,8,4096,4096,128"};
  EXPECT_EQ(shapes, want);
}

TEST(StudyPlan, AttentionVariantsByParsing) {
  const Registry reg = synth_registry();
  // Quick: the first block shape of each (engine, strategy) at its first knob;
  // the new `ordered` strategy comes in by its name; `fwd` (forward only), the
  // d64 variant and the fma engine (a tensor-core engine is there) do not.
  const std::vector<std::string> quick = {
      "attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst2_d128", "attention.bf16.wgmma.atomic.br64_bc128_st2_d128",
      "attention.bf16.wgmma.partials.br64_bc128_st2_d128_mb64", "attention.bf16.wgmma.ordered.br64_bc128_st2_d128"};
  EXPECT_EQ(study::contention_variants(attention_names_of(reg), attention_options(true)), quick);
  const std::vector<std::string> full = {
      "attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst2_d128",
      "attention.bf16.wgmma.owning.br64_bc128_st3_qbc64_qst2_d128",
      "attention.bf16.wgmma.atomic.br64_bc128_st2_d128",
      "attention.bf16.wgmma.atomic.br64_bc128_st3_d128",
      "attention.bf16.wgmma.partials.br64_bc128_st2_d128_mb256",  // every knob of the first shape
      "attention.bf16.wgmma.partials.br64_bc128_st2_d128_mb64",
      "attention.bf16.wgmma.ordered.br64_bc128_st2_d128"};
  EXPECT_EQ(study::contention_variants(attention_names_of(reg), attention_options(false)), full);
  // A strategy nobody listed is studied once registered.
  const std::vector<std::string> names = {"attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_d128",
                                          "attention.bf16.wgmma.bulk.br64_bc128_st2_d128",
                                          "attention.bf16.wgmma.bulk.br64_bc128_st2_d64", "not.a.name"};
  EXPECT_EQ(study::contention_variants(names, attention_options(true)),
            std::vector<std::string>{"attention.bf16.wgmma.bulk.br64_bc128_st2_d128"});
  // FLCE names are not attention's, nor the other way round.
  for (const auto& n : study::contention_variants(names_of(reg), attention_options(false)))
    EXPECT_EQ(n.rfind("attention.", 0), 0u) << n;
  for (const auto& n : study::contention_variants(attention_names_of(reg), {})) ADD_FAILURE() << n;
}

TEST(StudyPlan, AttentionEngineFilterFmaAndErrors) {
  const Registry reg = synth_registry();
  // --engine fma: the fma engine's every strategy.
  const std::vector<std::string> fma = {"attention.bf16.fma.owning.br64_bc64_w8_d128",
                                        "attention.bf16.fma.partials.br64_bc64_w8_d128_mb256",
                                        "attention.bf16.fma.atomic.br64_bc64_w8_d128"};
  EXPECT_EQ(study::contention_variants(attention_names_of(reg), attention_options(true, {"fma"})), fma);
  EXPECT_EQ(study::contention_variants(attention_names_of(reg), attention_options(true, {"wgmma", "fma"})).size(), 7u);
  // fma alone in the registry: planned without being named.
  std::vector<std::string> only_fma;
  for (const auto& n : attention_names_of(reg))
    if (n.find(".fma.") != std::string::npos) only_fma.push_back(n);
  EXPECT_EQ(study::contention_variants(only_fma, attention_options(true)), fma);
  // Nothing matches: a clear error naming the family.
  try {
    study::plan_contention(attention_names_of(reg), attention_options(true, {"cublaslt"}));
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no registered bf16 attention variant matches --engine"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(study::plan_contention({"attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_d128"}, attention_options(true)),
               Error);
  auto f32 = attention_options(true);
  f32.dtype = DType::f32;
  EXPECT_THROW(study::plan_contention(attention_names_of(reg), f32), Error);

  const auto q = study::plan_contention(attention_names_of(reg), attention_options(true));
  EXPECT_EQ(q.name, "contention-attention-quick");
  EXPECT_EQ(q.problems.size(), 5u);
  EXPECT_EQ(q.variants.size(), 4u);
  EXPECT_EQ(q.repeats, 3);
  for (const auto& p : q.problems) EXPECT_TRUE(p.is<AttentionProblem>());
  EXPECT_NE(q.axes_json.find("\"family\":\"attention\""), std::string::npos) << q.axes_json;
  EXPECT_NE(q.axes_json.find("\"S_sweep\":[1024,4096,16384]"), std::string::npos) << q.axes_json;
  EXPECT_NE(q.axes_json.find("\"causal_S\":[4096]"), std::string::npos) << q.axes_json;
  EXPECT_NE(q.axes_json.find("\"Hkv_sweep\":[32,8]"), std::string::npos) << q.axes_json;
  EXPECT_NE(q.axes_json.find("\"tokens\":16384"), std::string::npos) << q.axes_json;
  const auto f = study::plan_contention(attention_names_of(reg), attention_options(false));
  EXPECT_EQ(f.name, "contention-attention");
  EXPECT_EQ(f.problems.size(), 17u);
  EXPECT_EQ(f.repeats, 5);
  EXPECT_EQ(study::plan_contention(attention_names_of(reg), attention_options(false, {"wgmma"})).name,
            "contention-attention-wgmma");
  // The FLCE plan is what it was.
  const auto flce = study::plan_contention(names_of(reg), {});
  for (const auto& p : flce.problems) EXPECT_TRUE(p.is<FlceProblem>());
  EXPECT_EQ(flce.axes_json.rfind("{\"kind\":\"contention\",\"family\":\"flce\",\"quick\":false,\"dtype\":\"bf16\",\"D\":4096,"
                                 "\"V\":32768,\"N_sweep\":[512,1024,2048,4096,8192,16384,32768,65536],",
                                 0),
            0u)
      << flce.axes_json;
}

std::string slurp(const std::filesystem::path& f) {
  std::ifstream in(f);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StudyRun, TagsRunsStoresSpreadAndExportsThem) {
  TempDir tmp;
  db::Store store(tmp / "s.db");
  const Registry reg = synth_registry();
  SynthMeasurer m;
  study::ContentionOptions q;
  q.quick = true;
  study::StudyRunOptions o;
  o.plan = study::plan_contention(names_of(reg), q);
  o.command_line = "detfuse study contention --quick";
  const auto rep = study::run_contention_study(store, reg, synth_device(), m, o);
  ASSERT_FALSE(rep.already_complete);
  EXPECT_EQ(rep.tune.status, db::kRunComplete);
  EXPECT_EQ(m.measured, int(o.plan.problems.size() * o.plan.variants.size()));
  const auto studies = store.list_studies();
  ASSERT_EQ(studies.size(), 1u);
  EXPECT_EQ(studies[0].record.name, "contention-flce-quick");
  EXPECT_EQ(studies[0].record.kind, "contention");
  EXPECT_EQ(studies[0].record.axes, o.plan.axes_json);
  EXPECT_EQ(store.run(rep.tune.run_id).study, "contention-flce-quick");
  // The spread comes back as stored.
  bool saw_atomic = false;
  for (const auto& r : store.run_results(rep.tune.run_id)) {
    ASSERT_TRUE(r.record.determinism) << r.variant_name;
    const auto& sp = r.record.determinism->spread;
    ASSERT_EQ(sp.count("dW"), 1u);
    if (r.variant_name.find(".atomic.") != std::string::npos &&
        study::parse_variant_name(r.variant_name)->param("sk") != 1) {
      saw_atomic = true;
      EXPECT_GT(sp.at("dW").diff_norm, 0);
      EXPECT_EQ(r.record.determinism->level, db::kLevelNone);
    } else {  // deterministic strategies, and atomic with one adder per chunk (sk1)
      EXPECT_EQ(sp.at("dW").diff_norm, 0);
    }
  }
  EXPECT_TRUE(saw_atomic);
  // Export: the tag and the spread are in the CSV.
  store.export_csv(tmp / "csv");
  const std::string runs = slurp(tmp / "csv" / "runs.csv");
  EXPECT_NE(runs.find(",study"), std::string::npos);
  EXPECT_NE(runs.find("contention-flce-quick"), std::string::npos);
  EXPECT_NE(slurp(tmp / "csv" / "studies.csv").find("contention-flce-quick,contention"), std::string::npos);
  const std::string spread = slurp(tmp / "csv" / "determinism_spread.csv");
  EXPECT_EQ(spread.rfind("result_id,output,max_abs_diff,diff_norm,norm", 0), 0u);

  // --resume of a complete study does nothing.
  o.resume = true;
  const auto again = study::run_contention_study(store, reg, synth_device(), m, o);
  EXPECT_TRUE(again.already_complete);
  EXPECT_EQ(m.measured, int(o.plan.problems.size() * o.plan.variants.size()));
}

TEST(StudyRun, AttentionStudyTagsRunsAndStoresTheDqSpread) {
  TempDir tmp;
  db::Store store(tmp / "s.db");
  const Registry reg = synth_registry();
  SynthAttentionMeasurer m;
  study::StudyRunOptions o;
  o.plan = study::plan_contention(attention_names_of(reg), attention_options(true));
  o.command_line = "detfuse study contention --kernel attention --quick";
  const auto rep = study::run_contention_study(store, reg, synth_device(), m, o);
  ASSERT_FALSE(rep.already_complete);
  EXPECT_EQ(rep.tune.status, db::kRunComplete);
  EXPECT_EQ(m.measured, 5 * 4);
  EXPECT_EQ(rep.tune.cannot_run, 0);
  const auto studies = store.list_studies();
  ASSERT_EQ(studies.size(), 1u);
  EXPECT_EQ(studies[0].record.name, "contention-attention-quick");
  EXPECT_EQ(studies[0].record.axes, o.plan.axes_json);
  EXPECT_EQ(store.run(rep.tune.run_id).study, "contention-attention-quick");
  int atomic = 0;
  for (const auto& r : store.run_results(rep.tune.run_id)) {
    ASSERT_TRUE(r.record.determinism) << r.variant_name;
    const auto& sp = r.record.determinism->spread;
    ASSERT_EQ(sp.count("dQ"), 1u) << r.variant_name;
    if (r.variant_name.find(".atomic.") != std::string::npos) {
      ++atomic;
      EXPECT_GT(sp.at("dQ").diff_norm, 0);
      EXPECT_EQ(r.record.determinism->level, db::kLevelNone);
    } else {
      EXPECT_EQ(sp.at("dQ").diff_norm, 0);
      EXPECT_EQ(r.record.determinism->checks.run_to_run, db::kCheckShown);  // v6: config may be shown too
    }
  }
  EXPECT_EQ(atomic, 5);
  o.resume = true;
  EXPECT_TRUE(study::run_contention_study(store, reg, synth_device(), m, o).already_complete);
  EXPECT_EQ(m.measured, 5 * 4);
}

TEST(StudyRun, InterruptedStudyResumesWhereItStopped) {
  TempDir tmp;
  db::Store store(tmp / "s.db");
  const Registry reg = synth_registry();
  SynthMeasurer m;
  study::ContentionOptions q;
  q.quick = true;
  study::StudyRunOptions o;
  o.plan = study::plan_contention(names_of(reg), q);
  const int total = int(o.plan.problems.size() * o.plan.variants.size());
  o.stop = [&] { return m.measured >= 4; };  // Ctrl-C after four variants
  const auto first = study::run_contention_study(store, reg, synth_device(), m, o);
  EXPECT_EQ(first.tune.status, db::kRunInterrupted);
  ASSERT_LT(m.measured, total);
  const int done = m.measured;
  o.stop = [] { return false; };
  o.resume = true;
  const auto second = study::run_contention_study(store, reg, synth_device(), m, o);
  EXPECT_FALSE(second.already_complete);
  EXPECT_TRUE(second.tune.resumed);
  EXPECT_EQ(second.tune.status, db::kRunComplete);
  EXPECT_EQ(m.measured, total);  // nothing measured twice
  EXPECT_EQ(second.tune.skipped, done);
  EXPECT_EQ(store.run(first.tune.run_id).study, o.plan.name);
  EXPECT_EQ(store.run(second.tune.run_id).study, o.plan.name);
  EXPECT_EQ(store.list_studies().size(), 1u);
  // Complete now: a third --resume does nothing.
  EXPECT_TRUE(study::run_contention_study(store, reg, synth_device(), m, o).already_complete);
}

TEST(StudyStore, OldStoresOpenAndSpreadIsOptional) {
  TempDir tmp;
  db::Store store(tmp / "s.db");
  EXPECT_EQ(store.schema_version(), db::kSchemaVersion);
  db::RunRecord r;
  r.command_line = "x";
  r.repeats = 2;
  const db::Id run = store.begin_run(r);
  EXPECT_EQ(store.run(run).study, "");
  EXPECT_THROW(store.find_or_create_study(db::StudyRecord{"", "contention", "", ""}), db::Error);
  const db::Id s1 = store.find_or_create_study(db::StudyRecord{"a", "contention", "{}", ""});
  EXPECT_EQ(store.find_or_create_study(db::StudyRecord{"a", "contention", "{\"other\":1}", ""}), s1);
  EXPECT_THROW(store.find_or_create_study(db::StudyRecord{"a", "other-kind", "", ""}), db::Error);
}

void raw(const std::filesystem::path& f, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(f.string().c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  const std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(h);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

TEST(StudyStore, AVersion4StoreMigratesToRunsWithoutSmCount) {
  TempDir tmp;
  const auto file = tmp / "v4.db";
  db::Id run_id = 0;
  {
    db::Store store(file);
    db::RunRecord r;
    r.command_line = "x";
    r.repeats = 2;
    r.sms = 132;
    run_id = store.begin_run(r);
    EXPECT_EQ(store.run(run_id).sms, std::optional<int64_t>(132));
  }
  // The v4 layout (the committed study store's): no runs.sms.
  raw(file, "ALTER TABLE runs DROP COLUMN sms; ALTER TABLE timing DROP COLUMN clock_events; PRAGMA user_version=4;");
  {
    db::Store ro = db::Store::open_read_only(file);
    EXPECT_EQ(ro.file_schema_version(), 4);
    EXPECT_EQ(ro.run(run_id).sms, std::nullopt);
  }
  db::Store s(file);
  EXPECT_EQ(s.file_schema_version(), 4);
  EXPECT_EQ(s.schema_version(), db::kSchemaVersion);
  EXPECT_EQ(s.run(run_id).sms, std::nullopt);  // NULL: the whole device, count not recorded
  db::RunRecord r;
  r.sms = 16;
  EXPECT_EQ(s.run(s.begin_run(r)).sms, std::optional<int64_t>(16));
}

TEST(StudyStore, AVersion3StoreMigratesAndKeepsItsResults) {
  TempDir tmp;
  const auto file = tmp / "v3.db";
  db::Id run_id = 0;
  {
    db::Store store(file);
    const Registry reg = synth_registry();
    SynthMeasurer m;
    study::ContentionOptions q;
    q.quick = true;
    study::StudyRunOptions o;
    o.plan = study::plan_contention(names_of(reg), q);
    o.plan.problems.resize(1);
    run_id = study::run_contention_study(store, reg, synth_device(), m, o).tune.run_id;
  }
  // Back to the v3 layout: what a store written before this change holds.
  raw(file,
      "DROP TABLE studies; DROP TABLE determinism_spread; DROP INDEX runs_study; "
      "ALTER TABLE runs DROP COLUMN study; ALTER TABLE runs DROP COLUMN sms; ALTER TABLE timing DROP COLUMN clock_events; "
      "PRAGMA user_version=3;");
  {
    db::Store ro = db::Store::open_read_only(file);  // migrated in memory, the file untouched
    EXPECT_EQ(ro.file_schema_version(), 3);
    EXPECT_EQ(ro.run(run_id).study, "");
    EXPECT_TRUE(ro.list_studies().empty());
  }
  db::Store s(file);
  EXPECT_EQ(s.file_schema_version(), 3);
  EXPECT_EQ(s.schema_version(), db::kSchemaVersion);
  EXPECT_EQ(s.run(run_id).sms, std::nullopt);  // v5: older runs have no SM count (the whole device)
  EXPECT_EQ(s.run(run_id).study, "");
  for (const auto& r : s.run_results(run_id)) {
    ASSERT_TRUE(r.record.determinism);
    EXPECT_TRUE(r.record.determinism->spread.empty());  // not measured before v4
    EXPECT_FALSE(r.record.determinism->digests.empty());
  }
}

}  // namespace
}  // namespace detfuse

namespace detfuse {
namespace {

using namespace detfuse::testing;

TEST(StudyRun, SmCountLevelsAreRunsOfTheirOwnAndResumeByLevel) {
  TempDir tmp;
  db::Store store(tmp / "s.db");
  const Registry reg = synth_registry();
  SynthMeasurer m;
  study::ContentionOptions q;
  q.quick = true;
  study::StudyRunOptions o;
  o.plan = study::plan_contention(names_of(reg), q);
  // The 16-SM level: the fixed point only, recorded with its SM count.
  o.sms = 16;
  o.run_sms = 16;
  m.sms = 16;
  const auto sliced = study::run_contention_study(store, reg, synth_device(), m, o);
  ASSERT_EQ(sliced.tune.status, db::kRunComplete);
  EXPECT_EQ(m.measured, int(o.plan.sm_problems.size() * o.plan.variants.size()));
  EXPECT_EQ(store.run(sliced.tune.run_id).sms, std::optional<int64_t>(16));
  // The whole device: every problem, a run of its own.
  o.sms = 0;
  o.run_sms = 132;
  m.sms = 132;
  const auto whole = study::run_contention_study(store, reg, synth_device(), m, o);
  ASSERT_EQ(whole.tune.status, db::kRunComplete);
  EXPECT_NE(whole.tune.run_id, sliced.tune.run_id);
  EXPECT_EQ(store.run(whole.tune.run_id).sms, std::optional<int64_t>(132));
  EXPECT_EQ(store.run(whole.tune.run_id).study, o.plan.name);
  // --resume finds each level complete by its SM count, and a level never run
  // (8 SMs) is not taken for complete.
  const auto dev_id = *store.find_device(tuner::device_record(synth_device()));
  const auto build_id = *store.find_build(tuner::this_build());
  EXPECT_EQ(study::complete_study_run(store, o.plan.name, dev_id, build_id, 16), sliced.tune.run_id);
  EXPECT_EQ(study::complete_study_run(store, o.plan.name, dev_id, build_id, 132), whole.tune.run_id);
  EXPECT_FALSE(study::complete_study_run(store, o.plan.name, dev_id, build_id, 8));
  o.resume = true;
  o.sms = 16;
  o.run_sms = 16;
  const int before = m.measured;
  EXPECT_TRUE(study::run_contention_study(store, reg, synth_device(), m, o).already_complete);
  EXPECT_EQ(m.measured, before);
}

TEST(StudyPlan, TuneSkipsStudyVariantsUnlessNamed) {
  const Registry reg = synth_registry();
  const tuner::Problem p(problem(8192, 4096, 32768));
  const auto all = tuner::plan_variants(reg, p, {});
  ASSERT_FALSE(all.empty());
  for (const auto& v : all) EXPECT_FALSE(v.desc().study_only) << v.name();
  EXPECT_EQ(all.size(), reg.flce().size() - 1 /* f32 */ - 6 /* study */);
  const auto named = tuner::plan_variants(reg, p, {"flce.bf16.mma.atomic.bm128_bn128_mb1024_sk0"});
  ASSERT_EQ(named.size(), 1u);
  EXPECT_TRUE(named[0].desc().study_only);
}

TEST(SmSlice, PlanChecksAndRoundsToTheGranularity) {
  // Hopper: partitions of at least 8 SMs in multiples of 8, 132 SMs.
  auto p = tuner::plan_sm_slice(16, 132, 8, 8);
  EXPECT_EQ(p.granted, 16);
  EXPECT_FALSE(p.whole_device);
  EXPECT_TRUE(p.note.empty());
  p = tuner::plan_sm_slice(33, 132, 8, 8);
  EXPECT_EQ(p.granted, 40);
  EXPECT_NE(p.note.find("40"), std::string::npos) << p.note;
  p = tuner::plan_sm_slice(1, 132, 8, 8);
  EXPECT_EQ(p.granted, 8);
  p = tuner::plan_sm_slice(130, 132, 8, 8);  // 136 > 132: the whole device, said so
  EXPECT_EQ(p.granted, 132);
  EXPECT_TRUE(p.whole_device);
  EXPECT_NE(p.note.find("whole device"), std::string::npos) << p.note;
  p = tuner::plan_sm_slice(132, 132, 8, 8);
  EXPECT_TRUE(p.whole_device);
  EXPECT_TRUE(p.note.empty());
  // Ampere: at least 4, multiples of 2.
  EXPECT_EQ(tuner::plan_sm_slice(5, 108, 4, 2).granted, 6);
  // Out of range: invalid_argument (exit 2), naming --sms and the count.
  for (int bad : {0, -3, 133}) {
    try {
      tuner::plan_sm_slice(bad, 132, 8, 8);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << bad;
      EXPECT_NE(std::string(e.what()).find("--sms " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tuner::check_sms_argument(0), Error);
  EXPECT_NO_THROW(tuner::check_sms_argument(1));
}

}  // namespace
}  // namespace detfuse
