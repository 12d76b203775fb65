// Opening a store: schema creation, migration from v1, refusal of foreign,
// corrupted and newer files (which must stay untouched).
#include <gtest/gtest.h>

#include "db/schema.h"
#include "db/store.h"
#include "tests/db/db_test_util.h"

namespace detfuse::db::test {
namespace {

// Runs `f`, expects a db::Error whose message contains every piece of `needles`.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> needles) {
  try {
    f();
    ADD_FAILURE() << "no db::Error thrown";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* n : needles) EXPECT_NE(m.find(n), std::string::npos) << "message: " << m;
  }
}

TEST(DbOpen, CreatesSchemaWithVersionApplicationIdAndWal) {
  TempDir dir;
  const auto file = dir / "new.db";
  {
    Store s(file);
    EXPECT_EQ(s.schema_version(), kSchemaVersion);
    EXPECT_TRUE(s.list_devices().empty());
  }
  EXPECT_EQ(raw_count(file, "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw_count(file, "PRAGMA application_id"), kApplicationId);
  for (const char* t : {"devices", "builds", "problems", "problem_dims", "variants", "runs", "results",
                        "correctness", "correctness_errors", "determinism", "determinism_outputs",
                        "digests", "timing", "timing_samples"}) {
    EXPECT_EQ(raw_count(file, std::string("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='") +
                                  t + "'"),
              1)
        << t;
  }
  // WAL is persistent in the file header (bytes 18 and 19 are 2 for WAL).
  const std::string bytes = read_bytes(file);
  ASSERT_GE(bytes.size(), 20u);
  EXPECT_EQ(bytes[18], 2);
  EXPECT_EQ(bytes[19], 2);
  // Reopening an existing store is fine and changes nothing.
  Store again(file);
  EXPECT_EQ(again.schema_version(), kSchemaVersion);
}

TEST(DbOpen, DefaultPathIsDetfuseDb) { EXPECT_STREQ(kDefaultPath, "detfuse.db"); }

TEST(DbOpen, MissingFileWithoutCreateOrReadOnlyIsAnError) {
  TempDir dir;
  expect_error([&] { Store s(dir / "absent.db", OpenOptions{false, false, 1000}); }, {"does not exist"});
  expect_error([&] { Store s(dir / "absent.db", OpenOptions{true, true, 1000}); }, {"does not exist"});
  expect_error([&] { Store s(dir / "no-such-dir" / "x.db"); }, {"does not exist"});
  EXPECT_FALSE(fs::exists(dir / "absent.db"));
}

TEST(DbOpen, MigratesAVersion1File) {
  TempDir dir;
  const auto file = dir / "v1.db";
  // A v1 file exactly as a v1 build wrote it, with one device and one run.
  raw_exec(file, std::string(schema::v1_ddl()) + "PRAGMA application_id=" + std::to_string(kApplicationId) +
                     "; PRAGMA user_version=1;"
                     "INSERT INTO devices (uuid, name, cc, sm_count, total_memory_bytes, l2_bytes, "
                     "driver_version, runtime_version) VALUES ('GPU-old', 'NVIDIA H200', '9.0', 132, 1, 2, 12080, 12080);"
                     "INSERT INTO runs (uid, started_at, budget_seconds, status, command_line, repeats, seed, "
                     "allow_nondeterministic) VALUES ('00000000000000000000000000000001', "
                     "'2025-01-01T00:00:00.000Z', 600, 'complete', 'detfuse tune', 5, 7, 0);");
  ASSERT_EQ(raw_count(file, "PRAGMA user_version"), 1);

  // A read-only open migrates a copy in memory and never writes the file.
  {
    const std::string before = read_bytes(file);
    Store ro(file, OpenOptions{false, true, 1000});
    EXPECT_EQ(ro.schema_version(), kSchemaVersion);
    EXPECT_EQ(ro.file_schema_version(), 1);
    EXPECT_EQ(ro.list_devices().size(), 1u);
    EXPECT_EQ(ro.list_runs().at(0).record.repeats, 5);
    EXPECT_THROW(ro.find_or_create_variant(variant("owning")), Error);
    EXPECT_EQ(read_bytes(file), before);
  }
  EXPECT_EQ(raw_count(file, "PRAGMA user_version"), 1);

  Store s(file);
  EXPECT_EQ(s.schema_version(), kSchemaVersion);
  EXPECT_EQ(raw_count(file, "PRAGMA user_version"), kSchemaVersion);
  // The data survived; the new column has its default.
  auto devs = s.list_devices();
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].record.uuid, "GPU-old");
  EXPECT_EQ(devs[0].record.driver_version, 12080);
  EXPECT_EQ(devs[0].record.driver_release, "");
  auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].record.repeats, 5);
  EXPECT_EQ(runs[0].record.seed, 7);
  // v2 keys devices by driver_release too: same device, another release = new row.
  DeviceRecord d = devs[0].record;
  EXPECT_EQ(s.find_or_create_device(d), devs[0].id);
  d.driver_release = "580.1";
  EXPECT_NE(s.find_or_create_device(d), devs[0].id);
}

