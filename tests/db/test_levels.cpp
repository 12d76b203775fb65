// Schema v6: determinism levels. Each check's outcome stored per result, the
// level derived from them, set_level_checks, best(level), and the v5 -> v6
// migration (older results keep their level, the new checks not_checked).
#include <gtest/gtest.h>

#include "db/store.h"
#include "tests/db/db_test_util.h"

namespace detfuse::db::test {
namespace {

LevelChecks checks(const char* r2r, const char* sm, const char* cfg, const char* port) {
  LevelChecks c;
  c.run_to_run = r2r;
  c.sm_count = sm;
  c.config = cfg;
  c.portable = port;
  return c;
}

constexpr const char* S = kCheckShown;
constexpr const char* F = kCheckFailed;
constexpr const char* N = kCheckNotChecked;

TEST(DbLevels, NamesAndOrder) {
  EXPECT_EQ(level_names(), (std::vector<std::string>{"none", "run_to_run", "sm_count", "config", "portable"}));
  EXPECT_EQ(level_rank("none"), 0);
  EXPECT_EQ(level_rank("portable"), 4);
  EXPECT_EQ(level_rank("gpu_to_gpu"), -1);
  const std::string m = error_of([] { check_level_name("gpu_to_gpu", "--level"); });
  EXPECT_TRUE(contains(m, "--level: unknown determinism level 'gpu_to_gpu'")) << m;
  EXPECT_TRUE(contains(m, "run_to_run, sm_count, config, portable")) << m;
  EXPECT_NO_THROW(check_level_name("config", "--level"));
}

TEST(DbLevels, TheLevelIsTheStrongestCheckShownWithRunToRun) {
  EXPECT_EQ(derive_level(LevelChecks{}), kLevelNone);
  EXPECT_EQ(derive_level(checks(S, N, N, N)), kLevelRunToRun);
  EXPECT_EQ(derive_level(checks(S, S, N, N)), kLevelSmCount);
  EXPECT_EQ(derive_level(checks(S, F, S, N)), kLevelConfig);    // independent: config without sm_count
  EXPECT_EQ(derive_level(checks(S, F, F, S)), kLevelPortable);  // the strongest it has
  EXPECT_EQ(derive_level(checks(S, S, F, N)), kLevelSmCount);
  // Every level implies run-to-run determinism.
  EXPECT_EQ(derive_level(checks(F, S, S, S)), kLevelNone);
  EXPECT_EQ(derive_level(checks(N, S, S, S)), kLevelNone);
  const LevelChecks c = checks(S, F, S, N);
  EXPECT_TRUE(c.has("none"));
  EXPECT_TRUE(c.has("run_to_run"));
  EXPECT_FALSE(c.has("sm_count"));
  EXPECT_TRUE(c.has("config"));
  EXPECT_FALSE(c.has("portable"));
  EXPECT_THROW(c.has("fast"), Error);
  EXPECT_THROW((void)c.at("none"), Error);
  LevelChecks n;
  n.note("sm_count", "16 SMs: dW differs");
  n.note("config", "alone in its group");
  EXPECT_EQ(n.notes, "sm_count: 16 SMs: dW differs; config: alone in its group");
}

struct Fixture {
  TempDir dir;
  fs::path file = dir / "detfuse.db";
  Store store{file};
  Id dev = store.find_or_create_device(h200());
  Id build = store.find_or_create_build(build_a());
  Id prob = store.find_or_create_problem(flce_problem(4096, 4096, 128256));
  Id run = store.begin_run(RunRecord{});
};

TEST(DbLevels, ChecksAreStoredAndTheLevelDerivedByTheStore) {
  Fixture f;
  auto& s = f.store;
  const Id v = s.find_or_create_variant(variant("owning"));
  ResultRecord r = full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0);
  r.determinism->checks = checks(S, S, F, N);
  r.determinism->checks.notes = "config: dW differs from flce.bf16.mma.owning.x";
  r.determinism->level = kLevelRunToRun;  // the writer's level is not what is stored: the checks are
  const Id id = s.record_result(r);
  const auto back = s.result(id).record.determinism;
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->level, kLevelSmCount);
  EXPECT_EQ(back->checks, r.determinism->checks);
  // The stored digests carry them too (verify reads these).
  auto sd = s.stored_digests(f.dev, f.build, v, f.prob, 1);
  ASSERT_TRUE(sd.has_value());
  EXPECT_EQ(sd->level, kLevelSmCount);
  EXPECT_EQ(sd->checks.sm_count, kCheckShown);
}

