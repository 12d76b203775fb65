#include "db/sqlite_stmt.h"

#include <limits>

namespace detfuse::db::detail {

std::string sqlite_message(sqlite3* db, const std::string& file, const std::string& what, int rc) {
  std::string msg = "detfuse db '" + file + "': " + what + ": ";
  const int primary = rc & 0xff;
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) {
    msg += "the file is damaged or not a database: ";
  } else if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    msg += "the database stayed locked by another writer past the busy timeout: ";
  }
  msg += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  msg += " (";
  msg += sqlite3_errstr(rc);
  msg += ", code " + std::to_string(rc) + ")";
  return msg;
}

void throw_sqlite(sqlite3* db, const std::string& file, const std::string& what, int rc) {
  throw Error(sqlite_message(db, file, what, rc));
}

Stmt::Stmt(sqlite3* db, const std::string& file, const std::string& sql)
    : db_(db), file_(file), sql_(sql) {
  const int rc = sqlite3_prepare_v3(db_, sql_.c_str(), int(sql_.size()), SQLITE_PREPARE_PERSISTENT,
                                    &s_, nullptr);
  if (rc != SQLITE_OK) throw_sqlite(db_, file_, "cannot prepare \"" + sql_ + "\"", rc);
}

Stmt::~Stmt() { sqlite3_finalize(s_); }

void Stmt::reset() {
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
}

void Stmt::bind(int i, int64_t v) {
  const int rc = sqlite3_bind_int64(s_, i, v);
  if (rc != SQLITE_OK) throw_sqlite(db_, file_, "bind " + std::to_string(i) + " of \"" + sql_ + "\"", rc);
}

void Stmt::bind(int i, double v) {
  const int rc = std::isnan(v) ? sqlite3_bind_null(s_, i) : sqlite3_bind_double(s_, i, v);
  if (rc != SQLITE_OK) throw_sqlite(db_, file_, "bind " + std::to_string(i) + " of \"" + sql_ + "\"", rc);
}

void Stmt::bind(int i, const std::string& v) {
  const int rc = sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) throw_sqlite(db_, file_, "bind " + std::to_string(i) + " of \"" + sql_ + "\"", rc);
}

void Stmt::bind_null(int i) {
  const int rc = sqlite3_bind_null(s_, i);
  if (rc != SQLITE_OK) throw_sqlite(db_, file_, "bind " + std::to_string(i) + " of \"" + sql_ + "\"", rc);
}

bool Stmt::step() {
  const int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_sqlite(db_, file_, "\"" + sql_ + "\" failed", rc);
}

void Stmt::run() {
  while (step()) {
  }
}

bool Stmt::is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

int64_t Stmt::i64(int col) const { return sqlite3_column_int64(s_, col); }

double Stmt::f64(int col) const {
  if (is_null(col)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(s_, col);
}

std::string Stmt::text(int col) const {
  const unsigned char* t = sqlite3_column_text(s_, col);
  if (!t) return {};
  return std::string(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(s_, col)));
}

}  // namespace detfuse::db::detail
