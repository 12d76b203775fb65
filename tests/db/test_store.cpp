// Recording and querying: natural keys, results round trip, best selection,
// nearest-shape fallback, resume bookkeeping, atomicity and concurrent writers.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "db/store.h"
#include "tests/db/db_test_util.h"

namespace detfuse::db::test {
namespace {

struct Fixture {
  TempDir dir;
  Store store{dir / "detfuse.db"};
  Id dev = store.find_or_create_device(h200());
  Id build = store.find_or_create_build(build_a());
  Id prob = store.find_or_create_problem(flce_problem(4096, 4096, 128256));
  Id run = store.begin_run(RunRecord{});
};

TEST(DbRecords, MakeProblemRecordSplitsShapeFromOptions) {
  auto p = make_problem_record("flce:N=8,D=16,V=32,dtype=bf16,grad=fp32,ii=-100", {"N", "D", "V"});
  EXPECT_EQ(p.family, "flce");
  EXPECT_EQ(p.dtype, "bf16");
  EXPECT_EQ(p.shape, (std::map<std::string, int64_t>{{"N", 8}, {"D", 16}, {"V", 32}}));
  EXPECT_EQ(p.options_key, "flce:dtype=bf16,grad=fp32,ii=-100");
  auto a = make_problem_record("attention:B=2,H=8,Hkv=2,Sq=128,Sk=256,d=64,causal=1,scale=0.125,dtype=bf16",
                               {"B", "H", "Sq", "Sk"});
  EXPECT_EQ(a.options_key, "attention:Hkv=2,d=64,causal=1,scale=0.125,dtype=bf16");
  EXPECT_THROW(make_problem_record("N=8", {"N"}), Error);
  EXPECT_THROW(make_problem_record("flce:N=0,D=1,V=1", {"N", "D", "V"}), Error);
  EXPECT_THROW(make_problem_record("flce:N=8,D=1", {"N", "D", "V"}), Error);
}

TEST(DbRecords, ShapeDistanceIsSumOfAbsLog2Ratios) {
  EXPECT_DOUBLE_EQ(shape_distance({{"N", 4096}, {"V", 1000}}, {{"N", 4096}, {"V", 1000}}), 0.0);
  EXPECT_DOUBLE_EQ(shape_distance({{"N", 1024}, {"V", 1000}}, {{"N", 4096}, {"V", 500}}), 3.0);
  EXPECT_DOUBLE_EQ(shape_distance({{"N", 3}}, {{"N", 12}}), 2.0);
  EXPECT_THROW(shape_distance({{"N", 3}}, {{"M", 3}}), Error);
}

TEST(DbRecords, SummarizeTiming) {
  Timing t;
  t.samples_ms = {3.0, 1.0, 2.0, 10.0};
  t.flops = 2e12;
  summarize(t);
  EXPECT_DOUBLE_EQ(t.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(t.min_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.max_ms, 10.0);
  EXPECT_DOUBLE_EQ(t.tflops, 2e12 / 2.5e-3 / 1e12);
  Timing empty;
  EXPECT_THROW(summarize(empty), Error);
}

TEST(DbStore, NaturalKeysFindOrCreate) {
  Fixture f;
  auto& s = f.store;
  EXPECT_EQ(s.find_or_create_device(h200()), f.dev);
  EXPECT_EQ(s.find_or_create_build(build_a()), f.build);
  EXPECT_EQ(s.find_or_create_problem(flce_problem(4096, 4096, 128256)), f.prob);
  const Id v = s.find_or_create_variant(variant("owning"));
  EXPECT_EQ(s.find_or_create_variant(variant("owning")), v);
  EXPECT_EQ(s.variant(v), variant("owning"));
  EXPECT_EQ(s.device(f.dev), h200());
  EXPECT_EQ(s.build(f.build), build_a());
  EXPECT_EQ(s.problem(f.prob), flce_problem(4096, 4096, 128256));
  // Another driver is another device row; another GPU too.
  DeviceRecord d2 = h200();
  d2.driver_version = 12080;
  EXPECT_NE(s.find_or_create_device(d2), f.dev);
  EXPECT_EQ(s.list_devices().size(), 2u);
  // Inconsistent re-registration is refused.
  VariantRecord bad = variant("owning");
  bad.strategy = "atomic";
  EXPECT_THROW(s.find_or_create_variant(bad), Error);
  ProblemRecord pbad = flce_problem(4096, 4096, 128256);
  pbad.dtype = "fp32";
  EXPECT_THROW(s.find_or_create_problem(pbad), Error);
}

TEST(DbStore, FindDevicesByUuidOrNamePrefix) {
  Fixture f;
  auto& s = f.store;
  DeviceRecord other = h200("GPU-99999999-0000-0000-0000-000000000000");
  other.name = "NVIDIA H100 80GB HBM3";
  const Id o = s.find_or_create_device(other);
  EXPECT_EQ(s.find_devices("").size(), 2u);
  auto byname = s.find_devices("nvidia h200");
  ASSERT_EQ(byname.size(), 1u);
  EXPECT_EQ(byname[0].id, f.dev);
  auto byuuid = s.find_devices("GPU-9999");
  ASSERT_EQ(byuuid.size(), 1u);
  EXPECT_EQ(byuuid[0].id, o);
  EXPECT_EQ(s.find_devices("99999999").size(), 1u);  // without the "GPU-" prefix
  EXPECT_EQ(s.find_devices("NVIDIA").size(), 2u);
  EXPECT_TRUE(s.find_devices("AMD").empty());
}

// v7: the clock-event reasons of a timing, none seen (0) and unknown (empty)
// kept apart; a v6 file's timings migrate as unknown.
TEST(DbStore, ClockEventsRoundTripAndMigrateAsUnknown) {
  TempDir dir;
  const fs::path file = dir / "v6.db";
  Id seen = 0, none = 0, unknown = 0;
  {
    Store s(file);
    const Id dev = s.find_or_create_device(h200());
    const Id build = s.find_or_create_build(build_a());
    const Id prob = s.find_or_create_problem(flce_problem(4096, 4096, 128256));
    const Id run = s.begin_run(RunRecord{});
    ResultRecord r = full_result(run, dev, build, prob, s.find_or_create_variant(variant("owning")), 1, 1.0);
    r.timing->clock_events = 0x4 | 0x20;
    seen = s.record_result(r);
    r = full_result(run, dev, build, prob, s.find_or_create_variant(variant("partials")), 1, 1.0);
    r.timing->clock_events = 0;
    none = s.record_result(r);
    r = full_result(run, dev, build, prob, s.find_or_create_variant(variant("atomic")), 1, 1.0);
    r.timing->clock_events.reset();
    unknown = s.record_result(r);
    EXPECT_EQ(s.result(seen).record.timing->clock_events, 0x24);
    EXPECT_EQ(s.result(none).record.timing->clock_events, 0);
    EXPECT_FALSE(s.result(unknown).record.timing->clock_events.has_value());
  }
  // The file as a v6 build left it: no clock_events column.
  raw_exec(file, "ALTER TABLE timing DROP COLUMN clock_events; PRAGMA user_version=6;");
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM pragma_table_info('timing') WHERE name='clock_events'"), 0);
  Store s(file);
  EXPECT_EQ(s.file_schema_version(), 6);
  EXPECT_EQ(raw_count(file, "PRAGMA user_version"), kSchemaVersion);
  for (Id id : {seen, none, unknown}) {
    const auto t = s.result(id).record.timing;
    ASSERT_TRUE(t.has_value());
    EXPECT_FALSE(t->clock_events.has_value()) << id;  // unknown, not "none seen"
    EXPECT_EQ(t->clock_max_mhz, 1980);                // the rest of the row kept
  }
}

TEST(DbStore, RecordsAndReadsBackAFullResult) {
  Fixture f;
  auto& s = f.store;
  const Id v = s.find_or_create_variant(variant("owning"));
  ResultRecord r = full_result(f.run, f.dev, f.build, f.prob, v, 42, 1.5);
  r.correctness->errors["lse"] = std::nan("");  // NaN metric survives as NaN
  r.recorded_at = "2025-05-01T00:00:00.000Z";
  const Id id = s.record_result(r);
  const StoredResult back = s.result(id);
  EXPECT_EQ(back.variant_name, variant("owning").name);
  EXPECT_TRUE(std::isnan(back.record.correctness->errors.at("lse")));
  ResultRecord cmp = back.record;
  cmp.correctness->errors["lse"] = 0;
  r.correctness->errors["lse"] = 0;
  // distinct counts were computed by the store.
  r.determinism->distinct = {{"dW", 1}, {"dX", 1}, {"loss", 1}, {"lse", 1}};
  // v6: the run_to_run check was filled in from the level the writer gave.
  r.determinism->checks.run_to_run = kCheckShown;
  std::sort(r.determinism->digests.begin(), r.determinism->digests.end(),
            [](const DigestRow& a, const DigestRow& b) {
              return std::tie(a.repeat, a.output) < std::tie(b.repeat, b.output);
            });
  EXPECT_EQ(cmp, r);
  EXPECT_EQ(back.record.timing->samples_ms.size(), 9u);
  EXPECT_DOUBLE_EQ(back.record.timing->median_ms, 1.5);

  // Failures are rows too.
  const Id v2 = s.find_or_create_variant(variant("partials"));
  ResultRecord fail;
  fail.run_id = f.run;
  fail.device_id = f.dev;
  fail.build_id = f.build;
  fail.problem_id = f.prob;
  fail.variant_id = v2;
  fail.seed = 42;
  fail.status = kResultCannotRun;
  fail.reason = "workspace 80 GiB exceeds free memory";
  s.record_result(fail);
  auto all = s.run_results(f.run);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].record.status, kResultCannotRun);
  EXPECT_EQ(all[1].record.reason, fail.reason);
  EXPECT_FALSE(all[1].record.timing.has_value());

