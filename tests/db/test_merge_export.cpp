// Export to CSV and merge of stores from several machines.
#include <gtest/gtest.h>

#include "db/schema.h"
#include "db/store.h"
#include "tests/db/db_test_util.h"

namespace detfuse::db::test {
namespace {

// A store of one machine: one device, two variants, one problem, one run.
void fill(Store& s, const std::string& uuid, double ms) {
  const Id dev = s.find_or_create_device(h200(uuid));
  const Id build = s.find_or_create_build(build_a());
  const Id prob = s.find_or_create_problem(flce_problem(4096, 4096, 128256));
  const Id a = s.find_or_create_variant(variant("atomic"));
  const Id o = s.find_or_create_variant(variant("owning"));
  RunRecord r;
  r.command_line = "detfuse tune --kernel flce --shape 4096,4096,128256";
  r.repeats = 3;
  const Id run = s.begin_run(r);
  s.record_result(full_result(run, dev, build, prob, a, 1, ms * 0.8, true, false));
  s.record_result(full_result(run, dev, build, prob, o, 1, ms));
  // A marker left over from a crash is bookkeeping, not a result to import.
  const Id p = s.find_or_create_variant(variant("partials"));
  s.mark_running(run, dev, build, prob, p, 1);
  s.finish_run(run, kRunInterrupted);
}

TEST(DbMerge, MergeImportsEverythingAndIsIdempotent) {
  TempDir dir;
  Store mine(dir / "mine.db");
  fill(mine, "GPU-mine", 1.0);
  {
    Store theirs(dir / "theirs.db");
    fill(theirs, "GPU-theirs", 2.0);
    // A problem the other machine tuned alone.
    const Id dev = theirs.find_or_create_device(h200("GPU-theirs"));
    const Id prob = theirs.find_or_create_problem(flce_problem(512, 2048, 32000));
    const Id o = *theirs.find_variant(variant("owning").name);
    const Id build = theirs.find_or_create_build(build_a());
    const Id run = theirs.begin_run(RunRecord{});
    theirs.record_result(full_result(run, dev, build, prob, o, 1, 0.1));
  }
  const std::string theirs_bytes = read_bytes(dir / "theirs.db");

  MergeCounts n = mine.merge(dir / "theirs.db");
  EXPECT_EQ(n.devices, 1);   // GPU-theirs
  EXPECT_EQ(n.builds, 0);    // same build
  EXPECT_EQ(n.problems, 1);  // the 512 problem
  EXPECT_EQ(n.variants, 0);  // same names
  EXPECT_EQ(n.runs, 2);
  EXPECT_EQ(n.results, 3);   // 2 + 1; the "running" marker is not imported
  EXPECT_EQ(read_bytes(dir / "theirs.db"), theirs_bytes);  // source untouched

  MergeCounts again = mine.merge(dir / "theirs.db");
  EXPECT_EQ(again.total(), 0);

  // The merged results answer queries for the other device, with their data.
  auto devs = mine.find_devices("GPU-theirs");
  ASSERT_EQ(devs.size(), 1u);
  const Id prob = *mine.find_problem(flce_problem(4096, 4096, 128256).key);
  auto b = mine.best(devs[0].id, prob, false);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->variant_name, variant("owning").name);
  EXPECT_DOUBLE_EQ(b->median_ms, 2.0);
  const StoredResult r = mine.result(b->result_id);
  EXPECT_EQ(r.record.timing->samples_ms.size(), 9u);
  EXPECT_EQ(r.record.determinism->digests.size(), 12u);
  EXPECT_EQ(r.record.correctness->errors.size(), 4u);
  // Merging into a third store twice, in both orders, converges.
  Store third(dir / "third.db");
  EXPECT_GT(third.merge(dir / "mine.db").results, 0);
  EXPECT_EQ(third.merge(dir / "theirs.db").total(), 0);
  EXPECT_EQ(third.merge(dir / "mine.db").total(), 0);
}

TEST(DbMerge, RefusesForeignNewerAndSelf) {
  TempDir dir;
  Store mine(dir / "mine.db");
  raw_exec(dir / "foreign.db", "CREATE TABLE x (y); INSERT INTO x VALUES (1);");
  EXPECT_THROW(mine.merge(dir / "foreign.db"), Error);
  write_bytes(dir / "garbage.db", std::string(5000, '\x7f'));
  EXPECT_THROW(mine.merge(dir / "garbage.db"), Error);
  { Store future(dir / "future.db"); }
  raw_exec(dir / "future.db", "PRAGMA user_version=" + std::to_string(kSchemaVersion + 1));
  try {
    mine.merge(dir / "future.db");
    ADD_FAILURE() << "merged a newer file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mine.merge(dir / "mine.db"), Error);
  EXPECT_THROW(mine.merge(dir / "absent.db"), Error);
  EXPECT_TRUE(mine.list_devices().empty());
}

TEST(DbMerge, MergesAnOlderVersionWithoutTouchingIt) {
  TempDir dir;
  const auto v1 = dir / "v1.db";
  raw_exec(v1, std::string(schema::v1_ddl()) + "PRAGMA application_id=" + std::to_string(kApplicationId) +
                   "; PRAGMA user_version=1;"
                   "INSERT INTO devices (uuid, name, cc, sm_count, total_memory_bytes, l2_bytes, "
                   "driver_version, runtime_version) VALUES ('GPU-old', 'NVIDIA H100', '9.0', 132, 1, 2, 12080, 12080);");
  const std::string before = read_bytes(v1);
  Store mine(dir / "mine.db");
  EXPECT_EQ(mine.merge(v1).devices, 1);
  EXPECT_EQ(read_bytes(v1), before);
  EXPECT_EQ(raw_count(v1, "PRAGMA user_version"), 1);
  EXPECT_EQ(mine.find_devices("GPU-old").size(), 1u);
}

TEST(DbExport, OneCsvPerTableWithHeaderAndQuoting) {
  TempDir dir;
  Store s(dir / "x.db");
  fill(s, "GPU-a", 1.0);
  VariantRecord v = variant("owning", "odd");
  v.params = "say \"hi\", then\nnewline";
  s.find_or_create_variant(v);
  const auto files = s.export_csv(dir / "csv");
  EXPECT_EQ(files.size(), 16u);
  for (const char* t : {"devices", "builds", "problems", "problem_dims", "variants", "runs", "results",
                        "correctness", "correctness_errors", "determinism", "determinism_outputs", "digests",
                        "timing", "timing_samples", "studies", "determinism_spread"}) {
    EXPECT_TRUE(fs::exists(dir / "csv" / (std::string(t) + ".csv"))) << t;
  }
  const std::string variants = read_bytes(dir / "csv" / "variants.csv");
  EXPECT_EQ(variants.rfind("id,name,family,strategy,dtype,params,deterministic_by_design,engine\r\n", 0), 0u) << variants;
  EXPECT_NE(variants.find("\"say \"\"hi\"\", then\nnewline\""), std::string::npos) << variants;
  const std::string devices = read_bytes(dir / "csv" / "devices.csv");
  EXPECT_NE(devices.find("driver_release"), std::string::npos);
  EXPECT_NE(devices.find("GPU-a"), std::string::npos);
  // Every sample is exported: 2 results x 9 samples + header.
  const std::string samples = read_bytes(dir / "csv" / "timing_samples.csv");
  EXPECT_EQ(std::count(samples.begin(), samples.end(), '\n'), 1 + 2 * 9);
}

}  // namespace
}  // namespace detfuse::db::test
