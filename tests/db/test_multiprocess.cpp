// Several processes on one store file (fork): two writers lose nothing, a
// reader during writes sees consistent snapshots and no error, and a writer
// killed with SIGKILL in the middle of a transaction leaves a consistent file
// with every committed row and none of the killed transaction's rows.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "db/store.h"
#include "tests/db/db_test_util.h"

namespace detfuse::db::test {
namespace {

constexpr int kSamples = 9;  // full_result: 9 timing samples, 3 repeats x 4 digests
constexpr int kDigests = 12;

// Writes `n` results in transactions of `batch`, each result under its own
// problem so the keys never collide. Returns 0 on success (child exit code).
int write_results(const fs::path& file, const std::string& strategy, int n, int batch) {
  try {
    Store s(file);
    const Id dev = s.find_or_create_device(h200());
    const Id build = s.find_or_create_build(build_a());
    const Id v = s.find_or_create_variant(variant(strategy));
    const Id run = s.begin_run(RunRecord{});
    for (int i = 0; i < n;) {
      Transaction tx(s);
      for (int k = 0; k < batch && i < n; ++k, ++i) {
        const Id prob = s.find_or_create_problem(flce_problem(1 + i, 64, 128));
        s.mark_running(run, dev, build, prob, v, 1);
        s.record_result(full_result(run, dev, build, prob, v, 1, 1.0 + i));
      }
      tx.commit();
    }
    s.finish_run(run, kRunComplete);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer %s: %s\n", strategy.c_str(), e.what());
    return 1;
  }
}

int exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string integrity(const fs::path& file) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(file.string().c_str(), &db, SQLITE_OPEN_READWRITE, nullptr);
  sqlite3_stmt* s = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, nullptr) == SQLITE_OK) {
    while (sqlite3_step(s) == SQLITE_ROW) out += reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

TEST(DbMultiProcess, TwoWriterProcessesLoseNothing) {
  TempDir dir;
  const auto file = dir / "shared.db";
  {
    // Rows that were there before: counted before and after.
    Store s(file);
    const Id dev = s.find_or_create_device(h200());
    const Id build = s.find_or_create_build(build_a());
    const Id prob = s.find_or_create_problem(flce_problem(999999, 64, 128));
    const Id v = s.find_or_create_variant(variant("atomic"));
    const Id run = s.begin_run(RunRecord{});
    s.record_result(full_result(run, dev, build, prob, v, 1, 3.0));
  }
  const int64_t before = raw_count(file, "SELECT count(*) FROM results");
  ASSERT_EQ(before, 1);
  constexpr int kEach = 150;
  pid_t pids[2];
  const char* strategies[2] = {"owning", "partials"};
  for (int w = 0; w < 2; ++w) {
    pids[w] = ::fork();
    ASSERT_GE(pids[w], 0);
    if (pids[w] == 0) ::_exit(write_results(file, strategies[w], kEach, 10));
  }
  EXPECT_EQ(exit_code(pids[0]), 0);
  EXPECT_EQ(exit_code(pids[1]), 0);
  EXPECT_EQ(integrity(file), "ok");
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results"), before + 2 * kEach);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results WHERE status='ok'"), before + 2 * kEach);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM timing_samples"), (before + 2 * kEach) * kSamples);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM digests"), (before + 2 * kEach) * kDigests);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM runs WHERE status='complete'"), 2);
  // Both writers created the same problems: one row each, never two.
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM problems"), kEach + 1);
}

TEST(DbMultiProcess, ReaderDuringWritesSeesConsistentSnapshots) {
  TempDir dir;
  const auto file = dir / "shared.db";
  { Store s(file); }
  constexpr int kN = 200;
  const pid_t writer = ::fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) ::_exit(write_results(file, "owning", kN, 5));

  // The reader: read-only Store, repeated exports (one snapshot each) and
  // single-statement checks, while the writer commits batches.
  Store ro = Store::open_read_only(file, /*busy_timeout_ms=*/10000);
  int64_t last = 0;
  int reads = 0;
  bool writer_done = false;
  std::string error;
  while (!writer_done || reads < 3) {
    int status = 0;
    if (!writer_done && ::waitpid(writer, &status, WNOHANG) == writer) {
      writer_done = true;
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    try {
      const auto csv = dir / ("csv" + std::to_string(reads % 2));
      ro.export_csv(csv);
      auto lines = [&](const char* t) {
        std::ifstream in(csv / (std::string(t) + ".csv"), std::ios::binary);
        const std::string all((std::istreambuf_iterator<char>(in)), {});
        return int64_t(std::count(all.begin(), all.end(), '\n')) - 1;  // minus the header
      };
      const int64_t results = lines("results"), samples = lines("timing_samples"), digests = lines("digests");
      // A result and its children are committed together; batches of 5.
      EXPECT_EQ(samples, results * kSamples) << "read " << reads;
      EXPECT_EQ(digests, results * kDigests) << "read " << reads;
      EXPECT_EQ(results % 5, 0) << "a batch seen half-committed, read " << reads;
      EXPECT_GE(results, last);
      last = results;
    } catch (const std::exception& e) {
      error = e.what();
      break;
    }
    ++reads;
  }
  if (!writer_done) {
    ::kill(writer, SIGKILL);
    exit_code(writer);
  }
  EXPECT_EQ(error, "");
  EXPECT_EQ(last, kN);
  EXPECT_GE(reads, 3);
}