  // A second final result for the same key in the same run is refused.
  EXPECT_THROW(s.record_result(r), Error);

  // Runs: finish sets status and time.
  s.finish_run(f.run, kRunBudget);
  const RunRecord run = s.run(f.run);
  EXPECT_EQ(run.status, kRunBudget);
  EXPECT_FALSE(run.finished_at.empty());
  EXPECT_EQ(run.uid.size(), 32u);
  EXPECT_THROW(s.finish_run(f.run, "whatever"), Error);
}

TEST(DbStore, RejectsInvalidResults) {
  Fixture f;
  auto& s = f.store;
  const Id v = s.find_or_create_variant(variant("owning"));
  ResultRecord r = full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0);
  r.status = "fine";
  EXPECT_THROW(s.record_result(r), Error);
  r = full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0);
  r.determinism->digests[0].digest = "XYZ";
  EXPECT_THROW(s.record_result(r), Error);
  r = full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0, true, /*deterministic=*/false);
  r.determinism->level = kLevelRunToRun;  // claims run_to_run with differing dW digests
  EXPECT_THROW(s.record_result(r), Error);
  r = full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0);
  r.determinism->distinct = {{"dW", 2}};
  EXPECT_THROW(s.record_result(r), Error);
  r = full_result(f.run, f.dev, f.build, f.prob, /*variant=*/9999, 1, 1.0);
  EXPECT_THROW(s.record_result(r), Error);  // foreign key
  EXPECT_TRUE(s.run_results(f.run).empty());
}