TEST(DbOpen, RefusesGarbageFileAndLeavesItUntouched) {
  TempDir dir;
  const auto file = dir / "garbage.db";
  std::string junk(4096, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = char((i * 2654435761u) >> 13);
  write_bytes(file, junk);
  expect_error([&] { Store s(file); }, {"garbage.db", "not a detfuse database", "not modified"});
  EXPECT_EQ(read_bytes(file), junk);
  EXPECT_FALSE(fs::exists(dir / "garbage.db-wal"));

  // A tiny text file too.
  write_bytes(file, "hello\n");
  expect_error([&] { Store s(file); }, {"not a detfuse database"});
  EXPECT_EQ(read_bytes(file), "hello\n");
}

TEST(DbOpen, RefusesCorruptedSqliteFile) {
  TempDir dir;
  const auto file = dir / "corrupt.db";
  // The SQLite magic followed by garbage: header passes, SQLite finds it damaged.
  std::string bytes = std::string("SQLite format 3", 16);
  bytes.resize(8192);
  for (size_t i = 16; i < bytes.size(); ++i) bytes[i] = char((i * 40503u) >> 5);
  write_bytes(file, bytes);
  expect_error([&] { Store s(file); }, {"corrupt.db"});
  EXPECT_EQ(read_bytes(file), bytes);
}

TEST(DbOpen, DamagedPagesOfADetfuseFileAreReported) {
  TempDir dir;
  const auto file = dir / "damaged.db";
  {
    Store s(file);
    for (int i = 0; i < 200; ++i) {
      VariantRecord v = variant("owning", "t" + std::to_string(i) + std::string(200, 'x'));
      s.find_or_create_variant(v);
    }
  }
  // Checkpointed and closed: everything is in the main file. Overwrite the
  // pages after the first few with garbage.
  std::string bytes = read_bytes(file);
  ASSERT_GT(bytes.size(), 5 * 4096u);
  for (size_t i = 4 * 4096; i < bytes.size(); ++i) bytes[i] = char(i * 7);
  write_bytes(file, bytes);
  expect_error(
      [&] {
        Store s(file);
        s.check_integrity();
        s.list_variants();
      },
      {"damaged.db"});
}

TEST(DbOpen, RefusesForeignSqliteFileAndLeavesItUntouched) {
  TempDir dir;
  const auto file = dir / "foreign.db";
  raw_exec(file, "CREATE TABLE songs (title TEXT); INSERT INTO songs VALUES ('x');");
  const std::string before = read_bytes(file);
  expect_error([&] { Store s(file); }, {"foreign.db", "not a detfuse database", "not modified"});
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM songs"), 1);

  // Another application's id with no tables is still foreign.
  const auto other = dir / "other-app.db";
  raw_exec(other, "PRAGMA application_id=1234; CREATE TABLE t (x);");
  expect_error([&] { Store s(other); }, {"application_id 1234"});
}

TEST(DbOpen, RefusesNewerVersionAndLeavesItUntouched) {
  TempDir dir;
  const auto file = dir / "future.db";
  { Store s(file); }
  raw_exec(file, "PRAGMA user_version=" + std::to_string(kSchemaVersion + 1));
  const std::string before = read_bytes(file);
  expect_error([&] { Store s(file); }, {"future.db", "newer than this build"});
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_EQ(raw_count(file, "PRAGMA user_version"), kSchemaVersion + 1);
}

TEST(DbOpen, ReadOnlyStoreAnswersQueriesAndRefusesWrites) {
  TempDir dir;
  const auto file = dir / "ro.db";
  Id dev = 0;
  {
    Store s(file);
    dev = s.find_or_create_device(h200());
  }
  Store ro(file, OpenOptions{false, true, 1000});
  EXPECT_EQ(ro.find_or_create_device(h200()), dev);  // found without writing
  EXPECT_EQ(ro.find_devices("GPU-1111").size(), 1u);
  EXPECT_THROW(ro.find_or_create_variant(variant("owning")), Error);
  EXPECT_TRUE(ro.list_variants().empty());
}

TEST(DbOpen, EmptyFileBecomesAStore) {
  TempDir dir;
  const auto file = dir / "empty.db";
  write_bytes(file, "");
  Store s(file);
  EXPECT_EQ(s.schema_version(), kSchemaVersion);
}

}  // namespace
}  // namespace detfuse::db::test
