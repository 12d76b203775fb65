// detfuse results store: one SQLite file (default ./detfuse.db) holding every
// device, build, problem, variant, tuning run and result (correctness, every
// digest of every repeat, every timing sample). See db/README.md for the schema,
// the nearest-shape distance, concurrency and the migration policy.
//
//   db::Store store("detfuse.db");
//   Id dev = store.find_or_create_device(device_record);
//   Id run = store.begin_run(run_record);
//   store.mark_running(run, dev, build, problem, variant, seed);
//   ... measure ...
//   store.record_result(result);          // one transaction, replaces the marker
//   store.finish_run(run, db::kRunComplete);
//   auto best = store.best(dev, problem, /*allow_nondeterministic=*/false);
//
// Concurrency: the file is in WAL mode with a busy timeout, so several processes
// (or several Store objects in several threads) may write it; every write is one
// transaction. A Store object itself is not thread-safe: one per thread.
//
// Errors: every failure throws db::Error naming the file and what is wrong.
// Opening a file that is not a detfuse database (foreign SQLite file, garbage,
// corrupted) or whose schema is newer than this build throws and leaves the
// file untouched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "db/records.h"

namespace detfuse::db {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Schema version this build writes (PRAGMA user_version) and the application id
// (PRAGMA application_id) that marks a detfuse database.
inline constexpr int kSchemaVersion = 2;
inline constexpr int32_t kApplicationId = 0x64667573;  // "dfus"

inline constexpr const char* kDefaultPath = "detfuse.db";

struct OpenOptions {
  bool create = true;      // create the file (and schema) when it does not exist
  bool read_only = false;  // no writes, no migration (a file needing one is an error)
  int busy_timeout_ms = 10000;
};

// Current UTC time, "YYYY-MM-DDTHH:MM:SS.mmmZ".
std::string now_utc();
// 32 random lowercase hex digits.
std::string new_uid();

// Builds a ProblemRecord from a canonical key "family:k1=v1,k2=v2,...":
// family = text before ':', dtype = the value of field "dtype" (empty if none),
// shape = the fields named in shape_dims (integers > 0, all required),
// options_key = "family:" + the other fields in their original order.
// e.g. make_problem_record(p.key(), {"N", "D", "V"}). Throws db::Error.
ProblemRecord make_problem_record(const std::string& key,
                                  const std::vector<std::string>& shape_dims);

// Distance between two shapes with the same dimension names:
// sum over dims of |log2(a / b)|. Throws db::Error if the names differ or a
// value is not > 0.
double shape_distance(const std::map<std::string, int64_t>& a,
                      const std::map<std::string, int64_t>& b);

class Store;

// RAII transaction: BEGIN IMMEDIATE on construction (a SAVEPOINT when one is
// already open on this Store), rolled back by the destructor unless commit()ed.
// Store methods that write open their own (nested) transaction, so a caller may
// wrap several of them in one Transaction to make a batch atomic.
class Transaction {
 public:
  explicit Transaction(Store& store);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();
  void rollback();  // explicit rollback; the destructor then does nothing