TEST(DbStore, BestTakesWholeDeviceRunsOnlyAndRunsKeepTheirSmCount) {
  Fixture f;  // f.run: sms NULL (a run of a build before v5, or a test double): the whole device
  auto& s = f.store;
  const Id owning = s.find_or_create_variant(variant("owning"));
  const Id partials = s.find_or_create_variant(variant("partials"));
  RunRecord sliced;
  sliced.sms = 16;
  const Id on16 = s.begin_run(sliced);
  RunRecord whole;
  whole.sms = 132;  // h200()'s SM count
  const Id on132 = s.begin_run(whole);
  EXPECT_EQ(s.run(on16).sms, std::optional<int64_t>(16));
  EXPECT_EQ(s.run(on132).sms, std::optional<int64_t>(132));
  EXPECT_EQ(s.run(f.run).sms, std::nullopt);
  // A faster result measured on a 16-SM slice is never the device's best.
  s.record_result(full_result(on16, f.dev, f.build, f.prob, owning, 1, 0.5));
  EXPECT_FALSE(s.best(f.dev, f.prob, false).has_value());
  s.record_result(full_result(on132, f.dev, f.build, f.prob, partials, 1, 2.0));
  EXPECT_EQ(s.best(f.dev, f.prob, false)->variant_id, partials);
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, owning, 1, 1.0));
  EXPECT_EQ(s.best(f.dev, f.prob, false)->variant_id, owning);
  EXPECT_DOUBLE_EQ(s.best(f.dev, f.prob, false)->median_ms, 1.0);
}

