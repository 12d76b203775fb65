// Schema v3: runs that know their owner and heartbeat, crashed/abandoned runs,
// presumed crashes that the owner's measurement replaces, --retry-crashed, and
// the v2 -> v3 migration that gives old variant names their engine token.
#include <gtest/gtest.h>

#include <thread>

#include "db/schema.h"
#include "db/store.h"
#include "tests/db/db_test_util.h"

namespace detfuse::db::test {
namespace {

struct Fixture {
  TempDir dir;
  fs::path file = dir / "detfuse.db";
  Store store{file};
  Id dev = store.find_or_create_device(h200());
  Id build = store.find_or_create_build(build_a());
  Id prob = store.find_or_create_problem(flce_problem(4096, 4096, 128256));
};

RunRecord owned_by(const std::string& host, int64_t pid, int64_t start) {
  RunRecord r;
  r.command_line = "detfuse tune";
  r.owner = {host, pid, start};
  return r;
}

void tick() { std::this_thread::sleep_for(std::chrono::milliseconds(3)); }  // now_utc() has ms resolution

TEST(DbRuns, OwnerAndHeartbeatAreStoredAndListed) {
  Fixture f;
  auto& s = f.store;
  const Id run = s.begin_run(owned_by("node-7", 4242, 987654321));
  RunRecord r = s.run(run);
  EXPECT_EQ(r.owner, (RunOwner{"node-7", 4242, 987654321}));
  EXPECT_EQ(r.heartbeat_at, r.started_at);
  tick();
  EXPECT_EQ(s.heartbeat(run), kRunRunning);
  const std::string hb = s.run(run).heartbeat_at;
  EXPECT_GT(hb, r.started_at);
  auto un = s.unfinished_runs();
  ASSERT_EQ(un.size(), 1u);
  EXPECT_EQ(un[0].id, run);
  EXPECT_EQ(un[0].record.owner.pid, 4242);
  EXPECT_EQ(un[0].record.heartbeat_at, hb);
  EXPECT_GE(un[0].heartbeat_age_s, 0.0);
  EXPECT_LT(un[0].heartbeat_age_s, 60.0);
  s.finish_run(run, kRunBudget, "budget 10m reached");
  EXPECT_TRUE(s.unfinished_runs().empty());
  EXPECT_EQ(s.run(run).end_reason, "budget 10m reached");
  EXPECT_THROW(s.heartbeat(12345), Error);
  EXPECT_THROW(s.finish_run(run, kRunCrashed), Error);  // not a status the owner writes
}

TEST(DbRuns, MarkRunCrashedOrAbandonedIsCompareAndSetOnTheHeartbeat) {
  Fixture f;
  auto& s = f.store;
  const Id run = s.begin_run(owned_by("h", 1, 1));
  const std::string seen = s.run(run).heartbeat_at;
  tick();
  s.heartbeat(run);  // the owner is alive after all
  EXPECT_FALSE(s.mark_run_crashed(run, "pid 1 is gone", seen));
  EXPECT_EQ(s.run(run).status, kRunRunning);
  const std::string now_seen = s.run(run).heartbeat_at;
  EXPECT_TRUE(s.mark_run_crashed(run, "pid 1 is gone", now_seen));
  RunRecord r = s.run(run);
  EXPECT_EQ(r.status, kRunCrashed);
  EXPECT_EQ(r.end_reason, "pid 1 is gone");
  EXPECT_FALSE(r.finished_at.empty());
  EXPECT_FALSE(s.mark_run_crashed(run, "again"));  // only a running run
  // The owner's heartbeat reports what happened; its finish_run wins.
  EXPECT_EQ(s.heartbeat(run), kRunCrashed);
  s.finish_run(run, kRunComplete);
  EXPECT_EQ(s.run(run).status, kRunComplete);
  EXPECT_FALSE(s.mark_run_abandoned(run, "complete runs stay complete"));
  // Abandoned: from an unfinished status, with a reason.
  const Id r2 = s.begin_run(RunRecord{});
  s.finish_run(r2, kRunInterrupted);
  EXPECT_THROW(s.mark_run_abandoned(r2, ""), Error);
  EXPECT_THROW(s.mark_run_abandoned(999, "x"), Error);
  EXPECT_TRUE(s.mark_run_abandoned(r2, "superseded by a fresh tune"));
  EXPECT_EQ(s.run(r2).status, kRunAbandoned);
  EXPECT_FALSE(s.mark_run_abandoned(r2, "twice"));
}

// The failure this guards against: a second `tune --resume` marked the first's in-flight
// variant crashed; the first then died in record_result and lost its
// measurement. Now the mark is a presumed crash, replaced by the owner's
// result, and a mark based on a stale heartbeat does not happen at all.
TEST(DbRuns, OwnersMeasurementReplacesAPresumedCrash) {
  Fixture f;
  Store& first = f.store;
  Store second(f.file);  // the other process's connection
  const Id v = first.find_or_create_variant(variant("owning"));
  const Id w = first.find_or_create_variant(variant("partials"));
  const Id run = first.begin_run(owned_by("h", 100, 5));
  first.mark_running(run, f.dev, f.build, f.prob, v, 1);

  // The second process looks, then the owner heartbeats, then the second
  // marks with the heartbeat it saw: refused.
  auto seen = second.running_variants(f.dev, f.build, f.prob, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].owner.pid, 100);
  EXPECT_EQ(seen[0].run_status, kRunRunning);
  tick();
  first.heartbeat(run);
  EXPECT_FALSE(second.mark_crashed(seen[0].result_id, "owner gone?", seen[0].heartbeat_at));
  EXPECT_EQ(first.result(seen[0].result_id).record.status, kResultRunning);