TEST(DbLevels, RecordResultRefusesLevelsTheChecksDoNotShow) {
  Fixture f;
  auto& s = f.store;
  const Id v = s.find_or_create_variant(variant("owning"));
  ResultRecord r = full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0);
  r.determinism->level = kLevelConfig;  // claimed, not shown
  EXPECT_TRUE(contains(error_of([&] { s.record_result(r); }, Error::Kind::runtime), "the checks show 'run_to_run'"));
  r.determinism->level = "gpu_to_gpu";
  EXPECT_THROW(s.record_result(r), Error);
  r.determinism->level = kLevelRunToRun;
  r.determinism->checks.config = "maybe";
  EXPECT_TRUE(contains(error_of([&] { s.record_result(r); }), "'maybe' is not shown, failed or not_checked"));
  // run_to_run shown with differing digests is refused.
  ResultRecord nd = full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0, true, /*deterministic=*/false);
  nd.determinism->checks.run_to_run = kCheckShown;
  EXPECT_THROW(s.record_result(nd), Error);
  // Left not_checked, it is derived from the digests: failed.
  nd.determinism->checks.run_to_run = kCheckNotChecked;
  const Id id = s.record_result(nd);
  EXPECT_EQ(s.result(id).record.determinism->checks.run_to_run, kCheckFailed);
  EXPECT_EQ(s.result(id).record.determinism->level, kLevelNone);
}

TEST(DbLevels, SetLevelChecksUpdatesTheLevelButNotRunToRun) {
  Fixture f;
  auto& s = f.store;
  const Id v = s.find_or_create_variant(variant("owning"));
  const Id id = s.record_result(full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0));
  EXPECT_EQ(s.result(id).record.determinism->level, kLevelRunToRun);
  LevelChecks c = s.result(id).record.determinism->checks;
  c.config = kCheckShown;
  c.note("config", "same bits as 2 other variants");
  s.set_level_checks(id, c);
  EXPECT_EQ(s.result(id).record.determinism->level, kLevelConfig);
  EXPECT_EQ(s.result(id).record.determinism->checks, c);
  c.portable = kCheckShown;
  s.set_level_checks(id, c);
  EXPECT_EQ(s.result(id).record.determinism->level, kLevelPortable);
  c.config = kCheckFailed;
  s.set_level_checks(id, c);
  EXPECT_EQ(s.result(id).record.determinism->level, kLevelPortable);  // independent checks
  c.portable = kCheckFailed;
  s.set_level_checks(id, c);
  EXPECT_EQ(s.result(id).record.determinism->level, kLevelRunToRun);

  LevelChecks bad = c;
  bad.run_to_run = kCheckFailed;
  EXPECT_TRUE(contains(error_of([&] { s.set_level_checks(id, bad); }), "has run_to_run shown"));
  bad = c;
  bad.sm_count = "yes";
  EXPECT_THROW(s.set_level_checks(id, bad), Error);
  ResultRecord cannot;
  cannot.run_id = f.run;
  cannot.device_id = f.dev;
  cannot.build_id = f.build;
  cannot.problem_id = f.prob;
  cannot.variant_id = s.find_or_create_variant(variant("partials"));
  cannot.seed = 1;
  cannot.status = kResultCannotRun;
  cannot.reason = "too big";
  const Id cid = s.record_result(cannot);
  EXPECT_TRUE(contains(error_of([&] { s.set_level_checks(cid, c); }), "has no determinism check"));
  EXPECT_EQ(s.result(id).record.determinism->level, kLevelRunToRun);  // unchanged by the refused calls
}

// A hand-built store: the fastest variant at each level.
TEST(DbLevels, BestAtALevelPicksTheFastestThatHasIt) {
  Fixture f;
  auto& s = f.store;
  struct Row {
    const char* tile;
    double ms;
    bool det;
    LevelChecks c;
  };
  const std::vector<Row> rows = {
      {"t_nd", 0.5, false, {}},                    // nondeterministic (atomic-like digests), fastest
      {"t_r2r", 0.8, true, checks(S, F, F, N)},    // run_to_run only
      {"t_sm", 0.9, true, checks(S, S, N, N)},     // sm_count
      {"t_cfg", 1.1, true, checks(S, F, S, N)},    // config without sm_count
      {"t_all", 1.5, true, checks(S, S, S, S)},    // everything
      {"t_cfg2", 1.0, true, checks(S, S, S, N)},   // config and sm_count, faster than t_all
  };
  std::map<std::string, Id> ids;
  for (const auto& r : rows) {
    const Id v = s.find_or_create_variant(variant("owning", r.tile));
    ids[r.tile] = v;
    ResultRecord rr = full_result(f.run, f.dev, f.build, f.prob, v, 1, r.ms, true, r.det);
    if (r.det) rr.determinism->checks = r.c;
    s.record_result(rr);
  }
  auto pick = [&](const std::string& level) -> std::string {
    auto b = s.best(f.dev, f.prob, false, std::nullopt, level);
    if (!b) return "-";
    for (const auto& [tile, id] : ids)
      if (id == b->variant_id) return tile;
    return "?";
  };
  EXPECT_EQ(pick(""), "t_r2r");
  EXPECT_EQ(pick("none"), "t_nd");
  EXPECT_EQ(pick("run_to_run"), "t_r2r");
  EXPECT_EQ(pick("sm_count"), "t_sm");
  EXPECT_EQ(pick("config"), "t_cfg2");
  EXPECT_EQ(pick("portable"), "t_all");
  auto b = s.best(f.dev, f.prob, false, std::nullopt, "config");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->level, kLevelConfig);
  EXPECT_EQ(b->checks.sm_count, kCheckShown);
  // allow_nondeterministic does not weaken an explicit level.
  EXPECT_EQ(s.best(f.dev, f.prob, true, std::nullopt, "sm_count")->variant_id, ids["t_sm"]);
  EXPECT_TRUE(contains(error_of([&] { s.best(f.dev, f.prob, false, std::nullopt, "fast"); }),
                       "unknown determinism level 'fast'"));
  // nearest_tuned passes the level on.
  auto near = s.nearest_tuned(f.dev, flce_problem(2048, 4096, 128256), false, std::nullopt, "portable");
  ASSERT_TRUE(near.has_value());
  EXPECT_EQ(near->best.variant_id, ids["t_all"]);
  EXPECT_THROW(s.nearest_tuned(f.dev, flce_problem(2048, 4096, 128256), false, std::nullopt, "x"), Error);
}