TEST(DbStore, BestIsFastestCorrectDeterministic) {
  Fixture f;
  auto& s = f.store;
  const Id atomic = s.find_or_create_variant(variant("atomic"));
  const Id partials = s.find_or_create_variant(variant("partials"));
  const Id owning = s.find_or_create_variant(variant("owning"));
  const Id wrong = s.find_or_create_variant(variant("owning", "bn64_bv64_bd32_w4_s2"));
  EXPECT_FALSE(s.best(f.dev, f.prob, false).has_value());
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, atomic, 1, 0.8, true, /*det=*/false));
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, partials, 1, 1.2));
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, owning, 1, 1.0));
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, wrong, 1, 0.5, /*pass=*/false));

  auto b = s.best(f.dev, f.prob, false);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->variant_id, owning);
  EXPECT_EQ(b->level, kLevelRunToRun);
  EXPECT_DOUBLE_EQ(b->median_ms, 1.0);
  EXPECT_EQ(b->build, build_a());
  EXPECT_EQ(b->build_id, f.build);
  EXPECT_EQ(b->problem_key, flce_problem(4096, 4096, 128256).key);

  auto bn = s.best(f.dev, f.prob, /*allow_nondeterministic=*/true);
  ASSERT_TRUE(bn.has_value());
  EXPECT_EQ(bn->variant_id, atomic);  // incorrect "wrong" (0.5 ms) never wins
  EXPECT_EQ(bn->level, kLevelNone);

  // An atomic variant whose repeats happened to agree (level run_to_run, as
  // seen at large shapes on the H200) is still not chosen by default: the
  // design makes no promise.
  const Id lucky = s.find_or_create_variant(variant("atomic", "bn64_bv128_bd32_w4_s3"));
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, lucky, 1, 0.7, true, /*det=*/true));
  b = s.best(f.dev, f.prob, false);
  EXPECT_EQ(b->variant_id, owning);
  EXPECT_EQ(s.best(f.dev, f.prob, true)->variant_id, lucky);

  // A faster run-to-run result from another build wins, and says which build.
  BuildRecord other = build_a();
  other.git_commit = "fedcba987654";
  const Id b2 = s.find_or_create_build(other);
  const Id run2 = s.begin_run(RunRecord{});
  s.record_result(full_result(run2, f.dev, b2, f.prob, partials, 1, 0.9));
  b = s.best(f.dev, f.prob, false);
  EXPECT_EQ(b->variant_id, partials);
  EXPECT_EQ(b->build.git_commit, "fedcba987654");
  b = s.best(f.dev, f.prob, false, f.build);  // restricted to the first build
  EXPECT_EQ(b->variant_id, owning);

  // Another device sees nothing.
  const Id dev2 = s.find_or_create_device(h200("GPU-other"));
  EXPECT_FALSE(s.best(dev2, f.prob, true).has_value());
}

