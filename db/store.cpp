// The detfuse results store over SQLite. Layout of this file: opening and
// validating a file, migrations, transactions, natural-key lookups, runs and
// resume bookkeeping, results, the selection queries, export and merge.
#include "db/store.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include <unordered_map>

#include "db/schema.h"
#include "db/sqlite_stmt.h"

namespace detfuse::db {

using detail::Stmt;
using detail::StmtUse;

namespace {

constexpr char kSqliteMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f',
                                   'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};

bool valid_result_status(const std::string& s) {
  return s == kResultOk || s == kResultCannotRun || s == kResultError || s == kResultCrashed ||
         s == kResultIncorrect;
}

bool valid_run_status(const std::string& s) {
  return s == kRunRunning || s == kRunComplete || s == kRunBudget || s == kRunInterrupted ||
         s == kRunFailed;
}

bool is_hex32(const std::string& s) {
  if (s.size() != 32) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------
// Impl: the connection, the statement cache, the transaction depth.

struct Store::Impl {
  std::filesystem::path path;
  std::string file;  // path as text, for messages
  OpenOptions opts;
  sqlite3* db = nullptr;
  int version = 0;
  int tx_depth = 0;
  std::unordered_map<std::string, std::unique_ptr<Stmt>> cache;

  ~Impl() {
    cache.clear();  // finalize statements before closing
    if (db) sqlite3_close_v2(db);
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("detfuse db '" + file + "': " + what);
  }

  // A cached prepared statement, reset for use.
  Stmt& stmt(const std::string& sql) {
    auto it = cache.find(sql);
    if (it == cache.end()) it = cache.emplace(sql, std::make_unique<Stmt>(db, file, sql)).first;
    return *it->second;
  }

  // One-off statements (DDL, pragmas): not cached.
  void exec(const std::string& sql, const std::string& what) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      std::string m = err ? err : sqlite3_errstr(rc);
      sqlite3_free(err);
      throw Error("detfuse db '" + file + "': " + what + ": " + m + " (" + sqlite3_errstr(rc) + ")");
    }
  }

  int64_t pragma_int(const char* name) {
    Stmt s(db, file, std::string("PRAGMA ") + name);
    if (!s.step()) fail(std::string("PRAGMA ") + name + " returned nothing");
    return s.i64(0);
  }

  int64_t changes() const { return sqlite3_changes64(db); }
  int64_t last_id() const { return sqlite3_last_insert_rowid(db); }

  void open();
  void check_and_migrate();
  void set_wal();
  void migrate_locked(bool fresh, int from);
};

// Reads the first 100 bytes without SQLite: a non-SQLite file is refused before
// SQLite ever opens it.
static void check_header(const std::filesystem::path& p, const std::string& file) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error("detfuse db '" + file + "': cannot read the file");
  char head[100] = {};
  in.read(head, sizeof head);
  const auto got = in.gcount();
  if (got == 0) return;  // empty file: SQLite treats it as a new database
  if (got < 100 || std::memcmp(head, kSqliteMagic, 16) != 0) {
    throw Error("detfuse db '" + file +
                "': not a detfuse database (not an SQLite file: the header is wrong). "
                "The file was not modified.");
  }
}

void Store::Impl::open() {
  file = path.string();
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (!exists) {
    if (!opts.create || opts.read_only) fail("the file does not exist");
    const auto parent = path.parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
      fail("the directory '" + parent.string() + "' does not exist");
    }
  } else {
    if (std::filesystem::is_directory(path, ec)) fail("is a directory, not a database file");
    check_header(path, file);
  }

  int flags = opts.read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  flags |= SQLITE_OPEN_NOMUTEX;  // one Store per thread
  const int rc = sqlite3_open_v2(file.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string m = detail::sqlite_message(db, file, "cannot open", rc);
    sqlite3_close_v2(db);
    db = nullptr;
    throw Error(m);
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, opts.busy_timeout_ms);
  check_and_migrate();
}

