// CPU tests of the contention study: the sweep planning (pure functions), the
// runner over the tuner with a synthetic measurer (tagging, resume, budget),
// the schema v4 records (study, spread) and their CSV export.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <fstream>
#include <sstream>

#include "experiments/study/contention_plan.h"
#include "experiments/study/contention_study.h"
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
  EXPECT_EQ(quick.back().N, 65536);
}

TEST(StudyPlan, QuickTakesOneOrTwoVariantsPerEngineAndStrategy) {
  const Registry reg = synth_registry();
  study::ContentionOptions o;
  o.quick = true;
  const auto v = study::contention_variants(names_of(reg), o);
  const std::vector<std::string> want = {
      "flce.bf16.mma.owning.bm128_bn128_mb512",     "flce.bf16.mma.owning.bm128_bn128_mb1920",
      "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk4", "flce.bf16.mma.partials.bm128_bn128_mb1024_sk4_vs256",
      "flce.bf16.cublaslt.owning.mb512",             "flce.bf16.cublaslt.owning.mb2000",
      "flce.bf16.cublaslt.partials.mb1024_sk2_vs0"};
  EXPECT_EQ(v, want);
}

TEST(StudyPlan, FullTakesEveryShapeAndTheFirstShapesKnobs) {
  const Registry reg = synth_registry();
  const auto v = study::contention_variants(names_of(reg), {});
  const std::vector<std::string> want = {
      "flce.bf16.mma.owning.bm128_bn128_mb512",      "flce.bf16.mma.owning.bm128_bn128_mb1024",
      "flce.bf16.mma.owning.bm128_bn128_mb1920",     "flce.bf16.mma.atomic.bm128_bn128_mb1024_sk4",
      "flce.bf16.mma.partials.bm128_bn128_mb1024_sk4_vs256",
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
  EXPECT_NE(plan.axes_json.find("\"N_sweep\":[512,4096,65536]"), std::string::npos);
  EXPECT_EQ(study::plan_contention(names_of(reg), {}).name, "contention-flce");
  study::ContentionOptions e;
  e.engines = {"cublaslt"};
  EXPECT_EQ(study::plan_contention(names_of(reg), e).name, "contention-flce-cublaslt");
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
    if (r.variant_name.find(".atomic.") != std::string::npos) {
      saw_atomic = true;
      EXPECT_GT(sp.at("dW").diff_norm, 0);
      EXPECT_EQ(r.record.determinism->level, db::kLevelNone);
    } else {
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
  EXPECT_EQ(store.schema_version(), 4);
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
      "ALTER TABLE runs DROP COLUMN study; PRAGMA user_version=3;");
  {
    db::Store ro = db::Store::open_read_only(file);  // migrated in memory, the file untouched
    EXPECT_EQ(ro.file_schema_version(), 3);
    EXPECT_EQ(ro.run(run_id).study, "");
    EXPECT_TRUE(ro.list_studies().empty());
  }
  db::Store s(file);
  EXPECT_EQ(s.file_schema_version(), 3);
  EXPECT_EQ(s.schema_version(), 4);
  EXPECT_EQ(s.run(run_id).study, "");
  for (const auto& r : s.run_results(run_id)) {
    ASSERT_TRUE(r.record.determinism);
    EXPECT_TRUE(r.record.determinism->spread.empty());  // not measured before v4
    EXPECT_FALSE(r.record.determinism->digests.empty());
  }
}

}  // namespace
}  // namespace detfuse