// A v5 file (results written before the levels): made by writing results with
// this build, then giving determinism its v5 form back.
void downgrade_to_v5(const fs::path& file) {
  raw_exec(file,
           "CREATE TABLE d5 (result_id INTEGER PRIMARY KEY REFERENCES results (id) ON DELETE CASCADE, "
           "repeats INTEGER NOT NULL, level TEXT NOT NULL CHECK (level IN ('none', 'run_to_run')));"
           "INSERT INTO d5 SELECT result_id, repeats, level FROM determinism;"
           "DROP TABLE determinism; ALTER TABLE d5 RENAME TO determinism;"
           "ALTER TABLE timing DROP COLUMN clock_events; PRAGMA user_version=5;");  // (v7's column)
}

TEST(DbMigration, Version5ResultsKeepTheirLevelAndTheNewChecksAreNotChecked) {
  TempDir dir;
  const fs::path file = dir / "v5.db";
  Id det = 0, nondet = 0, single = 0;
  {
    Store s(file);
    const Id dev = s.find_or_create_device(h200());
    const Id build = s.find_or_create_build(build_a());
    const Id prob = s.find_or_create_problem(flce_problem(4096, 4096, 128256));
    const Id run = s.begin_run(RunRecord{});
    det = s.record_result(full_result(run, dev, build, prob, s.find_or_create_variant(variant("owning")), 1, 1.0));
    nondet = s.record_result(
        full_result(run, dev, build, prob, s.find_or_create_variant(variant("atomic")), 1, 0.5, true, false));
    ResultRecord one = full_result(run, dev, build, prob, s.find_or_create_variant(variant("partials")), 1, 0.7,
                                   true, true, /*K=*/1);
    one.determinism->level = kLevelNone;  // one repeat: nothing shown
    single = s.record_result(one);
  }
  downgrade_to_v5(file);
  ASSERT_EQ(raw_count(file, "PRAGMA user_version"), 5);
  // A v5 file cannot hold a v6 level.
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM pragma_table_info('determinism') WHERE name='sm_count'"), 0);
  const std::string v5_bytes = read_bytes(file);
  {
    Store ro = Store::open_read_only(file);  // migrated in memory only
    EXPECT_EQ(ro.file_schema_version(), 5);
    EXPECT_EQ(ro.result(det).record.determinism->level, kLevelRunToRun);
  }
  EXPECT_EQ(read_bytes(file), v5_bytes);

  Store s(file);
  EXPECT_EQ(s.schema_version(), kSchemaVersion);
  EXPECT_EQ(raw_count(file, "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw_count(file, "PRAGMA foreign_key_check"), -1);
  const auto d = s.result(det).record.determinism;
  EXPECT_EQ(d->level, kLevelRunToRun);
  EXPECT_EQ(d->checks, checks(S, N, N, N));
  EXPECT_EQ(d->digests.size(), 12u);  // the children survived the rebuild
  EXPECT_EQ(s.result(nondet).record.determinism->level, kLevelNone);
  EXPECT_EQ(s.result(nondet).record.determinism->checks, checks(F, N, N, N));
  EXPECT_EQ(s.result(single).record.determinism->checks, checks(N, N, N, N));
  // best() still picks the old run_to_run result, and no stronger level.
  const Id dev = s.list_devices().at(0).id;
  const Id prob = s.list_problems().at(0).id;
  EXPECT_EQ(s.best(dev, prob, false)->result_id, det);
  EXPECT_EQ(s.best(dev, prob, false, std::nullopt, "run_to_run")->result_id, det);
  EXPECT_FALSE(s.best(dev, prob, false, std::nullopt, "sm_count").has_value());
  // A deleted result takes its determinism row with it (the cascade survived).
  raw_exec(file, "PRAGMA foreign_keys=ON; DELETE FROM results WHERE id=" + std::to_string(nondet));
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM determinism WHERE result_id=" + std::to_string(nondet)), 0);
}

}  // namespace
}  // namespace detfuse::db::test
