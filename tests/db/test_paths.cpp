// Store paths: bad paths are input errors named before anything on disk
// changes; read-only opens work on a read-only file and in a read-only
// directory and never write; db merge validates its source before the target
// exists and leaves nothing behind when it fails.
//
// Tests run as root in CI, where chmod does not stop root: the permission
// cases run in a forked child that drops to uid 65534 (in_unprivileged_child);
// they skip, with the reason, only where privileges cannot be dropped.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "db/store.h"
#include "tests/db/db_test_util.h"

namespace detfuse::db::test {
namespace {

// A small store with one best() answer.
struct Tuned {
  Id dev = 0, prob = 0;
};
Tuned fill(const fs::path& file) {
  Store s(file);
  Tuned t;
  t.dev = s.find_or_create_device(h200());
  const Id build = s.find_or_create_build(build_a());
  t.prob = s.find_or_create_problem(flce_problem(4096, 4096, 128256));
  const Id v = s.find_or_create_variant(variant("owning"));
  const Id run = s.begin_run(RunRecord{});
  s.record_result(full_result(run, t.dev, build, t.prob, v, 1, 2.0));
  s.finish_run(run, kRunComplete);
  return t;
}

bool no_sidecars(const fs::path& file) {
  return !fs::exists(file.string() + "-wal") && !fs::exists(file.string() + "-shm") &&
         !fs::exists(file.string() + "-journal");
}

TEST(DbPaths, EmptyPathIsAnInputError) {
  const std::string m = error_of([] { Store s(""); });
  EXPECT_TRUE(contains(m, "the database path is empty")) << m;
  EXPECT_TRUE(contains(error_of([] { Store::open_read_only(""); }), "path is empty"));
}

TEST(DbPaths, DirectoryIsAnInputErrorNamingIt) {
  TempDir dir;
  const std::string m = error_of([&] { Store s(dir.path()); });
  EXPECT_TRUE(contains(m, dir.path().string()) && contains(m, "is a directory")) << m;
  EXPECT_TRUE(contains(error_of([&] { Store::open_read_only(dir.path()); }), "is a directory"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(DbPaths, MissingParentOrMissingFileIsAnInputError) {
  TempDir dir;
  const auto deep = dir / "no-such-dir" / "x.db";
  std::string m = error_of([&] { Store s(deep); });
  EXPECT_TRUE(contains(m, "no-such-dir") && contains(m, "does not exist")) << m;
  write_bytes(dir / "plain", "x");
  m = error_of([&] { Store s(dir / "plain" / "x.db"); });
  EXPECT_TRUE(contains(m, "is not a directory")) << m;
  m = error_of([&] { Store::open_read_only(dir / "absent.db"); });
  EXPECT_TRUE(contains(m, "absent.db") && contains(m, "does not exist")) << m;
  EXPECT_FALSE(fs::exists(dir / "absent.db"));
  EXPECT_FALSE(fs::exists(dir / "no-such-dir"));
}

TEST(DbPaths, ForeignAndNewerFilesAreInputErrors) {
  TempDir dir;
  write_bytes(dir / "junk.db", std::string(200, 'j'));
  EXPECT_TRUE(contains(error_of([&] { Store s(dir / "junk.db"); }), "not a detfuse database"));
  EXPECT_TRUE(contains(error_of([&] { Store::open_read_only(dir / "junk.db"); }), "not a detfuse database"));
  write_bytes(dir / "empty.db", "");
  EXPECT_TRUE(contains(error_of([&] { Store::open_read_only(dir / "empty.db"); }), "an empty file"));
  EXPECT_EQ(read_bytes(dir / "empty.db"), "");
}

// The read-only mode itself (works as root too): SQLITE_OPEN_READONLY,
// query_only, and no PRAGMA writes: the file's bytes do not change.
TEST(DbPaths, ReadOnlyOpenAnswersAndNeverWrites) {
  TempDir dir;
  const auto file = dir / "ro.db";
  const Tuned t = fill(file);
  ASSERT_TRUE(no_sidecars(file));
  const std::string before = read_bytes(file);
  {
    Store ro = Store::open_read_only(file);
    EXPECT_TRUE(ro.read_only());
    auto b = ro.best(t.dev, t.prob, false);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->variant_name, variant("owning").name);
    EXPECT_EQ(ro.export_csv(dir / "csv").size(), 16u);
    const std::string m = error_of([&] { ro.begin_run(RunRecord{}); });
    EXPECT_TRUE(contains(m, "opened read-only")) << m;
    EXPECT_TRUE(contains(error_of([&] { ro.heartbeat(1); }), "opened read-only"));
  }
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results"), 1);
}

TEST(DbPaths, ReadOnlyFileRefusedForWritingReadableReadOnly) {
  TempDir dir;
  const auto file = dir / "ro-file.db";
  const Tuned t = fill(file);
  const auto source = dir / "source.db";
  fill(source);
  fs::permissions(dir.path(), fs::perms::all);  // the directory is writable by all
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const std::string before = read_bytes(file);
  bool skipped = false;
  const std::string failure = in_unprivileged_child(
      [&]() -> std::string {
        std::string m = error_of([&] { Store s(file); });
        if (!contains(m, "ro-file.db") || !contains(m, "not writable")) return "read-write open: " + m;
        m = error_of([&] { merge_into(file, source); });  // a good source, a read-only target
        if (!contains(m, "ro-file.db") || !contains(m, "not writable")) return "merge into it: " + m;
        Store ro = Store::open_read_only(file);
        if (!ro.best(t.dev, t.prob, false)) return "best() found nothing";
        return "";
      },
      &skipped);
  if (skipped) GTEST_SKIP() << "running as root and cannot drop to uid 65534: chmod does not bind root";
  EXPECT_EQ(failure, "");
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_TRUE(no_sidecars(file));    // immutable: nothing created beside a file not ours
  EXPECT_TRUE(no_sidecars(source));
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results"), 1);  // the merge added nothing
}

TEST(DbPaths, StoreInReadOnlyDirectoryIsReadableAndRefusedForWriting) {
  TempDir dir;
  const auto sub = dir / "shared";
  fs::create_directories(sub);
  const auto file = sub / "detfuse.db";
  const Tuned t = fill(file);
  ASSERT_TRUE(no_sidecars(file));
  // Readable by all; writable only by root (the owner): a read-only directory
  // for the unprivileged child.
  fs::permissions(dir.path(), fs::perms::all);  // the child may write csv output here
  fs::permissions(sub, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  const std::string before = read_bytes(file);
  bool skipped = false;
  const std::string failure = in_unprivileged_child(
      [&]() -> std::string {
        std::string m = error_of([&] { Store s(file); });
        if (!contains(m, "not writable")) return "read-write open: " + m;
        m = error_of([&] { Store s(sub / "new.db"); });
        if (!contains(m, "cannot create the file") || !contains(m, sub.string())) return "create: " + m;
        Store ro = Store::open_read_only(file);  // WAL file, no -wal, directory not writable: immutable
        auto b = ro.best(t.dev, t.prob, false);
        if (!b || b->variant_name != variant("owning").name) return "best() in a read-only directory";
        if (ro.export_csv(dir / "csv").size() != 16u) return "export_csv";
        if (ro.list_runs().size() != 1u) return "list_runs";
        return "";
      },
      &skipped);
  if (skipped) GTEST_SKIP() << "running as root and cannot drop to uid 65534: chmod does not bind root";
  EXPECT_EQ(failure, "");
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_TRUE(no_sidecars(file));
  EXPECT_FALSE(fs::exists(sub / "new.db"));
}

// A -wal without its -shm in a directory nobody may write: no safe read.
TEST(DbPaths, ReadOnlyDirectoryWithAStrayWalIsRefusedClearly) {
  TempDir dir;
  const auto live = dir / "live.db";
  fill(live);
  Store writer(live);  // keeps the -wal and -shm in existence
  writer.find_or_create_variant(variant("atomic"));
  ASSERT_TRUE(fs::exists(live.string() + "-wal"));
  const auto sub = dir / "copy";
  fs::create_directories(sub);
  fs::copy_file(live, sub / "live.db");
  fs::copy_file(live.string() + "-wal", (sub / "live.db").string() + "-wal");
  fs::permissions(sub, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  bool skipped = false;
  const std::string failure = in_unprivileged_child(
      [&]() -> std::string {
        const std::string m = error_of([&] { Store::open_read_only(sub / "live.db"); });
        if (!contains(m, "-wal") || !contains(m, "cannot be read safely")) return m;
        return "";
      },
      &skipped);
  if (skipped) GTEST_SKIP() << "running as root and cannot drop to uid 65534: chmod does not bind root";
  EXPECT_EQ(failure, "");
}

TEST(DbMergeSafety, BadSourceCreatesNoTarget) {
  TempDir dir;
  write_bytes(dir / "junk.db", std::string(4096, 'j'));
  const auto target = dir / "new.db";
  std::string m = error_of([&] { merge_into(target, dir / "junk.db"); });
  EXPECT_TRUE(contains(m, "merge: ") && contains(m, "junk.db") && contains(m, "not a detfuse database")) << m;
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(no_sidecars(target));
  m = error_of([&] { merge_into(target, dir / "absent.db"); });
  EXPECT_TRUE(contains(m, "absent.db") && contains(m, "does not exist")) << m;
  EXPECT_FALSE(fs::exists(target));
  // A damaged detfuse file: the full integrity check refuses it first.
  const auto damaged = dir / "damaged.db";
  {
    Store s(damaged);
    for (int i = 0; i < 200; ++i) s.find_or_create_variant(variant("owning", "t" + std::to_string(i) + std::string(200, 'x')));
  }
  std::string bytes = read_bytes(damaged);
  for (size_t i = 4 * 4096; i < bytes.size(); ++i) bytes[i] = char(i * 7);
  write_bytes(damaged, bytes);
  EXPECT_THROW(merge_into(target, damaged), Error);
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(no_sidecars(target));
  // The target itself as source.
  fill(dir / "self.db");
  m = error_of([&] { merge_into(dir / "self.db", dir / "self.db"); });
  EXPECT_TRUE(contains(m, "is this database itself")) << m;
}

TEST(DbMergeSafety, BadTargetPathChangesNothing) {
  TempDir dir;
  fill(dir / "good.db");
  const std::string m = error_of([&] { merge_into(dir / "missing-dir" / "t.db", dir / "good.db"); });
  EXPECT_TRUE(contains(m, "missing-dir") && contains(m, "does not exist")) << m;
  EXPECT_FALSE(fs::exists(dir / "missing-dir"));
  EXPECT_TRUE(contains(error_of([&] { merge_into(dir.path(), dir / "good.db"); }), "is a directory"));
}

TEST(DbMergeSafety, FailingMergeIntoAnExistingStoreLeavesItAsItWas) {
  TempDir dir;
  const auto target = dir / "target.db";
  const auto source = dir / "source.db";
  fill(target);
  {
    // The same problem key with other facts: an inconsistency found mid-merge,
    // after the devices and builds of the source were added.
    Store s(source);
    s.find_or_create_device(h200("GPU-other"));
    ProblemRecord p = flce_problem(4096, 4096, 128256);
    p.options_key = "flce:something-else";
    s.find_or_create_problem(p);
  }
  ASSERT_TRUE(no_sidecars(target));
  const std::string before = read_bytes(target);
  const std::string m = error_of([&] { merge_into(target, source); }, Error::Kind::runtime);
  EXPECT_TRUE(contains(m, "stored with a different")) << m;
  EXPECT_TRUE(no_sidecars(target));  // closed by us: SQLite removed its log
  EXPECT_TRUE(no_sidecars(source));  // read-only open tidied after itself
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_EQ(Store::open_read_only(target).list_devices().size(), 1u);
  // A good merge into a new file creates it and adds every row.
  const auto fresh = dir / "fresh.db";
  EXPECT_EQ(merge_into(fresh, target).results, 1);
  EXPECT_EQ(raw_count(fresh, "SELECT count(*) FROM results"), 1);
}

}  // namespace
}  // namespace detfuse::db::test