 private:
  Store& store_;
  int depth_;  // 0 = outermost (BEGIN), > 0 = SAVEPOINT
  bool done_ = false;
};

class Store {
 public:
  explicit Store(const std::filesystem::path& path = kDefaultPath, OpenOptions opts = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;

  const std::filesystem::path& path() const;
  int schema_version() const;  // of the open file (== kSchemaVersion unless read_only)

  // Natural-key lookup or insert. A row found by its key whose other fields
  // differ is left as it is (first facts win), except a problem or variant
  // whose family/dtype/options differ: that is an inconsistency and throws.
  Id find_or_create_device(const DeviceRecord& d);
  Id find_or_create_build(const BuildRecord& b);
  Id find_or_create_problem(const ProblemRecord& p);
  Id find_or_create_variant(const VariantRecord& v);

  std::optional<Id> find_device(const DeviceRecord& d) const;  // by natural key
  std::optional<Id> find_build(const BuildRecord& b) const;
  std::optional<Id> find_problem(const std::string& key) const;
  std::optional<Id> find_variant(const std::string& name) const;

  DeviceRecord device(Id id) const;  // throws db::Error if absent
  BuildRecord build(Id id) const;
  ProblemRecord problem(Id id) const;
  VariantRecord variant(Id id) const;
  RunRecord run(Id id) const;

  std::vector<Entry<DeviceRecord>> list_devices() const;
  // Devices whose uuid equals `query` or starts with it, or whose name starts
  // with it (case-insensitive): for `--gpu`. Empty query lists all.
  std::vector<Entry<DeviceRecord>> find_devices(const std::string& query) const;
  std::vector<Entry<BuildRecord>> list_builds() const;
  std::vector<Entry<ProblemRecord>> list_problems(const std::string& family = "") const;
  std::vector<Entry<VariantRecord>> list_variants(const std::string& family = "") const;
  std::vector<Entry<RunRecord>> list_runs() const;  // newest first

  // Runs. begin_run fills uid and started_at when empty and stores the status
  // given (normally "running"). finish_run sets status and finished_at = now.
  Id begin_run(const RunRecord& r);
  void finish_run(Id run_id, const std::string& status);

  // Resume bookkeeping. mark_running stores a "running" result row for the
  // variant before it starts (replacing an earlier "running" row of the same
  // run/device/build/problem/variant/seed); record_result later replaces it.
  // After a crash, running_variants() reports the rows still "running" and
  // mark_crashed() turns one into a "crashed" result with the reason.
  Id mark_running(Id run_id, Id device_id, Id build_id, Id problem_id, Id variant_id,
                  int64_t seed);
  // Latest result row per variant for (device, build, problem, seed), any run.
  std::vector<VariantState> variant_states(Id device_id, Id build_id, Id problem_id,
                                           int64_t seed) const;
  // Those of variant_states() whose status is final (not "running").
  std::vector<VariantState> finished_variants(Id device_id, Id build_id, Id problem_id,
                                              int64_t seed) const;
  // Those still "running" (a crash or kill happened while they ran).
  std::vector<VariantState> running_variants(Id device_id, Id build_id, Id problem_id,
                                             int64_t seed) const;
  void mark_crashed(Id result_id, const std::string& reason);

  // Stores one result with its correctness, determinism and timing, atomically.
  // Replaces a "running" row with the same (run, device, build, problem,
  // variant, seed); throws db::Error if a final result with that key exists.
  Id record_result(const ResultRecord& r);

  StoredResult result(Id result_id) const;
  std::vector<StoredResult> run_results(Id run_id) const;  // in id order

  // Fastest result for (device, problem): status ok, correctness pass,
  // determinism run_to_run observed and promised by the variant's design
  // (any level, or none checked, when allow_nondeterministic). Ties: lower median, then lower result id.
  // `build_id` restricts it to one build; otherwise any build (BestResult says
  // which one produced it).
  std::optional<BestResult> best(Id device_id, Id problem_id, bool allow_nondeterministic,
                                 std::optional<Id> build_id = std::nullopt) const;

  // When `p` itself was never tuned on the device: the problem of the same
  // family and options_key, with the same shape dimension names, that has a
  // best() result on the device and the smallest shape_distance() to p.shape
  // (ties: smaller key). `p` need not be in the store. nullopt when none.
  std::optional<NearestMatch> nearest_tuned(Id device_id, const ProblemRecord& p,
                                            bool allow_nondeterministic,
                                            std::optional<Id> build_id = std::nullopt) const;

  // Digests stored for (device, build, variant, problem, seed): the latest
  // result of that key that has a determinism check. For `verify`.
  std::optional<StoredDigests> stored_digests(Id device_id, Id build_id, Id variant_id,
                                              Id problem_id, int64_t seed) const;
  // The same for every variant of (device, build, problem, seed) that has one,
  // for config-invariance classes.
  std::vector<StoredDigests> problem_digests(Id device_id, Id build_id, Id problem_id,
                                             int64_t seed) const;

  // One CSV file per table (<table>.csv: header row, RFC 4180 quoting, NULL as
  // an empty field, reals in shortest round-trip form). Creates `dir`.
  // Returns the files written.
  std::vector<std::filesystem::path> export_csv(const std::filesystem::path& dir) const;

  // Imports everything of another detfuse database, matching devices, builds,
  // problems, variants and runs by natural key, results by (device, build,
  // problem key, variant name, seed, run uid). Rows already present are skipped,
  // so merging twice adds nothing. "running" markers are not imported. Refuses
  // a foreign, corrupted or newer file like the constructor. One transaction.
  MergeCounts merge(const std::filesystem::path& other_path);

  // PRAGMA quick_check; throws db::Error if the file is damaged.
  void check_integrity() const;

  struct Impl;  // implementation detail (db/store.cpp)

 private:
  friend class Transaction;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detfuse::db
