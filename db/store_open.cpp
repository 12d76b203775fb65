// Opening a store: path checks (before anything on disk changes), the header
// check, read-write and read-only connections, the application id / version
// checks, migrations, transactions, lifetime and the integrity check.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "db/schema.h"
#include "db/store_impl.h"

namespace detfuse::db {

using detail::Stmt;

namespace {

constexpr char kSqliteMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f',
                                   'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};

// What the first 100 bytes say, read without SQLite: a non-SQLite file is
// refused before SQLite ever opens it.
struct Header {
  bool empty = false;
  bool wal = false;  // bytes 18 and 19 are 2: WAL mode (persistent in the file)
};

Header check_header(const std::filesystem::path& p, const Store::Impl& im) {
  std::ifstream in(p, std::ios::binary);
  if (!in) im.bad_input("cannot read the file");
  char head[100] = {};
  in.read(head, sizeof head);
  const auto got = in.gcount();
  if (got == 0) return {true, false};  // empty file: SQLite treats it as a new database
  if (got < 100 || std::memcmp(head, kSqliteMagic, 16) != 0) {
    im.bad_input(
        "not a detfuse database (not an SQLite file: the header is wrong). The file was not modified.");
  }
  return {false, head[18] == 2 && head[19] == 2};
}

bool can_access(const std::filesystem::path& p, int mode) { return ::access(p.c_str(), mode) == 0; }

std::string errno_text() { return std::strerror(errno); }

std::filesystem::path dir_of(const std::filesystem::path& p) {
  const auto parent = p.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

// "file:" URI of a path for sqlite3_open_v2 with SQLITE_OPEN_URI: every byte
// outside [A-Za-z0-9/._-] percent-encoded.
std::string file_uri(const std::filesystem::path& p) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  if (ec) abs = p;
  std::string out = "file:";
  static const char* hex = "0123456789ABCDEF";
  for (unsigned char c : abs.string()) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-') {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// After a read-only connection closed: a short read-write handle that reads
// the schema (so SQLite opens the log) and closes. SQLite's close takes the
// exclusive lock, checkpoints (the log is empty: nothing reaches the file) and
// deletes -wal and -shm, and does nothing of that while any other connection
// has the file open. Only called when the file and its directory are writable.
void tidy_sidecars_of(const std::string& file) {
  sqlite3* c = nullptr;
  if (sqlite3_open_v2(file.c_str(), &c, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_exec(c, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  }
  sqlite3_close_v2(c);
}

bool sidecars_absent(const std::string& file) {
  std::error_code ec;
  return !std::filesystem::exists(file + "-wal", ec) && !std::filesystem::exists(file + "-shm", ec);
}

}  // namespace

// ---------------------------------------------------------------------------
// Impl: lifetime, statements that are not cached

Store::Impl::~Impl() {
  cache.clear();  // finalize statements before closing
  if (db) sqlite3_close_v2(db);
  if (tidy_sidecars) tidy_sidecars_of(file);
}

void Store::Impl::exec(const std::string& sql, const std::string& what) const {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string m = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    fail(what + ": " + m + " (" + sqlite3_errstr(rc) + ")");
  }
}

int64_t Store::Impl::pragma_int(const char* name) const {
  Stmt s(db, file, std::string("PRAGMA ") + name);
  if (!s.step()) fail(std::string("PRAGMA ") + name + " returned nothing");
  return s.i64(0);
}

// ---------------------------------------------------------------------------
// Opening

void Store::Impl::open_connection(const std::string& name, int flags) {
  const int rc = sqlite3_open_v2(name.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX /* one Store per thread */,
                                 nullptr);
  if (rc != SQLITE_OK) {
    std::string m = detail::sqlite_message(db, file, "cannot open", rc);
    sqlite3_close_v2(db);
    db = nullptr;
    throw Error(m);
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, opts.busy_timeout_ms);
}

void Store::Impl::open() {
  file = path.string();
  if (path.empty()) {
    throw Error("detfuse db: the database path is empty (give a file, e.g. --db detfuse.db)",
                Error::Kind::invalid_argument);
  }
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  const auto dir = dir_of(path);
  Header header;
  if (std::filesystem::exists(st)) {
    if (std::filesystem::is_directory(st)) bad_input("is a directory, not a database file");
    if (!std::filesystem::is_regular_file(st)) bad_input("is not a regular file");
    if (!can_access(path, R_OK)) bad_input("cannot read the file: " + errno_text());
    if (!opts.read_only) {
      if (!can_access(path, W_OK)) {
        bad_input("the file is not writable (" + errno_text() +
                  "); only commands that read (best, db export, verify without storing) can use it");
      }
      if (!can_access(dir, W_OK)) {
        bad_input("the directory '" + dir.string() + "' is not writable (" + errno_text() +
                  "), and a writer must create '" + file + "-wal' and '" + file +
                  "-shm' beside the file; only commands that read can use it");
      }
    }
    header = check_header(path, *this);
  } else {
    if (opts.read_only || !opts.create) bad_input("the file does not exist");
    const auto parent = path.parent_path();
    std::error_code pec;
    const auto pst = std::filesystem::status(dir, pec);
    if (!std::filesystem::exists(pst)) bad_input("the directory '" + parent.string() + "' does not exist");
    if (!std::filesystem::is_directory(pst)) bad_input("'" + parent.string() + "' is not a directory");
    if (!can_access(dir, W_OK)) {
      bad_input("cannot create the file: the directory '" + dir.string() + "' is not writable (" +
                errno_text() + ")");
    }
  }

  if (!opts.read_only) {
    open_connection(file, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    check_and_migrate();
    return;
  }

  // Read-only (db/README.md, "Read-only opens"). A WAL-mode file needs its
  // -shm (the WAL index) to be read; SQLite creates it when the directory is
  // writable, and uses it read-only when it exists. When this process cannot
  // write the directory or the file and there is no -wal: no process has the
  // file open in WAL mode right now (a connection keeps the -wal while open),
  // so the file is opened immutable (no locks, no -shm): nothing is created
  // beside a file that is not ours to change (a -shm of ours could stop its
  // owner from writing). With a -wal but no -shm in a directory we cannot
  // write there is no safe way.
  if (header.empty) bad_input("an empty file, not a detfuse database (opened read-only)");
  std::string uri = file_uri(path) + "?mode=ro";
  if (header.wal && (!can_access(dir, W_OK) || !can_access(path, W_OK))) {
    const bool wal = std::filesystem::exists(file + "-wal", ec);
    const bool shm = std::filesystem::exists(file + "-shm", ec);
    if (!wal) {
      uri += "&immutable=1";
    } else if (!shm && !can_access(dir, W_OK)) {
      bad_input("the file is in a directory this process cannot write and has a write-ahead log ('" + file +
                "-wal') but no '" + file +
                "-shm': it cannot be read safely. Open it once read-write where the directory is writable "
                "(that folds the log into the file), or copy the file and its -wal elsewhere");
    }
  }
  tidy_sidecars = header.wal && can_access(path, W_OK) && can_access(dir, W_OK) && sidecars_absent(file);
  open_connection(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
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
      if (detail::lower(mode) != "wal") fail("cannot switch to WAL journal mode (got '" + mode + "')");
      return;
    }
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() > deadline) {
      detail::throw_sqlite(db, file, "PRAGMA journal_mode=WAL", rc);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Store::Impl::check_and_migrate() {
  // Read-only probes first: nothing is written to a file we refuse. They run
  // in one read transaction: as three autocommit reads they could straddle
  // another connection's commit of a new schema and see application_id 0 with
  // the schema's tables (a "not a detfuse database" refusal of a good file).
  int64_t app = 0, ver = 0, objects = 0;
  try {
    exec("BEGIN", "begin the probes' read transaction");
    try {
      app = pragma_int("application_id");
      ver = pragma_int("user_version");
      Stmt s(db, file, "SELECT count(*) FROM sqlite_master");
      s.step();
      objects = s.i64(0);
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
    exec("COMMIT", "end the probes' read transaction");
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + ". The file was not modified.");
  }
  bool fresh = false;
  if (app == kApplicationId) {
    if (ver > kSchemaVersion) {
      bad_input("schema version " + std::to_string(ver) + " is newer than this build supports (" +
                std::to_string(kSchemaVersion) + "); use a newer detfuse. The file was not modified.");
    }
    if (ver < 1) fail("detfuse application id but schema version " + std::to_string(ver) + ": damaged");
  } else if (app == 0 && ver == 0 && objects == 0) {
    fresh = true;
  } else {
    bad_input("not a detfuse database (SQLite file with application_id " + std::to_string(app) +
              ", user_version " + std::to_string(ver) + ", " + std::to_string(objects) +
              " schema objects). The file was not modified.");
  }
  file_version = int(ver);
  if (opts.integrity_check && !fresh) {
    Stmt s(db, file, "PRAGMA integrity_check");
    std::string problems;
    while (s.step()) {
      const std::string line = s.text(0);
      if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
    }
    if (!problems.empty()) fail("the file is damaged (PRAGMA integrity_check: " + problems + ")");
  }

  if (opts.read_only) {
    if (fresh) bad_input("an empty file, not a detfuse database (opened read-only)");
    if (ver < kSchemaVersion) migrate_read_only_copy(int(ver));
    version = kSchemaVersion;
    exec("PRAGMA foreign_keys=ON", "PRAGMA foreign_keys");
    exec("PRAGMA query_only=ON", "PRAGMA query_only");  // a connection setting, not a write
    return;
  }

  set_wal();
  exec("PRAGMA synchronous=NORMAL", "PRAGMA synchronous");
  if (fresh || ver < kSchemaVersion) {
    // Migrations rebuild tables (v3: runs), which SQLite allows only with
    // foreign keys off; they are checked before the commit instead.
    // (PRAGMA foreign_keys is a no-op inside a transaction: set it before.)
    exec("PRAGMA foreign_keys=OFF", "PRAGMA foreign_keys");
    // Another process may be creating or migrating the same file: take the
    // write lock and look again.
    exec("BEGIN IMMEDIATE", "begin schema transaction");
    try {
      app = pragma_int("application_id");
      ver = pragma_int("user_version");
      if (app == kApplicationId && ver > kSchemaVersion) {
        bad_input("schema version " + std::to_string(ver) + " is newer than this build supports");
      }
      const bool still_fresh = app != kApplicationId;
      if (still_fresh || ver < kSchemaVersion) migrate_locked(still_fresh, int(ver));
      exec("COMMIT", "commit schema transaction");
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
  exec("PRAGMA foreign_keys=ON", "PRAGMA foreign_keys");
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
  {
    Stmt s(db, file, "PRAGMA foreign_key_check");
    if (s.step()) {
      fail("migration to v" + std::to_string(from) + " left a dangling reference in table " + s.text(0) +
           " (rowid " + std::to_string(s.i64(1)) + "); nothing was changed");
    }
  }
  exec("PRAGMA user_version=" + std::to_string(from), "set user_version");
}

// A read-only open of an older file: the file is copied into memory (SQLite's
// backup API, one read snapshot) and migrated there; the file stays as it is.
void Store::Impl::migrate_read_only_copy(int from) {
  sqlite3* mem = nullptr;
  int rc = sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc == SQLITE_OK) {
    sqlite3_backup* b = sqlite3_backup_init(mem, "main", db, "main");
    if (!b) {
      rc = sqlite3_errcode(mem);
    } else {
      rc = sqlite3_backup_step(b, -1);
      sqlite3_backup_finish(b);
      rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
  }
  if (rc != SQLITE_OK) {
    const std::string m = detail::sqlite_message(mem, file, "copying the file into memory to migrate it "
                                                            "(read-only open of schema v" +
                                                                std::to_string(from) + ")",
                                                 rc);
    sqlite3_close_v2(mem);
    throw Error(m);
  }
  cache.clear();
  sqlite3_close_v2(db);
  db = mem;
  if (tidy_sidecars) {
    tidy_sidecars_of(file);
    tidy_sidecars = false;
  }
  sqlite3_extended_result_codes(db, 1);
  exec("BEGIN", "begin in-memory migration");
  try {
    migrate_locked(false, from);
    exec("COMMIT", "commit in-memory migration");
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

// ---------------------------------------------------------------------------
// Transaction

Transaction::Transaction(Store& store) : store_(store), depth_(store.impl_->tx_depth) {
  auto& im = *store_.impl_;
  if (im.opts.read_only) im.bad_input("opened read-only: this operation writes");
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

Store Store::open_read_only(const std::filesystem::path& path, int busy_timeout_ms) {
  OpenOptions o;
  o.create = false;
  o.read_only = true;
  o.busy_timeout_ms = busy_timeout_ms;
  return Store(path, o);
}

Store::~Store() = default;
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

const std::filesystem::path& Store::path() const { return impl_->path; }
int Store::schema_version() const { return impl_->version; }
int Store::file_schema_version() const { return impl_->file_version; }
bool Store::read_only() const { return impl_->opts.read_only; }

void Store::check_integrity() const {
  Stmt s(impl_->db, impl_->file, "PRAGMA quick_check");
  std::string problems;
  while (s.step()) {
    const std::string line = s.text(0);
    if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
  }
  if (!problems.empty()) impl_->fail("integrity check failed: " + problems);
}

}  // namespace detfuse::db