void Store::Impl::set_wal() {
  // journal_mode=WAL needs a moment of exclusive access; if another process is
  // creating the same file just now, retry within the busy timeout.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.busy_timeout_ms);
  for (;;) {
    sqlite3_stmt* s = nullptr;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &s, nullptr);
    std::string mode;
    if (rc == SQLITE_OK) {
      rc = sqlite3_step(s);
      if (rc == SQLITE_ROW) {
        mode = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
        rc = SQLITE_OK;
      }
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_OK) {
      if (lower(mode) != "wal") fail("cannot switch to WAL journal mode (got '" + mode + "')");
      return;
    }
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() > deadline) {
      detail::throw_sqlite(db, file, "PRAGMA journal_mode=WAL", rc);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Store::Impl::check_and_migrate() {
  // Read-only probes first: nothing is written to a file we refuse.
  int64_t app = 0, ver = 0, objects = 0;
  try {
    app = pragma_int("application_id");
    ver = pragma_int("user_version");
    Stmt s(db, file, "SELECT count(*) FROM sqlite_master");
    s.step();
    objects = s.i64(0);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + ". The file was not modified.");
  }
  bool fresh = false;
  if (app == kApplicationId) {
    if (ver > kSchemaVersion) {
      fail("schema version " + std::to_string(ver) + " is newer than this build supports (" +
           std::to_string(kSchemaVersion) + "); use a newer detfuse. The file was not modified.");
    }
    if (ver < 1) fail("detfuse application id but schema version " + std::to_string(ver) + ": damaged");
  } else if (app == 0 && ver == 0 && objects == 0) {
    fresh = true;
  } else {
    fail("not a detfuse database (SQLite file with application_id " + std::to_string(app) +
         ", user_version " + std::to_string(ver) + ", " + std::to_string(objects) +
         " schema objects). The file was not modified.");
  }

  if (opts.read_only) {
    if (fresh) fail("an empty file, not a detfuse database (opened read-only)");
    if (ver < kSchemaVersion) {
      fail("schema version " + std::to_string(ver) + " needs migration to " +
           std::to_string(kSchemaVersion) + "; open it read-write once");
    }
    version = int(ver);
    exec("PRAGMA foreign_keys=ON", "PRAGMA foreign_keys");
    return;
  }

  set_wal();
  exec("PRAGMA foreign_keys=ON", "PRAGMA foreign_keys");
  exec("PRAGMA synchronous=NORMAL", "PRAGMA synchronous");
  if (fresh || ver < kSchemaVersion) {
    // Another process may be creating or migrating the same file: take the
    // write lock and look again.
    exec("BEGIN IMMEDIATE", "begin schema transaction");
    try {
      app = pragma_int("application_id");
      ver = pragma_int("user_version");
      if (app == kApplicationId && ver > kSchemaVersion) {
        fail("schema version " + std::to_string(ver) + " is newer than this build supports");
      }
      const bool still_fresh = app != kApplicationId;
      if (still_fresh || ver < kSchemaVersion) migrate_locked(still_fresh, int(ver));
      exec("COMMIT", "commit schema transaction");
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
  version = int(pragma_int("user_version"));
}

void Store::Impl::migrate_locked(bool fresh, int from) {
  if (fresh) {
    exec(schema::v1_ddl(), "create schema v1");
    exec("PRAGMA application_id=" + std::to_string(kApplicationId), "set application_id");
    from = 1;
  }
  for (const auto& m : schema::migrations()) {
    if (m.to_version <= from) continue;
    if (m.to_version != from + 1) fail("migration list has a gap before v" + std::to_string(m.to_version));
    exec(m.sql, std::string("migration to v") + std::to_string(m.to_version) + " (" + m.what + ")");
    from = m.to_version;
  }
  if (from != kSchemaVersion) fail("no migration reaches schema v" + std::to_string(kSchemaVersion));
  exec("PRAGMA user_version=" + std::to_string(from), "set user_version");
}

// ---------------------------------------------------------------------------
// Transaction

Transaction::Transaction(Store& store) : store_(store), depth_(store.impl_->tx_depth) {
  auto& im = *store_.impl_;
  if (depth_ == 0) {
    im.exec("BEGIN IMMEDIATE", "begin transaction");
  } else {
    im.exec("SAVEPOINT detfuse_sp" + std::to_string(depth_), "savepoint");
  }
  ++im.tx_depth;
}

Transaction::~Transaction() {
  if (done_) return;
  try {
    rollback();
  } catch (...) {
    // A destructor must not throw; a failed rollback leaves SQLite to roll the
    // transaction back when the connection closes.
  }
}

void Transaction::commit() {
  auto& im = *store_.impl_;
  if (done_) im.fail("Transaction::commit after commit or rollback");
  if (im.tx_depth != depth_ + 1) im.fail("Transaction::commit out of order (nested transaction still open)");
  if (depth_ == 0) {
    im.exec("COMMIT", "commit");
  } else {
    im.exec("RELEASE detfuse_sp" + std::to_string(depth_), "release savepoint");
  }
  --im.tx_depth;
  done_ = true;
}

void Transaction::rollback() {
  auto& im = *store_.impl_;
  if (done_) return;
  done_ = true;
  --im.tx_depth;
  if (depth_ == 0) {
    if (!sqlite3_get_autocommit(im.db)) im.exec("ROLLBACK", "rollback");
  } else {
    const std::string sp = "detfuse_sp" + std::to_string(depth_);
    im.exec("ROLLBACK TO " + sp + "; RELEASE " + sp, "rollback to savepoint");
  }
}

// ---------------------------------------------------------------------------
// Store: lifetime

Store::Store(const std::filesystem::path& path, OpenOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->opts = opts;
  impl_->open();
}

Store::~Store() = default;
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

const std::filesystem::path& Store::path() const { return impl_->path; }
int Store::schema_version() const { return impl_->version; }

void Store::check_integrity() const {
  Stmt s(impl_->db, impl_->file, "PRAGMA quick_check");
  std::string problems;
  while (s.step()) {
    const std::string line = s.text(0);
    if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
  }
  if (!problems.empty()) impl_->fail("integrity check failed: " + problems);
}

// ---------------------------------------------------------------------------
// Devices, builds, problems, variants

static DeviceRecord read_device(Stmt& s, int c) {
  DeviceRecord d;
  d.uuid = s.text(c + 0);
  d.name = s.text(c + 1);
  d.cc = s.text(c + 2);
  d.sm_count = s.i32(c + 3);
  d.total_memory_bytes = s.i64(c + 4);
  d.l2_bytes = s.i64(c + 5);
  d.driver_version = s.i32(c + 6);
  d.driver_release = s.text(c + 7);
  d.runtime_version = s.i32(c + 8);
  return d;
}
static constexpr const char* kDeviceCols =
    "uuid, name, cc, sm_count, total_memory_bytes, l2_bytes, driver_version, driver_release, "
    "runtime_version";

std::optional<Id> Store::find_device(const DeviceRecord& d) const {
  StmtUse s(impl_->stmt(
      "SELECT id FROM devices WHERE uuid=?1 AND name=?2 AND cc=?3 AND sm_count=?4 AND "
      "driver_version=?5 AND driver_release=?6"));
  s->bind(1, d.uuid);
  s->bind(2, d.name);
  s->bind(3, d.cc);
  s->bind(4, d.sm_count);
  s->bind(5, d.driver_version);
  s->bind(6, d.driver_release);
  if (s->step()) return s->i64(0);
  return std::nullopt;
}

Id Store::find_or_create_device(const DeviceRecord& d) {
  if (d.uuid.empty() && d.name.empty()) impl_->fail("device record has neither uuid nor name");
  if (auto id = find_device(d)) return *id;  // no write lock for the common case
  Transaction tx(*this);  // look again under the write lock: another writer may have added it
  if (auto id = find_device(d)) {
    tx.commit();
    return *id;
  }
  StmtUse s(impl_->stmt(
      "INSERT INTO devices (uuid, name, cc, sm_count, total_memory_bytes, l2_bytes, driver_version, "
      "driver_release, runtime_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
  s->bind(1, d.uuid);
  s->bind(2, d.name);
  s->bind(3, d.cc);
  s->bind(4, d.sm_count);
  s->bind(5, d.total_memory_bytes);
  s->bind(6, d.l2_bytes);
  s->bind(7, d.driver_version);
  s->bind(8, d.driver_release);
  s->bind(9, d.runtime_version);
  s->run();
  const Id id = impl_->last_id();
  tx.commit();
  return id;
}

DeviceRecord Store::device(Id id) const {
  StmtUse s(impl_->stmt(std::string("SELECT ") + kDeviceCols + " FROM devices WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no device with id " + std::to_string(id));
  return read_device(*s, 0);
}

std::vector<Entry<DeviceRecord>> Store::list_devices() const {
  StmtUse s(impl_->stmt(std::string("SELECT id, ") + kDeviceCols + " FROM devices ORDER BY id"));
  std::vector<Entry<DeviceRecord>> out;
  while (s->step()) out.push_back({s->i64(0), read_device(*s, 1)});
  return out;
}

std::vector<Entry<DeviceRecord>> Store::find_devices(const std::string& query) const {
  auto all = list_devices();
  if (query.empty()) return all;
  const std::string q = lower(query);
  std::vector<Entry<DeviceRecord>> out;
  for (auto& e : all) {
    const std::string uuid = lower(e.record.uuid), name = lower(e.record.name);
    if (uuid.rfind(q, 0) == 0 || name.rfind(q, 0) == 0 ||
        (uuid.rfind("gpu-", 0) == 0 && uuid.compare(4, q.size(), q) == 0)) {
      out.push_back(std::move(e));
    }
  }
  return out;
}

std::optional<Id> Store::find_build(const BuildRecord& b) const {
  StmtUse s(impl_->stmt(
      "SELECT id FROM builds WHERE version=?1 AND git_commit=?2 AND compiler=?3 AND flags=?4 AND "
      "build_type=?5"));
  s->bind(1, b.version);
  s->bind(2, b.git_commit);
  s->bind(3, b.compiler);
  s->bind(4, b.flags);
  s->bind(5, b.build_type);
  if (s->step()) return s->i64(0);
  return std::nullopt;
}

Id Store::find_or_create_build(const BuildRecord& b) {
  if (auto id = find_build(b)) return *id;
  Transaction tx(*this);
  if (auto id = find_build(b)) {
    tx.commit();
    return *id;
  }
  StmtUse s(impl_->stmt(
      "INSERT INTO builds (version, git_commit, compiler, flags, build_type) VALUES (?1, ?2, ?3, ?4, ?5)"));
  s->bind(1, b.version);
  s->bind(2, b.git_commit);
  s->bind(3, b.compiler);
  s->bind(4, b.flags);
  s->bind(5, b.build_type);
  s->run();
  const Id id = impl_->last_id();
  tx.commit();
  return id;
}

BuildRecord Store::build(Id id) const {
  StmtUse s(impl_->stmt(
      "SELECT version, git_commit, compiler, flags, build_type FROM builds WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no build with id " + std::to_string(id));
  return {s->text(0), s->text(1), s->text(2), s->text(3), s->text(4)};
}

std::vector<Entry<BuildRecord>> Store::list_builds() const {
  StmtUse s(impl_->stmt(
      "SELECT id, version, git_commit, compiler, flags, build_type FROM builds ORDER BY id"));
  std::vector<Entry<BuildRecord>> out;
  while (s->step()) out.push_back({s->i64(0), {s->text(1), s->text(2), s->text(3), s->text(4), s->text(5)}});
  return out;
}

std::optional<Id> Store::find_problem(const std::string& key) const {
  StmtUse s(impl_->stmt("SELECT id FROM problems WHERE key=?1"));
  s->bind(1, key);
  if (s->step()) return s->i64(0);
  return std::nullopt;
}

ProblemRecord Store::problem(Id id) const {
  ProblemRecord p;
  {
    StmtUse s(impl_->stmt("SELECT family, key, dtype, options_key FROM problems WHERE id=?1"));
    s->bind(1, id);
    if (!s->step()) impl_->fail("no problem with id " + std::to_string(id));
    p.family = s->text(0);
    p.key = s->text(1);
    p.dtype = s->text(2);
    p.options_key = s->text(3);
  }
  StmtUse s(impl_->stmt("SELECT dim, value FROM problem_dims WHERE problem_id=?1"));
  s->bind(1, id);
  while (s->step()) p.shape.emplace(s->text(0), s->i64(1));
  return p;
}

Id Store::find_or_create_problem(const ProblemRecord& p) {
  if (p.key.empty() || p.family.empty()) impl_->fail("problem record needs a family and a key");
  for (const auto& [dim, v] : p.shape) {
    if (v <= 0) impl_->fail("problem '" + p.key + "': shape dim " + dim + " must be > 0");
  }
  auto existing = [&]() -> std::optional<Id> {
    auto id = find_problem(p.key);
    if (!id) return std::nullopt;
    const ProblemRecord have = problem(*id);
    if (have.family != p.family || have.dtype != p.dtype || have.options_key != p.options_key ||
        have.shape != p.shape) {
      impl_->fail("problem '" + p.key +
                  "' is stored with a different family, dtype, options_key or shape");
    }
    return id;
  };
  if (auto id = existing()) return *id;
  Transaction tx(*this);
  if (auto id = existing()) {
    tx.commit();
    return *id;
  }
  {
    StmtUse s(impl_->stmt(
        "INSERT INTO problems (family, key, dtype, options_key) VALUES (?1, ?2, ?3, ?4)"));
    s->bind(1, p.family);
    s->bind(2, p.key);
    s->bind(3, p.dtype);
    s->bind(4, p.options_key);
    s->run();
  }
  const Id id = impl_->last_id();
  for (const auto& [dim, v] : p.shape) {
    StmtUse s(impl_->stmt("INSERT INTO problem_dims (problem_id, dim, value) VALUES (?1, ?2, ?3)"));
    s->bind(1, id);
    s->bind(2, dim);
    s->bind(3, v);
    s->run();
  }
  tx.commit();
  return id;
}

std::vector<Entry<ProblemRecord>> Store::list_problems(const std::string& family) const {
  std::vector<Id> ids;
  {
    StmtUse s(impl_->stmt("SELECT id FROM problems WHERE ?1 = '' OR family = ?1 ORDER BY id"));
    s->bind(1, family);
    while (s->step()) ids.push_back(s->i64(0));
  }
  std::vector<Entry<ProblemRecord>> out;
  for (Id id : ids) out.push_back({id, problem(id)});
  return out;
}

std::optional<Id> Store::find_variant(const std::string& name) const {
  StmtUse s(impl_->stmt("SELECT id FROM variants WHERE name=?1"));
  s->bind(1, name);
  if (s->step()) return s->i64(0);
  return std::nullopt;
}

static VariantRecord read_variant(Stmt& s, int c) {
  VariantRecord v;
  v.name = s.text(c);
  v.family = s.text(c + 1);
  v.strategy = s.text(c + 2);
  v.dtype = s.text(c + 3);
  v.params = s.text(c + 4);
  v.deterministic_by_design = s.i64(c + 5) != 0;
  return v;
}

VariantRecord Store::variant(Id id) const {
  StmtUse s(impl_->stmt(
      "SELECT name, family, strategy, dtype, params, deterministic_by_design FROM variants WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no variant with id " + std::to_string(id));
  return read_variant(*s, 0);
}

Id Store::find_or_create_variant(const VariantRecord& v) {
  if (v.name.empty()) impl_->fail("variant record has no name");
  auto existing = [&]() -> std::optional<Id> {
    auto id = find_variant(v.name);
    if (!id) return std::nullopt;
    const VariantRecord have = variant(*id);
    if (have.family != v.family || have.strategy != v.strategy || have.dtype != v.dtype) {
      impl_->fail("variant '" + v.name + "' is stored with a different family, strategy or dtype");
    }
    return id;
  };
  if (auto id = existing()) return *id;
  Transaction tx(*this);
  if (auto id = existing()) {
    tx.commit();
    return *id;
  }
  StmtUse s(impl_->stmt(
      "INSERT INTO variants (name, family, strategy, dtype, params, deterministic_by_design) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
  s->bind(1, v.name);
  s->bind(2, v.family);
  s->bind(3, v.strategy);
  s->bind(4, v.dtype);
  s->bind(5, v.params);
  s->bind(6, v.deterministic_by_design);
  s->run();
  const Id id = impl_->last_id();
  tx.commit();
  return id;
}

std::vector<Entry<VariantRecord>> Store::list_variants(const std::string& family) const {
  StmtUse s(impl_->stmt(
      "SELECT id, name, family, strategy, dtype, params, deterministic_by_design FROM variants "
      "WHERE ?1 = '' OR family = ?1 ORDER BY name"));
  s->bind(1, family);
  std::vector<Entry<VariantRecord>> out;
  while (s->step()) out.push_back({s->i64(0), read_variant(*s, 1)});
  return out;
}

// ---------------------------------------------------------------------------
// Runs

static constexpr const char* kRunCols =
    "uid, started_at, finished_at, budget_seconds, status, command_line, repeats, seed, "
    "allow_nondeterministic";

static RunRecord read_run(Stmt& s, int c) {
  RunRecord r;
  r.uid = s.text(c);
  r.started_at = s.text(c + 1);
  r.finished_at = s.text(c + 2);
  r.budget_seconds = s.f64(c + 3);
  r.status = s.text(c + 4);
  r.command_line = s.text(c + 5);
  r.repeats = s.i32(c + 6);
  r.seed = s.i64(c + 7);
  r.allow_nondeterministic = s.i64(c + 8) != 0;
  return r;
}

Id Store::begin_run(const RunRecord& in) {
  RunRecord r = in;
  if (r.uid.empty()) r.uid = new_uid();
  if (r.started_at.empty()) r.started_at = now_utc();
  if (!valid_run_status(r.status)) impl_->fail("run status '" + r.status + "' is not a run status");
  if (!std::isfinite(r.budget_seconds) || r.budget_seconds < 0) impl_->fail("run budget_seconds must be >= 0");
  Transaction tx(*this);
  StmtUse s(impl_->stmt(std::string("INSERT INTO runs (") + kRunCols +
                        ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
  s->bind(1, r.uid);
  s->bind(2, r.started_at);
  s->bind(3, r.finished_at);
  s->bind(4, r.budget_seconds);
  s->bind(5, r.status);
  s->bind(6, r.command_line);
  s->bind(7, r.repeats);
  s->bind(8, r.seed);
  s->bind(9, r.allow_nondeterministic);
  s->run();
  const Id id = impl_->last_id();
  tx.commit();
  return id;
}

void Store::finish_run(Id run_id, const std::string& status) {
  if (!valid_run_status(status) || status == kRunRunning) {
    impl_->fail("finish_run: '" + status + "' is not a final run status");
  }
  Transaction tx(*this);
  StmtUse s(impl_->stmt("UPDATE runs SET status=?2, finished_at=?3 WHERE id=?1"));
  s->bind(1, run_id);
  s->bind(2, status);
  s->bind(3, now_utc());
  s->run();
  if (impl_->changes() != 1) impl_->fail("finish_run: no run with id " + std::to_string(run_id));
  tx.commit();
}

RunRecord Store::run(Id id) const {
  StmtUse s(impl_->stmt(std::string("SELECT ") + kRunCols + " FROM runs WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no run with id " + std::to_string(id));
  return read_run(*s, 0);
}

std::vector<Entry<RunRecord>> Store::list_runs() const {
  StmtUse s(impl_->stmt(std::string("SELECT id, ") + kRunCols +
                        " FROM runs ORDER BY started_at DESC, id DESC"));
  std::vector<Entry<RunRecord>> out;
  while (s->step()) out.push_back({s->i64(0), read_run(*s, 1)});
  return out;
}

// ---------------------------------------------------------------------------
// Resume bookkeeping

static std::optional<std::pair<Id, std::string>> find_result_row(Store::Impl& im, Id run, Id dev,
                                                                 Id build, Id prob, Id var,
                                                                 int64_t seed) {
  StmtUse s(im.stmt(
      "SELECT id, status FROM results WHERE run_id=?1 AND device_id=?2 AND build_id=?3 AND "
      "problem_id=?4 AND variant_id=?5 AND seed=?6"));
  s->bind(1, run);
  s->bind(2, dev);
  s->bind(3, build);
  s->bind(4, prob);
  s->bind(5, var);
  s->bind(6, seed);
  if (s->step()) return std::make_pair(s->i64(0), s->text(1));
  return std::nullopt;
}

static void delete_result(Store::Impl& im, Id id) {
  StmtUse s(im.stmt("DELETE FROM results WHERE id=?1"));  // children cascade
  s->bind(1, id);
  s->run();
}

Id Store::mark_running(Id run_id, Id device_id, Id build_id, Id problem_id, Id variant_id,
                       int64_t seed) {
  Transaction tx(*this);
  if (auto row = find_result_row(*impl_, run_id, device_id, build_id, problem_id, variant_id, seed)) {
    if (row->second != kResultRunning) {
      impl_->fail("mark_running: variant " + variant(variant_id).name +
                  " already has a final result (" + row->second + ") in run " + std::to_string(run_id));
    }
    delete_result(*impl_, row->first);
  }
  StmtUse s(impl_->stmt(
      "INSERT INTO results (run_id, device_id, build_id, problem_id, variant_id, seed, status, "
      "reason, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', '', ?7)"));
  s->bind(1, run_id);
  s->bind(2, device_id);
  s->bind(3, build_id);
  s->bind(4, problem_id);
  s->bind(5, variant_id);
  s->bind(6, seed);
  s->bind(7, now_utc());
  s->run();
  const Id id = impl_->last_id();
  tx.commit();
  return id;
}

std::vector<VariantState> Store::variant_states(Id device_id, Id build_id, Id problem_id,
                                                int64_t seed) const {
  StmtUse s(impl_->stmt(
      "SELECT r.id, r.run_id, r.variant_id, v.name, r.status, r.reason "
      "FROM results r JOIN variants v ON v.id = r.variant_id "
      "WHERE r.device_id=?1 AND r.build_id=?2 AND r.problem_id=?3 AND r.seed=?4 "
      "  AND r.id = (SELECT max(r2.id) FROM results r2 WHERE r2.device_id=r.device_id AND "
      "    r2.build_id=r.build_id AND r2.problem_id=r.problem_id AND r2.seed=r.seed AND "
      "    r2.variant_id=r.variant_id) "
      "ORDER BY v.name"));
  s->bind(1, device_id);
  s->bind(2, build_id);
  s->bind(3, problem_id);
  s->bind(4, seed);
  std::vector<VariantState> out;
  while (s->step()) {
    out.push_back({s->i64(0), s->i64(1), s->i64(2), s->text(3), s->text(4), s->text(5)});
  }
  return out;
}

std::vector<VariantState> Store::finished_variants(Id device_id, Id build_id, Id problem_id,
                                                   int64_t seed) const {
  auto all = variant_states(device_id, build_id, problem_id, seed);
  std::erase_if(all, [](const VariantState& v) { return v.status == kResultRunning; });
  return all;
}

std::vector<VariantState> Store::running_variants(Id device_id, Id build_id, Id problem_id,
                                                  int64_t seed) const {
  auto all = variant_states(device_id, build_id, problem_id, seed);
  std::erase_if(all, [](const VariantState& v) { return v.status != kResultRunning; });
  return all;
}

void Store::mark_crashed(Id result_id, const std::string& reason) {
  Transaction tx(*this);
  StmtUse s(impl_->stmt(
      "UPDATE results SET status='crashed', reason=?2, recorded_at=?3 WHERE id=?1 AND status='running'"));
  s->bind(1, result_id);
  s->bind(2, reason);
  s->bind(3, now_utc());
  s->run();
  if (impl_->changes() != 1) {
    impl_->fail("mark_crashed: result " + std::to_string(result_id) + " is not a 'running' row");
  }
  tx.commit();
}

// ---------------------------------------------------------------------------
// Results

static void validate_result(const Store::Impl& im, const ResultRecord& r) {
  if (!valid_result_status(r.status)) {
    im.fail("record_result: status '" + r.status +
            "' is not one of ok, cannot_run, error, crashed, incorrect");
  }
  if (r.status == kResultOk && !r.correctness) {
    im.fail("record_result: an 'ok' result needs a correctness check");
  }
  if (r.correctness && !std::isfinite(r.correctness->tolerance)) {
    im.fail("record_result: correctness tolerance must be finite");
  }
  if (const auto& d = r.determinism) {
    if (d->level != kLevelNone && d->level != kLevelRunToRun) {
      im.fail("record_result: determinism level '" + d->level + "' is not none or run_to_run");
    }
    std::set<std::pair<int, std::string>> seen;
    std::map<std::string, std::set<std::string>> distinct;
    for (const auto& g : d->digests) {
      if (!is_hex32(g.digest)) {
        im.fail("record_result: digest '" + g.digest + "' of " + g.output +
                " is not 32 lowercase hex digits");
      }
      if (g.repeat < 0 || g.repeat >= d->repeats) {
        im.fail("record_result: digest repeat " + std::to_string(g.repeat) + " outside 0.." +
                std::to_string(d->repeats - 1));
      }
      if (!seen.emplace(g.repeat, g.output).second) {
        im.fail("record_result: two digests for repeat " + std::to_string(g.repeat) + " output " + g.output);
      }
      distinct[g.output].insert(g.digest);
    }
    for (const auto& [out, n] : d->distinct) {
      auto it = distinct.find(out);
      if (it == distinct.end() || int(it->second.size()) != n) {
        im.fail("record_result: distinct count " + std::to_string(n) + " for " + out +
                " disagrees with the digests");
      }
    }
    if (d->level == kLevelRunToRun) {
      for (const auto& [out, set] : distinct) {
        if (set.size() != 1) im.fail("record_result: level run_to_run but " + out + " has several digests");
      }
    }
  }
  if (const auto& t = r.timing) {
    for (double v : t->samples_ms) {
      if (!std::isfinite(v) || v < 0) im.fail("record_result: timing sample is not a finite time");
    }
    for (double v : {t->median_ms, t->min_ms, t->max_ms, t->flops, t->tflops}) {
      if (!std::isfinite(v)) im.fail("record_result: timing summary is not finite");
    }
  }
}

// Inserts the result and its children; no checks for an existing row.
static Id insert_result(Store::Impl& im, const ResultRecord& r) {
  {
    StmtUse s(im.stmt(
        "INSERT INTO results (run_id, device_id, build_id, problem_id, variant_id, seed, status, "
        "reason, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
    s->bind(1, r.run_id);
    s->bind(2, r.device_id);
    s->bind(3, r.build_id);
    s->bind(4, r.problem_id);
    s->bind(5, r.variant_id);
    s->bind(6, r.seed);
    s->bind(7, r.status);
    s->bind(8, r.reason);
    s->bind(9, r.recorded_at.empty() ? now_utc() : r.recorded_at);
    s->run();
  }
  const Id id = im.last_id();
  if (const auto& c = r.correctness) {
    StmtUse s(im.stmt(
        "INSERT INTO correctness (result_id, checked_what, tolerance, pass) VALUES (?1, ?2, ?3, ?4)"));
    s->bind(1, id);
    s->bind(2, c->checked_what);
    s->bind(3, c->tolerance);
    s->bind(4, c->pass);
    s->run();
    for (const auto& [out, err] : c->errors) {
      StmtUse e(im.stmt("INSERT INTO correctness_errors (result_id, output, error) VALUES (?1, ?2, ?3)"));
      e->bind(1, id);
      e->bind(2, out);
      e->bind(3, err);
      e->run();
    }
  }
  if (const auto& d = r.determinism) {
    {
      StmtUse s(im.stmt("INSERT INTO determinism (result_id, repeats, level) VALUES (?1, ?2, ?3)"));
      s->bind(1, id);
      s->bind(2, d->repeats);
      s->bind(3, d->level);
      s->run();
    }
    std::map<std::string, std::set<std::string>> distinct;
    for (const auto& g : d->digests) {
      distinct[g.output].insert(g.digest);
      StmtUse s(im.stmt("INSERT INTO digests (result_id, repeat, output, digest) VALUES (?1, ?2, ?3, ?4)"));
      s->bind(1, id);
      s->bind(2, g.repeat);
      s->bind(3, g.output);
      s->bind(4, g.digest);
      s->run();
    }
    for (const auto& [out, set] : distinct) {
      StmtUse s(im.stmt(
          "INSERT INTO determinism_outputs (result_id, output, distinct_digests) VALUES (?1, ?2, ?3)"));
      s->bind(1, id);
      s->bind(2, out);
      s->bind(3, int64_t(set.size()));
      s->run();
    }
  }
  if (const auto& t = r.timing) {
    {
      StmtUse s(im.stmt(
          "INSERT INTO timing (result_id, median_ms, min_ms, max_ms, warmup, clock_min_mhz, "
          "clock_max_mhz, peak_extra_bytes, flops, tflops) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
      s->bind(1, id);
      s->bind(2, t->median_ms);
      s->bind(3, t->min_ms);
      s->bind(4, t->max_ms);
      s->bind(5, t->warmup);
      s->bind(6, t->clock_min_mhz);
      s->bind(7, t->clock_max_mhz);
      s->bind(8, t->peak_extra_bytes);
      s->bind(9, t->flops);
      s->bind(10, t->tflops);
      s->run();
    }
    for (size_t i = 0; i < t->samples_ms.size(); ++i) {
      StmtUse s(im.stmt("INSERT INTO timing_samples (result_id, idx, ms) VALUES (?1, ?2, ?3)"));
      s->bind(1, id);
      s->bind(2, int64_t(i));
      s->bind(3, t->samples_ms[i]);
      s->run();
    }
  }
  return id;
}

Id Store::record_result(const ResultRecord& r) {
  validate_result(*impl_, r);
  Transaction tx(*this);
  if (auto row = find_result_row(*impl_, r.run_id, r.device_id, r.build_id, r.problem_id, r.variant_id,
                                 r.seed)) {
    if (row->second != kResultRunning) {
      impl_->fail("record_result: run " + std::to_string(r.run_id) + " already has a final result (" +
                  row->second + ") for variant " + variant(r.variant_id).name + ", seed " +
                  std::to_string(r.seed));
    }
    delete_result(*impl_, row->first);
  }
  const Id id = insert_result(*impl_, r);
  tx.commit();
  return id;
}

StoredResult Store::result(Id result_id) const {
  StoredResult out;
  out.id = result_id;
  ResultRecord& r = out.record;
  {
    StmtUse s(impl_->stmt(
        "SELECT r.run_id, r.device_id, r.build_id, r.problem_id, r.variant_id, r.seed, r.status, "
        "r.reason, r.recorded_at, v.name FROM results r JOIN variants v ON v.id = r.variant_id "
        "WHERE r.id=?1"));
    s->bind(1, result_id);
    if (!s->step()) impl_->fail("no result with id " + std::to_string(result_id));
    r.run_id = s->i64(0);
    r.device_id = s->i64(1);
    r.build_id = s->i64(2);
    r.problem_id = s->i64(3);
    r.variant_id = s->i64(4);
    r.seed = s->i64(5);
    r.status = s->text(6);
    r.reason = s->text(7);
    r.recorded_at = s->text(8);
    out.variant_name = s->text(9);
  }
  {
    StmtUse s(impl_->stmt("SELECT checked_what, tolerance, pass FROM correctness WHERE result_id=?1"));
    s->bind(1, result_id);
    if (s->step()) {
      Correctness c;
      c.checked_what = s->text(0);
      c.tolerance = s->f64(1);
      c.pass = s->i64(2) != 0;
      r.correctness = c;
    }
  }
  if (r.correctness) {
    StmtUse s(impl_->stmt("SELECT output, error FROM correctness_errors WHERE result_id=?1"));
    s->bind(1, result_id);
    while (s->step()) r.correctness->errors.emplace(s->text(0), s->f64(1));
  }
  {
    StmtUse s(impl_->stmt("SELECT repeats, level FROM determinism WHERE result_id=?1"));
    s->bind(1, result_id);
    if (s->step()) {
      Determinism d;
      d.repeats = s->i32(0);
      d.level = s->text(1);
      r.determinism = d;
    }
  }
  if (r.determinism) {
    {
      StmtUse s(impl_->stmt(
          "SELECT repeat, output, digest FROM digests WHERE result_id=?1 ORDER BY repeat, output"));
      s->bind(1, result_id);
      while (s->step()) r.determinism->digests.push_back({s->i32(0), s->text(1), s->text(2)});
    }
    StmtUse s(impl_->stmt("SELECT output, distinct_digests FROM determinism_outputs WHERE result_id=?1"));
    s->bind(1, result_id);
    while (s->step()) r.determinism->distinct.emplace(s->text(0), s->i32(1));
  }
  {
    StmtUse s(impl_->stmt(
        "SELECT median_ms, min_ms, max_ms, warmup, clock_min_mhz, clock_max_mhz, peak_extra_bytes, "
        "flops, tflops FROM timing WHERE result_id=?1"));
    s->bind(1, result_id);
    if (s->step()) {
      Timing t;
      t.median_ms = s->f64(0);
      t.min_ms = s->f64(1);
      t.max_ms = s->f64(2);
      t.warmup = s->i32(3);
      t.clock_min_mhz = s->i32(4);
      t.clock_max_mhz = s->i32(5);
      t.peak_extra_bytes = s->i64(6);
      t.flops = s->f64(7);
      t.tflops = s->f64(8);
      r.timing = t;
    }
  }
  if (r.timing) {
    StmtUse s(impl_->stmt("SELECT ms FROM timing_samples WHERE result_id=?1 ORDER BY idx"));
    s->bind(1, result_id);
    while (s->step()) r.timing->samples_ms.push_back(s->f64(0));
  }
  return out;
}

std::vector<StoredResult> Store::run_results(Id run_id) const {
  std::vector<Id> ids;
  {
    StmtUse s(impl_->stmt("SELECT id FROM results WHERE run_id=?1 ORDER BY id"));
    s->bind(1, run_id);
    while (s->step()) ids.push_back(s->i64(0));
  }
  std::vector<StoredResult> out;
  out.reserve(ids.size());
  for (Id id : ids) out.push_back(result(id));
  return out;
}

// ---------------------------------------------------------------------------
// Selection

std::optional<BestResult> Store::best(Id device_id, Id problem_id, bool allow_nondeterministic,
                                      std::optional<Id> build_id) const {
  BestResult b;
  {
    StmtUse s(impl_->stmt(
        "SELECT r.id, r.run_id, r.variant_id, v.name, r.build_id, r.seed, t.median_ms, t.tflops, "
        "       coalesce(d.level, ''), r.recorded_at, p.key "
        "FROM results r "
        "JOIN variants v ON v.id = r.variant_id "
        "JOIN problems p ON p.id = r.problem_id "
        "JOIN correctness c ON c.result_id = r.id "
        "JOIN timing t ON t.result_id = r.id "
        "LEFT JOIN determinism d ON d.result_id = r.id "
        "WHERE r.device_id=?1 AND r.problem_id=?2 AND r.status='ok' AND c.pass=1 "
        "  AND ((d.level='run_to_run' AND v.deterministic_by_design=1) OR ?3=1) "
        "  AND (?4 IS NULL OR r.build_id=?4) "
        "ORDER BY t.median_ms, r.id LIMIT 1"));
    s->bind(1, device_id);
    s->bind(2, problem_id);
    s->bind(3, allow_nondeterministic);
    s->bind(4, build_id);
    if (!s->step()) return std::nullopt;
    b.result_id = s->i64(0);
    b.run_id = s->i64(1);
    b.variant_id = s->i64(2);
    b.variant_name = s->text(3);
    b.build_id = s->i64(4);
    b.seed = s->i64(5);
    b.median_ms = s->f64(6);
    b.tflops = s->f64(7);
    b.level = s->text(8);
    b.recorded_at = s->text(9);
    b.problem_key = s->text(10);
  }
  b.device_id = device_id;
  b.problem_id = problem_id;
  b.build = build(b.build_id);
  return b;
}

std::optional<NearestMatch> Store::nearest_tuned(Id device_id, const ProblemRecord& p,
                                                 bool allow_nondeterministic,
                                                 std::optional<Id> build_id) const {
  std::vector<Id> candidates;
  {
    StmtUse s(impl_->stmt(
        "SELECT DISTINCT p.id FROM problems p JOIN results r ON r.problem_id = p.id "
        "WHERE p.family=?1 AND p.options_key=?2 AND r.device_id=?3 AND r.status='ok' "
        "ORDER BY p.key"));
    s->bind(1, p.family);
    s->bind(2, p.options_key);
    s->bind(3, device_id);
    while (s->step()) candidates.push_back(s->i64(0));
  }
  std::optional<NearestMatch> found;
  for (Id id : candidates) {
    ProblemRecord q = problem(id);
    if (q.shape.size() != p.shape.size() ||
        !std::equal(q.shape.begin(), q.shape.end(), p.shape.begin(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      continue;
    }
    const double dist = shape_distance(p.shape, q.shape);
    if (found && !(dist < found->distance ||
                   (dist == found->distance && q.key < found->problem.record.key))) {
      continue;
    }
    auto b = best(device_id, id, allow_nondeterministic, build_id);
    if (!b) continue;
    found = NearestMatch{{id, std::move(q)}, dist, std::move(*b)};
  }
  return found;
}

static std::optional<StoredDigests> digests_of(const Store::Impl& im_c, Id result_id) {
  auto& im = const_cast<Store::Impl&>(im_c);
  StoredDigests sd;
  {
    StmtUse s(im.stmt(
        "SELECT r.run_id, v.name, d.repeats, d.level FROM results r "
        "JOIN variants v ON v.id = r.variant_id JOIN determinism d ON d.result_id = r.id "
        "WHERE r.id=?1"));
    s->bind(1, result_id);
    if (!s->step()) return std::nullopt;
    sd.result_id = result_id;
    sd.run_id = s->i64(0);
    sd.variant_name = s->text(1);
    sd.repeats = s->i32(2);
    sd.level = s->text(3);
  }
  StmtUse s(im.stmt("SELECT repeat, output, digest FROM digests WHERE result_id=?1 ORDER BY repeat, output"));
  s->bind(1, result_id);
  while (s->step()) sd.digests.push_back({s->i32(0), s->text(1), s->text(2)});
  return sd;
}

std::optional<StoredDigests> Store::stored_digests(Id device_id, Id build_id, Id variant_id,
                                                   Id problem_id, int64_t seed) const {
  Id rid = 0;
  {
    StmtUse s(impl_->stmt(
        "SELECT r.id FROM results r JOIN determinism d ON d.result_id = r.id "
        "WHERE r.device_id=?1 AND r.build_id=?2 AND r.variant_id=?3 AND r.problem_id=?4 AND r.seed=?5 "
        "ORDER BY r.id DESC LIMIT 1"));
    s->bind(1, device_id);
    s->bind(2, build_id);
    s->bind(3, variant_id);
    s->bind(4, problem_id);
    s->bind(5, seed);
    if (!s->step()) return std::nullopt;
    rid = s->i64(0);
  }
  return digests_of(*impl_, rid);
}

std::vector<StoredDigests> Store::problem_digests(Id device_id, Id build_id, Id problem_id,
                                                  int64_t seed) const {
  std::vector<Id> ids;
  {
    StmtUse s(impl_->stmt(
        "SELECT max(r.id) FROM results r JOIN determinism d ON d.result_id = r.id "
        "JOIN variants v ON v.id = r.variant_id "
        "WHERE r.device_id=?1 AND r.build_id=?2 AND r.problem_id=?3 AND r.seed=?4 "
        "GROUP BY r.variant_id ORDER BY min(v.name)"));
    s->bind(1, device_id);
    s->bind(2, build_id);
    s->bind(3, problem_id);
    s->bind(4, seed);
    while (s->step()) ids.push_back(s->i64(0));
  }
  std::vector<StoredDigests> out;
  for (Id id : ids) {
    if (auto d = digests_of(*impl_, id)) out.push_back(std::move(*d));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Export

static std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) {
    if (c == '"') q += '"';
    q += c;
  }
  q += '"';
  return q;
}

static std::string csv_value(sqlite3_stmt* s, int col) {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_NULL:
      return {};
    case SQLITE_INTEGER:
      return std::to_string(sqlite3_column_int64(s, col));
    case SQLITE_FLOAT: {
      char buf[64];
      const auto r = std::to_chars(buf, buf + sizeof buf, sqlite3_column_double(s, col));
      return std::string(buf, r.ptr);
    }
    default: {
      const unsigned char* t = sqlite3_column_text(s, col);
      return csv_field(t ? std::string(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(s, col)))
                         : std::string());
    }
  }
}

std::vector<std::filesystem::path> Store::export_csv(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) impl_->fail("export_csv: cannot create directory '" + dir.string() + "': " + ec.message());
  std::vector<std::string> tables;
  {
    Stmt s(impl_->db, impl_->file,
           "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    while (s.step()) tables.push_back(s.text(0));
  }
  // One read transaction: every CSV shows the same snapshot (inside a caller's
  // Transaction that one already holds).
  const bool own_tx = impl_->tx_depth == 0;
  if (own_tx) impl_->exec("BEGIN", "export_csv: begin read transaction");
  std::vector<std::filesystem::path> files;
  try {
    for (const auto& t : tables) {
      const auto file = dir / (t + ".csv");
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      if (!out) impl_->fail("export_csv: cannot write '" + file.string() + "'");
      Stmt s(impl_->db, impl_->file, "SELECT * FROM \"" + t + "\"");
      const int n = sqlite3_column_count(s.handle());
      for (int c = 0; c < n; ++c) out << (c ? "," : "") << csv_field(sqlite3_column_name(s.handle(), c));
      out << "\r\n";
      while (s.step()) {
        for (int c = 0; c < n; ++c) out << (c ? "," : "") << csv_value(s.handle(), c);
        out << "\r\n";
      }
      out.close();
      if (!out) impl_->fail("export_csv: writing '" + file.string() + "' failed");
      files.push_back(file);
    }
  } catch (...) {
    if (own_tx) sqlite3_exec(impl_->db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  if (own_tx) impl_->exec("COMMIT", "export_csv: end read transaction");
  return files;
}

// ---------------------------------------------------------------------------
// Merge

MergeCounts Store::merge(const std::filesystem::path& other_path) {
  std::error_code ec;
  if (std::filesystem::equivalent(other_path, impl_->path, ec)) {
    impl_->fail("merge: '" + other_path.string() + "' is this database itself");
  }
  if (!std::filesystem::exists(other_path, ec)) {
    impl_->fail("merge: '" + other_path.string() + "' does not exist");
  }
  // Open the other file read-only. An older schema is migrated in a temporary
  // copy (made with the SQLite backup API), never in the file itself.
  std::optional<Store> other;
  std::filesystem::path tmp;
  struct TmpGuard {
    std::filesystem::path* p;
    ~TmpGuard() {
      if (p->empty()) return;
      std::error_code e;
      for (const char* sfx : {"", "-wal", "-shm"}) std::filesystem::remove(p->string() + sfx, e);
    }
  } guard{&tmp};
  {
    // Validates (foreign, corrupted, newer are refused here) without writing.
    int version = 0;
    try {
      other.emplace(other_path, OpenOptions{false, true, impl_->opts.busy_timeout_ms});
      version = other->schema_version();
    } catch (const Error& e) {
      const std::string m = e.what();
      if (m.find("needs migration") == std::string::npos) throw Error("merge: " + m);
    }
    if (!other) {
      tmp = std::filesystem::temp_directory_path() / ("detfuse-merge-" + new_uid() + ".db");
      sqlite3* src = nullptr;
      sqlite3* dst = nullptr;
      int rc = sqlite3_open_v2(other_path.string().c_str(), &src, SQLITE_OPEN_READONLY, nullptr);
      if (rc == SQLITE_OK) rc = sqlite3_open_v2(tmp.string().c_str(), &dst,
                                                SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
      if (rc == SQLITE_OK) {
        sqlite3_backup* b = sqlite3_backup_init(dst, "main", src, "main");
        if (!b) {
          rc = sqlite3_errcode(dst);
        } else {
          rc = sqlite3_backup_step(b, -1);
          sqlite3_backup_finish(b);
          rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        }
      }
      sqlite3_close_v2(src);
      sqlite3_close_v2(dst);
      if (rc != SQLITE_OK) {
        impl_->fail("merge: cannot copy '" + other_path.string() + "' for migration: " + sqlite3_errstr(rc));
      }
      other.emplace(tmp);
      version = other->schema_version();
    }
    (void)version;
    other->check_integrity();
  }

  MergeCounts n;
  Transaction tx(*this);
  std::unordered_map<Id, Id> dev, bld, prob, var, run;
  for (const auto& e : other->list_devices()) {
    if (!find_device(e.record)) ++n.devices;
    dev[e.id] = find_or_create_device(e.record);
  }
  for (const auto& e : other->list_builds()) {
    if (!find_build(e.record)) ++n.builds;
    bld[e.id] = find_or_create_build(e.record);
  }
  for (const auto& e : other->list_problems()) {
    if (!find_problem(e.record.key)) ++n.problems;
    prob[e.id] = find_or_create_problem(e.record);
  }
  for (const auto& e : other->list_variants()) {
    if (!find_variant(e.record.name)) ++n.variants;
    var[e.id] = find_or_create_variant(e.record);
  }
  for (const auto& e : other->list_runs()) {
    std::optional<Id> mine;
    {
      StmtUse s(impl_->stmt("SELECT id FROM runs WHERE uid=?1"));
      s->bind(1, e.record.uid);
      if (s->step()) mine = s->i64(0);
    }
    if (!mine) {
      mine = begin_run(e.record);
      ++n.runs;
    }
    run[e.id] = *mine;
  }
  for (const auto& e : other->list_runs()) {
    for (const auto& sr : other->run_results(e.id)) {
      if (sr.record.status == kResultRunning) continue;
      ResultRecord r = sr.record;
      r.run_id = run.at(r.run_id);
      r.device_id = dev.at(r.device_id);
      r.build_id = bld.at(r.build_id);
      r.problem_id = prob.at(r.problem_id);
      r.variant_id = var.at(r.variant_id);
      auto row = find_result_row(*impl_, r.run_id, r.device_id, r.build_id, r.problem_id, r.variant_id, r.seed);
      if (row && row->second != kResultRunning) continue;
      if (row) delete_result(*impl_, row->first);
      insert_result(*impl_, r);
      ++n.results;
    }
  }
  tx.commit();
  return n;
}

}  // namespace detfuse::db