TEST(DbStore, NearestTunedShapeUsesDocumentedDistance) {
  Fixture f;
  auto& s = f.store;
  const Id owning = s.find_or_create_variant(variant("owning"));
  const Id p1 = s.find_or_create_problem(flce_problem(1024, 4096, 128256));
  const Id p2 = s.find_or_create_problem(flce_problem(8192, 2048, 32000));
  const Id p_fp32 = s.find_or_create_problem(flce_problem(2048, 4096, 128256, "fp32"));
  const Id p_wrong = s.find_or_create_problem(flce_problem(2048, 4096, 128000));
  s.record_result(full_result(f.run, f.dev, f.build, p1, owning, 1, 1.0));
  s.record_result(full_result(f.run, f.dev, f.build, p2, owning, 1, 1.0));
  s.record_result(full_result(f.run, f.dev, f.build, p_fp32, owning, 1, 1.0));  // other options_key
  s.record_result(full_result(f.run, f.dev, f.build, p_wrong, owning, 1, 1.0, /*pass=*/false));

  // Query N=2048, D=4096, V=128256 (never tuned, not even in the store).
  const ProblemRecord q = flce_problem(2048, 4096, 128256);
  auto m = s.nearest_tuned(f.dev, q, false);
  ASSERT_TRUE(m.has_value());
  // p1: |log2(2048/1024)| = 1. p2: 2 + 1 + log2(128256/32000) ~ 5.0. p_wrong is
  // closer (0.0029) but has no passing result; p_fp32 has another options_key.
  EXPECT_EQ(m->problem.id, p1);
  EXPECT_DOUBLE_EQ(m->distance, 1.0);
  EXPECT_EQ(m->best.variant_id, owning);
  EXPECT_EQ(m->best.problem_id, p1);

  // An exact tuned problem is its own nearest at distance 0.
  auto exact = s.nearest_tuned(f.dev, flce_problem(8192, 2048, 32000), false);
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->problem.id, p2);
  EXPECT_DOUBLE_EQ(exact->distance, 0.0);

  // Nothing tuned for another device or another option set.
  EXPECT_FALSE(s.nearest_tuned(s.find_or_create_device(h200("GPU-x")), q, true).has_value());
  ProblemRecord q2 = make_problem_record(
      "flce:N=2048,D=4096,V=128256,dtype=bf16,grad=fp32,ii=-100,red=sum,ls=0,z=0,cap=0,go=1", {"N", "D", "V"});
  EXPECT_FALSE(s.nearest_tuned(f.dev, q2, true).has_value());
}

TEST(DbStore, ResumeBookkeeping) {
  Fixture f;
  auto& s = f.store;
  const Id a = s.find_or_create_variant(variant("atomic"));
  const Id p = s.find_or_create_variant(variant("partials"));
  const Id o = s.find_or_create_variant(variant("owning"));
  // Run 1: a finishes, p is marked running and the process "dies".
  s.mark_running(f.run, f.dev, f.build, f.prob, a, 5);
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, a, 5, 1.0, true, false));
  const Id marker = s.mark_running(f.run, f.dev, f.build, f.prob, p, 5);
  s.finish_run(f.run, kRunInterrupted);

  // Resume: a is finished, p is reported running, o untouched.
  auto fin = s.finished_variants(f.dev, f.build, f.prob, 5);
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0].variant_id, a);
  EXPECT_EQ(fin[0].status, kResultOk);
  auto running = s.running_variants(f.dev, f.build, f.prob, 5);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].variant_id, p);
  EXPECT_EQ(running[0].result_id, marker);
  EXPECT_EQ(running[0].variant_name, variant("partials").name);
  // Other seeds and builds are separate.
  EXPECT_TRUE(s.variant_states(f.dev, f.build, f.prob, 6).empty());

  s.mark_crashed(running[0].result_id, "process died while this variant ran");
  EXPECT_FALSE(s.mark_crashed(running[0].result_id, "again"));  // no longer running: nothing changes
  EXPECT_THROW(s.mark_crashed(9999, "no such row"), Error);
  EXPECT_TRUE(s.running_variants(f.dev, f.build, f.prob, 5).empty());
  fin = s.finished_variants(f.dev, f.build, f.prob, 5);
  ASSERT_EQ(fin.size(), 2u);
  EXPECT_EQ(fin[1].status, kResultCrashed);
  EXPECT_EQ(fin[1].reason, "process died while this variant ran");

  // Run 2 continues with o only; the marker is replaced by its result.
  const Id run2 = s.begin_run(RunRecord{});
  s.mark_running(run2, f.dev, f.build, f.prob, o, 5);
  s.record_result(full_result(run2, f.dev, f.build, f.prob, o, 5, 0.7));
  EXPECT_EQ(s.finished_variants(f.dev, f.build, f.prob, 5).size(), 3u);
  EXPECT_TRUE(s.running_variants(f.dev, f.build, f.prob, 5).empty());
  EXPECT_EQ(s.run_results(run2).size(), 1u);
  // mark_running on a variant with a final result in the same run is refused.
  EXPECT_THROW(s.mark_running(run2, f.dev, f.build, f.prob, o, 5), Error);
}

