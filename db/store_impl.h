// Internal to db/: Store::Impl (the connection, the statement cache, the
// transaction depth) and the helpers the store_*.cpp files share. The store is
// split along its seams:
//
//   store_open.cpp     paths, opening (read-write, read-only), validation,
//                      migrations, Transaction, lifetime, integrity
//   store_lookups.cpp  devices, builds, problems, variants (natural keys)
//   store_runs.cpp     runs, ownership and heartbeats, resume bookkeeping
//   store_results.cpp  validating, inserting and reading results
//   store_queries.cpp  best, nearest_tuned, digests
//   store_export.cpp   CSV export
//   store_merge.cpp    merge, merge_into
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "db/sqlite_stmt.h"
#include "db/store.h"

namespace detfuse::db {

struct Store::Impl {
  std::filesystem::path path;
  std::string file;  // path as text, for messages
  OpenOptions opts;
  sqlite3* db = nullptr;
  int version = 0;       // the schema this connection presents (kSchemaVersion)
  int file_version = 0;  // user_version of the file when opened
  int tx_depth = 0;
  // Read-only opens in a writable directory: SQLite creates FILE-wal and
  // FILE-shm for a WAL file and a read-only connection cannot remove them.
  // When neither existed before the open, the destructor removes them the way
  // SQLite does (tidy_sidecars in store_open.cpp).
  bool tidy_sidecars = false;
  // Prepared statements by SQL text. Caching is not an observable change, so
  // the cache is mutable and const queries use it directly.
  mutable std::unordered_map<std::string, std::unique_ptr<detail::Stmt>> cache;

  ~Impl();

  [[noreturn]] void fail(const std::string& what, Error::Kind kind = Error::Kind::runtime) const {
    throw Error("detfuse db '" + file + "': " + what, kind);
  }
  [[noreturn]] void bad_input(const std::string& what) const { fail(what, Error::Kind::invalid_argument); }

  // A cached prepared statement; use it through detail::StmtUse.
  detail::Stmt& stmt(const std::string& sql) const {
    auto it = cache.find(sql);
    if (it == cache.end()) it = cache.emplace(sql, std::make_unique<detail::Stmt>(db, file, sql)).first;
    return *it->second;
  }

  // One-off statements (DDL, pragmas, BEGIN/COMMIT): not cached.
  void exec(const std::string& sql, const std::string& what) const;
  int64_t pragma_int(const char* name) const;

  // The id of the row that `sql` (SELECT id ... WHERE col=?1) finds for `key`.
  std::optional<Id> find_id(const std::string& sql, const std::string& key) const {
    detail::StmtUse s(stmt(sql));
    s->bind(1, key);
    if (s->step()) return s->i64(0);
    return std::nullopt;
  }

  int64_t changes() const { return sqlite3_changes64(db); }
  int64_t last_id() const { return sqlite3_last_insert_rowid(db); }

  // Opening (store_open.cpp).
  void open();
  void open_connection(const std::string& name, int flags);
  void check_and_migrate();
  void set_wal();
  void migrate_locked(bool fresh, int from);
  void migrate_read_only_copy(int from);
};

namespace detail {

// The one find-or-insert of the store. A lookup that finds the row takes no
// write lock (the common case); otherwise, under the write lock (a
// Transaction), look again (another writer may have added it meanwhile) and
// insert only when still absent.
template <class Find, class Insert>
Id find_or_insert(Store& store, Find&& find, Insert&& insert) {
  if (std::optional<Id> id = find()) return *id;
  Transaction tx(store);
  if (std::optional<Id> id = find()) {
    tx.commit();
    return *id;
  }
  const Id id = insert();
  tx.commit();
  return id;
}

// Row readers and their column lists (shared by lookups, runs and merge).
extern const char* const kDeviceCols;
DeviceRecord read_device(Stmt& s, int first_col);
extern const char* const kVariantCols;
VariantRecord read_variant(Stmt& s, int first_col);
extern const char* const kRunCols;
RunRecord read_run(Stmt& s, int first_col);

// Inserts a run row as given (no defaults filled); returns its id.
Id insert_run(const Store::Impl& im, const RunRecord& r);

// The result row with this (run, device, build, problem, variant, seed) key:
// its id, status and crash_presumed flag.
struct ResultKeyRow {
  Id id = 0;
  std::string status;
  bool crash_presumed = false;
  // A row the owner may overwrite: its "running" marker, or a crash another
  // process presumed (mark_crashed).
  bool replaceable() const;
};
std::optional<ResultKeyRow> find_result_row(const Store::Impl& im, Id run, Id dev, Id build, Id prob,
                                            Id var, int64_t seed);
void delete_result(const Store::Impl& im, Id result_id);
// Inserts the result and its children; no checks for an existing row.
Id insert_result(const Store::Impl& im, const ResultRecord& r);

// The v6 check columns run_to_run, sm_count, config, portable, level_notes
// read from `col` on.
inline LevelChecks read_checks(const Stmt& s, int col) {
  LevelChecks c;
  c.run_to_run = s.text(col);
  c.sm_count = s.text(col + 1);
  c.config = s.text(col + 2);
  c.portable = s.text(col + 3);
  c.notes = s.text(col + 4);
  return c;
}

bool valid_run_status(const std::string& s);
std::string lower(std::string s);
// Seconds from an ISO UTC timestamp (now_utc() format) to now; NaN if empty
// or unparseable.
double seconds_since(const std::string& iso_utc);

}  // namespace detail
}  // namespace detfuse::db