// The child commits `committed` results, reports it on the pipe, opens a
// transaction, records more (uncommitted), reports again and waits to be killed.
TEST(DbMultiProcess, KillDashNineMidTransactionKeepsCommittedRowsOnly) {
  TempDir dir;
  const auto file = dir / "shared.db";
  { Store s(file); }
  constexpr int kCommitted = 40, kPending = 25;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    if (write_results(file, "owning", kCommitted, 7) != 0) ::_exit(1);
    Store s(file);
    const Id dev = s.find_or_create_device(h200());
    const Id build = s.find_or_create_build(build_a());
    const Id v = s.find_or_create_variant(variant("partials"));
    const Id run = s.begin_run(RunRecord{});
    Transaction tx(s);
    for (int i = 0; i < kPending; ++i) {
      const Id prob = s.find_or_create_problem(flce_problem(100000 + i, 64, 128));
      s.record_result(full_result(run, dev, build, prob, v, 1, 1.0));
    }
    (void)!::write(fds[1], "p", 1);  // in the middle of the transaction
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  ::close(fds[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  EXPECT_EQ(exit_code(child), 128 + SIGKILL);

  EXPECT_EQ(integrity(file), "ok");
  Store s(file);  // opens (and recovers) after the kill
  s.check_integrity();
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results"), kCommitted);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM timing_samples"), kCommitted * kSamples);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM problems WHERE key LIKE 'flce:N=1000%'"), 0);
  // What the child committed before the transaction is there; nothing of it.
  const auto partials = s.find_variant(variant("partials").name);
  ASSERT_TRUE(partials.has_value());
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM results WHERE variant_id=" + std::to_string(*partials)), 0);
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM runs WHERE status='running'"), 1);
}

// Killed while writing continuously: whatever moment the kill lands, the file
// holds whole batches only, at least as many as were reported committed.
TEST(DbMultiProcess, KillDashNineWhileWritingLeavesWholeBatches) {
  TempDir dir;
  const auto file = dir / "shared.db";
  { Store s(file); }
  constexpr int kBatch = 6;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    Store s(file);
    const Id dev = s.find_or_create_device(h200());
    const Id build = s.find_or_create_build(build_a());
    const Id v = s.find_or_create_variant(variant("owning"));
    const Id run = s.begin_run(RunRecord{});
    for (int i = 0;;) {
      Transaction tx(s);
      for (int k = 0; k < kBatch; ++k, ++i) {
        const Id prob = s.find_or_create_problem(flce_problem(1 + i, 64, 128));
        s.record_result(full_result(run, dev, build, prob, v, 1, 1.0));
      }
      tx.commit();
      (void)!::write(fds[1], "c", 1);
    }
  }
  ::close(fds[1]);
  int commits = 0;
  char c = 0;
  while (commits < 20 && ::read(fds[0], &c, 1) == 1) ++commits;
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  exit_code(child);
  ::close(fds[0]);

  EXPECT_EQ(integrity(file), "ok");
  const int64_t results = raw_count(file, "SELECT count(*) FROM results");
  EXPECT_GE(results, int64_t(commits) * kBatch);
  EXPECT_EQ(results % kBatch, 0) << results;
  EXPECT_EQ(raw_count(file, "SELECT count(*) FROM timing_samples"), results * kSamples);
  Store s(file);
  EXPECT_EQ(int64_t(s.run_results(s.list_runs().at(0).id).size()), results);
}

}  // namespace
}  // namespace detfuse::db::test
