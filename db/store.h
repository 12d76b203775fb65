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
#include "kernels/common/error.h"

namespace detfuse::db {

// Every store failure throws detfuse::Error (kernels/common/error.h, plain
// C++). kind() says whether the caller's input is at fault (a bad path: empty,
// a directory, a missing parent, a read-only file or directory for a write, a
// missing file; a file that is not a detfuse database or is newer than this
// build) or the run time (SQLite I/O, a busy timeout, a damaged file, a broken
// invariant). The CLI maps them to exit codes 2 and 1.
using Error = ::detfuse::Error;

// Schema version this build writes (PRAGMA user_version) and the application id
// (PRAGMA application_id) that marks a detfuse database.
inline constexpr int kSchemaVersion = 7;
inline constexpr int32_t kApplicationId = 0x64667573;  // "dfus"

inline constexpr const char* kDefaultPath = "detfuse.db";

struct OpenOptions {
  bool create = true;      // create the file (and schema) when it does not exist
  // Never writes the file nor creates one: SQLITE_OPEN_READONLY, no PRAGMA
  // writes (application_id, journal_mode), works on a read-only file and in a
  // read-only directory (db/README.md, "Read-only opens"). A file with an
  // older schema is copied into memory and migrated there; the file is not
  // touched. Write methods throw.
  bool read_only = false;
  int busy_timeout_ms = 10000;
  // Run PRAGMA integrity_check (the full one) on the file when opening it,
  // before anything else reads it; merge sources are opened so.
  bool integrity_check = false;
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
// `db merge` (documented at its definition below).
MergeCounts merge_into(const std::filesystem::path& target, const std::filesystem::path& source,
                       OpenOptions target_opts = {});

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
  // Path errors (empty, a directory, a missing parent directory, a missing
  // file with create=false or read_only, a read-only file or directory for a
  // read-write open) throw Error{invalid_argument} naming the path before
  // anything on disk changes.
  explicit Store(const std::filesystem::path& path = kDefaultPath, OpenOptions opts = {});
  // The explicit read-only open for commands that only read (best, db export,
  // verify without storing, summaries): OpenOptions{create=false,
  // read_only=true}.
  static Store open_read_only(const std::filesystem::path& path, int busy_timeout_ms = 10000);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;

  const std::filesystem::path& path() const;
  int schema_version() const;       // the schema this Store works with: kSchemaVersion
  int file_schema_version() const;  // the file's user_version when opened (older when a
                                    // read-only open migrated a copy in memory)
  bool read_only() const;

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
  // Studies (schema v4). find_or_create_study: by name; a study found whose
  // kind differs throws (axes: first facts win); fills created_at when empty.
  Id find_or_create_study(const StudyRecord& s);
  std::vector<Entry<StudyRecord>> list_studies() const;  // in id order

  // Runs. begin_run fills uid and started_at when empty, stores the status
  // given (normally "running") and the owner (r.owner: host, pid, process start
  // time), and sets heartbeat_at = started_at for a running run.
  // finish_run sets status, finished_at = now and end_reason; the owner calls
  // it, and it overrides a crashed/abandoned mark that another process wrote
  // meanwhile (the owner was alive after all).
  Id begin_run(const RunRecord& r);
  void finish_run(Id run_id, const std::string& status, const std::string& reason = "");

  // Liveness (schema v3). The store gives data and compare-and-set updates;
  // whether an owner is gone (pid alive? heartbeat too old?) is the caller's
  // policy.
  //
  // heartbeat: heartbeat_at = now, in its own short transaction (BEGIN
  // IMMEDIATE, one UPDATE, one SELECT). Returns the run's status: "running",
  // or crashed/abandoned when another process marked the run meanwhile (the
  // owner may then finish_run or stop). Throws if there is no such run.
  std::string heartbeat(Id run_id);
  // Runs whose status is still "running", newest first, with owner, heartbeat
  // and heartbeat age on this host's clock.
  std::vector<UnfinishedRun> unfinished_runs() const;
  // The caller decided the owner is gone. crashed: only a "running" run;
  // abandoned: any run not complete and not already abandoned (running,
  // budget, interrupted, failed, crashed). Sets status, end_reason = reason,
  // finished_at = now (running only). When seen_heartbeat is given, the change
  // happens only while the run's heartbeat_at still equals it (compare and
  // set: a heartbeat written since proves the owner alive). Returns true when
  // the run was changed, false when it was not (status or heartbeat moved).
  // Throws if there is no such run or the reason is empty.
  bool mark_run_crashed(Id run_id, const std::string& reason,
                        const std::optional<std::string>& seen_heartbeat = std::nullopt);
  bool mark_run_abandoned(Id run_id, const std::string& reason,
                          const std::optional<std::string>& seen_heartbeat = std::nullopt);