TEST(DbStore, InterruptedTransactionLeavesNothing) {
  Fixture f;
  auto& s = f.store;
  const Id v = s.find_or_create_variant(variant("owning"));
  const auto file = f.dir / "detfuse.db";
  try {
    Transaction tx(s);
    s.find_or_create_variant(variant("partials"));
    s.record_result(full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0));  // nested, committed inside
    throw std::runtime_error("simulated Ctrl-C in the middle of a batch");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(s.run_results(f.run).empty());
  EXPECT_FALSE(s.find_variant(variant("partials").name).has_value());
  for (const char* t : {"results", "correctness", "correctness_errors", "determinism", "digests", "timing",
                        "timing_samples", "determinism_outputs"}) {
    EXPECT_EQ(raw_count(file, std::string("SELECT count(*) FROM ") + t), 0) << t;
  }
  // A failure inside record_result itself (unknown run) leaves no partial row.
  ResultRecord bad = full_result(/*run=*/777, f.dev, f.build, f.prob, v, 1, 1.0);
  EXPECT_THROW(s.record_result(bad), Error);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results"), 0);
  // And a committed batch is all there.
  {
    Transaction tx(s);
    s.record_result(full_result(f.run, f.dev, f.build, f.prob, v, 1, 1.0));
    s.record_result(full_result(f.run, f.dev, f.build, f.prob, v, 2, 1.0));
    tx.commit();
  }
  EXPECT_EQ(s.run_results(f.run).size(), 2u);
}

TEST(DbStore, StoredDigestsForVerifyAndInvarianceClasses) {
  Fixture f;
  auto& s = f.store;
  const Id a = s.find_or_create_variant(variant("atomic"));
  const Id o = s.find_or_create_variant(variant("owning"));
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, a, 3, 1.0, true, false, 4));
  s.record_result(full_result(f.run, f.dev, f.build, f.prob, o, 3, 1.0, true, true, 4));
  auto d = s.stored_digests(f.dev, f.build, o, f.prob, 3);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->repeats, 4);
  EXPECT_EQ(d->level, kLevelRunToRun);
  EXPECT_EQ(d->digests.size(), 16u);
  EXPECT_EQ(d->digests[0].repeat, 0);
  EXPECT_FALSE(s.stored_digests(f.dev, f.build, o, f.prob, 4).has_value());  // other seed
  auto all = s.problem_digests(f.dev, f.build, f.prob, 3);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].variant_name, variant("atomic").name);
  EXPECT_EQ(s.result(all[0].result_id).record.determinism->distinct.at("dW"), 4);
}

TEST(DbStore, TwoConnectionsWriteConcurrently) {
  TempDir dir;
  const auto file = dir / "shared.db";
  { Store init(file); }
  constexpr int kPerThread = 40;
  std::string errors[2];
  auto worker = [&](int t) {
    try {
      Store s(file);
      const Id dev = s.find_or_create_device(h200());
      const Id build = s.find_or_create_build(build_a());
      const Id run = s.begin_run(RunRecord{});
      for (int i = 0; i < kPerThread; ++i) {
        const Id prob = s.find_or_create_problem(flce_problem(1024 + i, 4096, 32000));
        const Id v = s.find_or_create_variant(variant(t ? "owning" : "partials"));
        s.mark_running(run, dev, build, prob, v, 1);
        s.record_result(full_result(run, dev, build, prob, v, 1, 1.0 + i));
      }
      s.finish_run(run, kRunComplete);
    } catch (const std::exception& e) {
      errors[t] = e.what();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  Store s(file);
  EXPECT_EQ(s.list_devices().size(), 1u);
  EXPECT_EQ(s.list_problems("flce").size(), size_t(kPerThread));
  EXPECT_EQ(s.list_runs().size(), 2u);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results WHERE status='ok'"), 2 * kPerThread);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM timing_samples"), 2 * kPerThread * 9);
}

TEST(DbStore, TwoConnectionsCreateTheSameNewFile) {
  TempDir dir;
  const auto file = dir / "race.db";
  std::string errors[2];
  auto worker = [&](int t) {
    try {
      Store s(file);
      s.find_or_create_variant(variant(t ? "owning" : "atomic"));
    } catch (const std::exception& e) {
      errors[t] = e.what();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  Store s(file);
  EXPECT_EQ(s.list_variants().size(), 2u);
}

}  // namespace
}  // namespace detfuse::db::test
