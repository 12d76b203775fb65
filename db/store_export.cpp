// CSV export: one file per table, RFC 4180 quoting, one read snapshot. Works
// on a read-only store (it only reads).
#include <charconv>
#include <fstream>

#include "db/store_impl.h"

namespace detfuse::db {

using detail::Stmt;

namespace {

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) {
    if (c == '"') q += '"';
    q += c;
  }
  q += '"';
  return q;
}

std::string csv_value(sqlite3_stmt* s, int col) {
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

}  // namespace

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

}  // namespace detfuse::db