  // A mark without the guard (the second decided wrongly): presumed crash.
  EXPECT_TRUE(second.mark_crashed(seen[0].result_id, "owner gone?"));
  auto crashed = first.crashed_variants(f.dev, f.build, f.prob, 1);
  ASSERT_EQ(crashed.size(), 1u);
  EXPECT_TRUE(crashed[0].crash_presumed);
  // The owner finishes its measurement: it is kept, not thrown away.
  const Id rid = first.record_result(full_result(run, f.dev, f.build, f.prob, v, 1, 1.5));
  EXPECT_EQ(first.result(rid).record.status, kResultOk);
  EXPECT_EQ(raw_count(f.file, "SELECT count(*) FROM results WHERE variant_id=" + std::to_string(v)), 1);
  EXPECT_TRUE(first.crashed_variants(f.dev, f.build, f.prob, 1).empty());

  // A crash the owner records itself stays final, as before.
  ResultRecord own = full_result(run, f.dev, f.build, f.prob, w, 1, 1.0);
  own.status = kResultCrashed;
  own.reason = "crashed: cudaErrorIllegalAddress";
  own.correctness.reset();
  own.determinism.reset();
  own.timing.reset();
  first.record_result(own);
  EXPECT_THROW(first.record_result(full_result(run, f.dev, f.build, f.prob, w, 1, 1.0)), Error);
  EXPECT_THROW(first.mark_running(run, f.dev, f.build, f.prob, w, 1), Error);
  auto st = first.crashed_variants(f.dev, f.build, f.prob, 1);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_FALSE(st[0].crash_presumed);
}

TEST(DbRuns, RetryCrashedMeasuresAgainInALaterRunKeepingHistory) {
  Fixture f;
  auto& s = f.store;
  const Id a = s.find_or_create_variant(variant("atomic"));
  const Id o = s.find_or_create_variant(variant("owning"));
  const Id run1 = s.begin_run(owned_by("h", 1, 1));
  s.record_result(full_result(run1, f.dev, f.build, f.prob, a, 1, 1.0, true, false));
  const Id marker = s.mark_running(run1, f.dev, f.build, f.prob, o, 1);
  ASSERT_TRUE(s.mark_run_crashed(run1, "pid 1 is gone"));
  ASSERT_TRUE(s.mark_crashed(marker, "the process ended while this variant ran"));
  const int64_t results_before = raw_count(f.file, "SELECT count(*) FROM results");

  auto crashed = s.crashed_variants(f.dev, f.build, f.prob, 1);
  ASSERT_EQ(crashed.size(), 1u);
  EXPECT_EQ(crashed[0].variant_id, o);
  EXPECT_EQ(crashed[0].run_status, kRunCrashed);

  const Id run2 = s.begin_run(owned_by("h", 2, 2));
  s.mark_running(run2, f.dev, f.build, f.prob, o, 1);
  s.record_result(full_result(run2, f.dev, f.build, f.prob, o, 1, 0.8));
  EXPECT_TRUE(s.crashed_variants(f.dev, f.build, f.prob, 1).empty());
  auto states = s.variant_states(f.dev, f.build, f.prob, 1);
  ASSERT_EQ(states.size(), 2u);
  for (const auto& v : states) EXPECT_EQ(v.status, kResultOk) << v.variant_name;
  // Nothing lost: the crashed row stays as history beside the new result.
  EXPECT_EQ(raw_count(f.file, "SELECT count(*) FROM results"), results_before + 1);
  EXPECT_EQ(s.result(marker).record.status, kResultCrashed);
  EXPECT_EQ(s.best(f.dev, f.prob, false)->variant_id, o);
}

// A v2 file as a v2 build wrote it: v1 DDL + the v2 migration.
void make_v2_file(const fs::path& file) {
  raw_exec(file, std::string(schema::v1_ddl()) + schema::migrations().at(0).sql +
                     "PRAGMA application_id=" + std::to_string(kApplicationId) + "; PRAGMA user_version=2;");
  raw_exec(file,
           "INSERT INTO devices (uuid, name, cc, sm_count, total_memory_bytes, l2_bytes, driver_version, "
           "runtime_version, driver_release) VALUES ('GPU-v2', 'NVIDIA H200', '9.0', 132, 1, 2, 13000, 13000, '580');"
           "INSERT INTO builds (version, git_commit, compiler, flags, build_type) VALUES ('0.1.0', 'old', 'g', '', 'R');"
           "INSERT INTO problems (family, key, dtype, options_key) VALUES ('flce', 'flce:N=8,D=8,V=8,dtype=bf16', "
           "'bf16', 'flce:dtype=bf16');"
           "INSERT INTO problem_dims VALUES (1, 'N', 8), (1, 'D', 8), (1, 'V', 8);"
           // 1: old bf16 name; 2: old fp32 name; 3 and 4: the same variant under both namings
           // (a v2 store written by builds before and after the rename); 5: another family.
           "INSERT INTO variants (name, family, strategy, dtype, params, deterministic_by_design) VALUES "
           "('flce.bf16.owning.bm128_bn128', 'flce', 'owning', 'bf16', 'bm=128', 1),"
           "('flce.fp32.partials.bm64', 'flce', 'partials', 'fp32', 'bm=64', 1),"
           "('flce.bf16.atomic.bm64', 'flce', 'atomic', 'bf16', 'bm=64', 0),"
           "('flce.bf16.mma.atomic.bm64', 'flce', 'atomic', 'bf16', 'bm=64', 0),"
           "('attention.bf16.owning.d64', 'attention', 'owning', 'bf16', 'd=64', 1);"
           "INSERT INTO runs (uid, started_at, budget_seconds, status, command_line, repeats, seed, "
           "allow_nondeterministic) VALUES "
           "('00000000000000000000000000000001', '2025-01-01T00:00:00.000Z', 0, 'running', 'detfuse tune', 3, 1, 0),"
           "('00000000000000000000000000000002', '2025-01-02T00:00:00.000Z', 0, 'complete', 'detfuse tune', 3, 1, 0);"
           "INSERT INTO results (run_id, device_id, build_id, problem_id, variant_id, seed, status, reason, "
           "recorded_at) VALUES "
           "(1, 1, 1, 1, 1, 1, 'cannot_run', 'smem', '2025-01-01T00:00:01.000Z'),"
           "(1, 1, 1, 1, 2, 1, 'running', '', '2025-01-01T00:00:02.000Z'),"
           "(1, 1, 1, 1, 3, 1, 'error', 'x', '2025-01-01T00:00:03.000Z'),"
           "(2, 1, 1, 1, 4, 1, 'error', 'y', '2025-01-02T00:00:01.000Z');");
}

TEST(DbMigration, Version2NamesGetTheirEngineTokenAndStayResumable) {
  TempDir dir;
  const auto file = dir / "v2.db";
  make_v2_file(file);
  const std::string v2_bytes = read_bytes(file);

  // Read-only: presented as v3 from an in-memory copy; the file is untouched.
  {
    Store ro = Store::open_read_only(file);
    EXPECT_EQ(ro.file_schema_version(), 2);
    EXPECT_TRUE(ro.find_variant("flce.bf16.mma.owning.bm128_bn128").has_value());
  }
  EXPECT_EQ(read_bytes(file), v2_bytes);

  Store s(file);
  EXPECT_EQ(s.schema_version(), kSchemaVersion);
  EXPECT_EQ(raw_count(file, "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw_count(file, "PRAGMA foreign_key_check"), -1);  // no row: no dangling reference
  std::map<std::string, std::string> engines;
  for (const auto& e : s.list_variants()) engines[e.record.name] = e.record.engine;
  EXPECT_EQ(engines, (std::map<std::string, std::string>{{"attention.bf16.owning.d64", ""},
                                                         {"flce.bf16.mma.atomic.bm64", "mma"},
                                                         {"flce.bf16.mma.owning.bm128_bn128", "mma"},
                                                         {"flce.fp32.fma.partials.bm64", "fma"}}));
  // Every result survived, attached to the new names (the twin's rows folded).
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results"), 4);
  const Id atomic = *s.find_variant("flce.bf16.mma.atomic.bm64");
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results WHERE variant_id=" + std::to_string(atomic)), 2);
  // Runs: statuses kept, owner unknown, no heartbeat.
  const auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].record.status, kRunRunning);
  EXPECT_FALSE(runs[1].record.owner.known());
  EXPECT_EQ(runs[1].record.heartbeat_at, "");
  auto un = s.unfinished_runs();
  ASSERT_EQ(un.size(), 1u);
  EXPECT_TRUE(std::isnan(un[0].heartbeat_age_s));
  // Resumable under the new names: the tuner finds its variants by name.
  const Id dev = s.list_devices().at(0).id, build = s.list_builds().at(0).id, prob = 1;
  auto running = s.running_variants(dev, build, prob, 1);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].variant_name, "flce.fp32.fma.partials.bm64");
  EXPECT_TRUE(s.mark_crashed(running[0].result_id, "found by --resume"));
  EXPECT_TRUE(s.mark_run_crashed(running[0].run_id, "owner unknown, written before v3"));
  VariantRecord again{"flce.bf16.mma.owning.bm128_bn128", "flce", "owning", "bf16", "bm=128", true, "mma"};
  EXPECT_EQ(s.find_or_create_variant(again), *s.find_variant(again.name));
  again.engine = "wgmma";
  EXPECT_THROW(s.find_or_create_variant(again), Error);
}

TEST(DbMigration, MergingAVersion2StoreMapsNames) {
  TempDir dir;
  const auto old = dir / "v2.db";
  make_v2_file(old);
  const std::string v2_bytes = read_bytes(old);
  Store mine(dir / "mine.db");
  VariantRecord have{"flce.bf16.mma.owning.bm128_bn128", "flce", "owning", "bf16", "bm=128", true, "mma"};
  const Id id = mine.find_or_create_variant(have);
  const MergeCounts n = mine.merge(old);
  EXPECT_EQ(n.variants, 3);  // owning existed under its new name
  EXPECT_EQ(n.results, 3);   // the running marker is not imported
  EXPECT_EQ(*mine.find_variant(have.name), id);
  EXPECT_FALSE(mine.find_variant("flce.bf16.owning.bm128_bn128").has_value());
  EXPECT_EQ(read_bytes(old), v2_bytes);
}

}  // namespace
}  // namespace detfuse::db::test
