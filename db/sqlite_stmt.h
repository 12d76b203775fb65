// Internal to db/: a thin RAII layer over the sqlite3 C API in the manner of
// SQLiteCpp. A Stmt is prepared once per connection, cached by its SQL text and
// reused with reset; a StmtUse resets it (and clears its bindings) when it goes
// out of scope, so no statement keeps a read snapshot open between calls.
// Not part of the public API: tuner/ and cli/ include db/store.h only.
#pragma once

#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "db/store.h"

namespace detfuse::db::detail {

// "detfuse db '<file>': <what>: <sqlite message> (<code name>)".
std::string sqlite_message(sqlite3* db, const std::string& file, const std::string& what, int rc);
[[noreturn]] void throw_sqlite(sqlite3* db, const std::string& file, const std::string& what,
                               int rc);

class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& file, const std::string& sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  void reset();

  void bind(int i, int64_t v);
  void bind(int i, int v) { bind(i, int64_t(v)); }
  void bind(int i, bool v) { bind(i, int64_t(v ? 1 : 0)); }
  void bind(int i, double v);  // NaN is bound as NULL
  void bind(int i, const std::string& v);
  void bind(int i, const char* v) { bind(i, std::string(v)); }
  void bind_null(int i);
  void bind(int i, const std::optional<Id>& v) {
    if (v) bind(i, *v); else bind_null(i);
  }

  // Binds args to parameters 1, 2, ... in order.
  template <class... Args>
  void bind_all(const Args&... args) {
    int i = 0;
    (bind(++i, args), ...);
  }

  // true: a row is available; false: done. Throws db::Error on failure.
  bool step();
  // Steps to completion (for statements that return no rows).
  void run();

  bool is_null(int col) const;
  int64_t i64(int col) const;
  int i32(int col) const { return int(i64(col)); }
  double f64(int col) const;  // NULL reads as NaN
  std::string text(int col) const;

  sqlite3_stmt* handle() const { return s_; }
  const std::string& sql() const { return sql_; }

 private:
  sqlite3* db_;
  std::string file_;
  std::string sql_;
  sqlite3_stmt* s_ = nullptr;
};

// A use of a cached statement: reset on construction and destruction.
class StmtUse {
 public:
  explicit StmtUse(Stmt& s) : s_(s) { s_.reset(); }
  ~StmtUse() { s_.reset(); }
  StmtUse(const StmtUse&) = delete;
  StmtUse& operator=(const StmtUse&) = delete;
  Stmt* operator->() { return &s_; }
  Stmt& operator*() { return s_; }

 private:
  Stmt& s_;
};

}  // namespace detfuse::db::detail