  // Resume bookkeeping. mark_running stores a "running" result row for the
  // variant before it starts (replacing an earlier "running" row, or a
  // presumed crash, of the same run/device/build/problem/variant/seed);
  // record_result later replaces it. After a crash, running_variants()
  // reports the rows still "running" and mark_crashed() turns one into a
  // presumed "crashed" result with the reason.
  Id mark_running(Id run_id, Id device_id, Id build_id, Id problem_id, Id variant_id,
                  int64_t seed);
  // Latest result row per variant for (device, build, problem, seed), any run.
  std::vector<VariantState> variant_states(Id device_id, Id build_id, Id problem_id,
                                           int64_t seed) const;
  // Those of variant_states() whose status is final (not "running").
  std::vector<VariantState> finished_variants(Id device_id, Id build_id, Id problem_id,
                                              int64_t seed) const;
  // Those still "running" (their owner may be alive: look at run_status,
  // owner and heartbeat_at before calling mark_crashed).
  std::vector<VariantState> running_variants(Id device_id, Id build_id, Id problem_id,
                                             int64_t seed) const;
  // Those whose latest row is "crashed" (recorded or presumed), for
  // --retry-crashed: a later run may record a new result for the variant (a
  // new row in that run; the crashed row stays as history, and being older it
  // no longer is the variant's latest state).
  std::vector<VariantState> crashed_variants(Id device_id, Id build_id, Id problem_id,
                                             int64_t seed) const;
  // The ONLY way a "running" row becomes "crashed" without its owner: the
  // caller decided the owner is gone. Marks the row presumed-crashed with the
  // reason, only while it is still "running" and (when seen_heartbeat is
  // given) while its run's heartbeat_at still equals seen_heartbeat. Returns
  // true when marked, false when nothing changed (the row is no longer
  // running, or the heartbeat moved). Throws if there is no such result.
  bool mark_crashed(Id result_id, const std::string& reason,
                    const std::optional<std::string>& seen_heartbeat = std::nullopt);

  // Stores one result with its correctness, determinism and timing, atomically.
  // Replaces a "running" row or a presumed crash (mark_crashed by another
  // process: the owner's real measurement wins) with the same (run, device,
  // build, problem, variant, seed); throws db::Error if a final result with
  // that key exists (a result the owner recorded, crashed included).
  Id record_result(const ResultRecord& r);

  // Schema v6: stores the outcome of the level checks shown after the result
  // was recorded (config, across the variants of one tune or verify call;
  // sm_count and portable from verify --levels) and re-derives its level.
  // run_to_run must equal the stored one (the result's own repeats showed
  // it). Throws db::Error (invalid_argument) for a result without a
  // determinism check or an outcome that is not shown/failed/not_checked.
  void set_level_checks(Id result_id, const LevelChecks& checks);

  StoredResult result(Id result_id) const;
  std::vector<StoredResult> run_results(Id run_id) const;  // in id order

  // Fastest result for (device, problem): status ok, correctness pass,
  // determinism run_to_run observed and promised by the variant's design
  // (any level, or none checked, when allow_nondeterministic). Ties: lower median, then lower result id.
  // `build_id` restricts it to one build; otherwise any build (BestResult says
  // which one produced it).
  //
  // `level` (v6; "" = the rule above): the result must HAVE that level (its
  // check and run_to_run shown, records.h) and its variant be deterministic
  // by design; "none" = allow_nondeterministic. An unknown level name throws
  // db::Error (invalid_argument).
  std::optional<BestResult> best(Id device_id, Id problem_id, bool allow_nondeterministic,
                                 std::optional<Id> build_id = std::nullopt, const std::string& level = "") const;

  // When `p` itself was never tuned on the device: the problem of the same
  // family and options_key, with the same shape dimension names, that has a
  // best() result on the device and the smallest shape_distance() to p.shape
  // (ties: smaller key). `p` need not be in the store. nullopt when none.
  std::optional<NearestMatch> nearest_tuned(Id device_id, const ProblemRecord& p,
                                            bool allow_nondeterministic,
                                            std::optional<Id> build_id = std::nullopt,
                                            const std::string& level = "") const;

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
  // so merging twice adds nothing. "running" markers are not imported. The
  // other file is validated fully first (opened read-only: detfuse store,
  // schema readable, PRAGMA integrity_check ok); an older one is migrated in
  // memory (v2 names get their engine token). One transaction.
  // To avoid creating the target before the source is known good, use
  // merge_into() below.
  MergeCounts merge(const std::filesystem::path& other_path);

  // PRAGMA quick_check; throws db::Error if the file is damaged.
  void check_integrity() const;

  struct Impl;  // implementation detail (db/store_impl.h)

 private:
  friend class Transaction;
  friend MergeCounts merge_into(const std::filesystem::path&, const std::filesystem::path&, OpenOptions);
  MergeCounts merge_from(const Store& other);  // other: validated, open read-only
  std::unique_ptr<Impl> impl_;
};

// `db merge`: validates `source` fully (as Store::merge) BEFORE the target is
// created or opened, checks the target path for writing, then merges in one
// transaction. On any failure nothing is left behind: a target this call
// created is removed (with its -wal/-shm); an existing target is unchanged.
MergeCounts merge_into(const std::filesystem::path& target, const std::filesystem::path& source,
                       OpenOptions target_opts);

}  // namespace detfuse::db
