#include "tuner/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "kernels/common/error.h"

namespace detfuse::tuner {

int64_t NpyArray::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

Error bad(const std::string& name, const std::string& why) { return invalid_argument(name + ": " + why); }

// Value of 'key' in the header dict, as raw text up to the next top-level ',' or '}'.
std::string dict_value(const std::string& h, const std::string& key, const std::string& name) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) throw bad(name, "npy header has no '" + key + "'");
  size_t c = h.find(':', k);
  if (c == std::string::npos) throw bad(name, "malformed npy header");
  size_t i = c + 1;
  while (i < h.size() && h[i] == ' ') ++i;
  size_t j = i;
  int depth = 0;
  for (; j < h.size(); ++j) {
    char ch = h[j];
    if (ch == '(' || ch == '[') ++depth;
    if (ch == ')' || ch == ']') --depth;
    if (depth == 0 && (ch == ',' || ch == '}')) break;
  }
  if (depth != 0 || j >= h.size()) throw bad(name, "malformed npy header");
  return h.substr(i, j - i);
}

}  // namespace

NpyArray parse_npy(const std::string& b, const std::string& name) {
  static const char magic[] = "\x93NUMPY";
  if (b.size() < 10 || std::memcmp(b.data(), magic, 6) != 0) throw bad(name, "not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len, off;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | (size_t(static_cast<unsigned char>(b[9])) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw bad(name, "truncated npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    off = 12;
  } else {
    throw bad(name, "unsupported npy version " + std::to_string(major));
  }
  if (b.size() < off + header_len) throw bad(name, "truncated npy header");
  const std::string h = b.substr(off, header_len);
  NpyArray a;
  std::string descr = dict_value(h, "descr", name);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"')) throw bad(name, "malformed descr");
  a.descr = descr.substr(1, descr.size() - 2);
  if (a.descr != "<f4" && a.descr != "<i8")
    throw bad(name, "dtype '" + a.descr + "' not supported (need little-endian float32 '<f4' or int64 '<i8')");
  std::string fo = dict_value(h, "fortran_order", name);
  if (fo != "False") throw bad(name, "Fortran-order arrays are not supported (save with C order)");
  std::string sh = dict_value(h, "shape", name);
  if (sh.size() < 2 || sh.front() != '(' || sh.back() != ')') throw bad(name, "malformed shape " + sh);
  std::string inner = sh.substr(1, sh.size() - 2);
  std::stringstream ss(inner);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t s = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    if (s == std::string::npos) continue;  // "(5,)" trailing comma
    std::string t = item.substr(s, e - s + 1);
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 15)
      throw bad(name, "malformed shape " + sh);
    a.shape.push_back(std::stoll(t));
  }
  const size_t elem = 4 + 4 * (a.descr == "<i8");
  const int64_t n = a.count();
  const size_t data_off = off + header_len;
  const size_t want = size_t(n) * elem;
  if (b.size() - data_off != want)
    throw bad(name, "data size " + std::to_string(b.size() - data_off) + " bytes does not match shape " + sh + " (" +
                        std::to_string(want) + " bytes)");
  if (a.descr == "<f4") {
    a.f32.resize(size_t(n));
    if (n) std::memcpy(a.f32.data(), b.data() + data_off, want);
  } else {
    a.i64.resize(size_t(n));
    if (n) std::memcpy(a.i64.data(), b.data() + data_off, want);
  }
  return a;
}

NpyArray read_npy(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw invalid_argument(path.string() + ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_npy(bytes, path.string());
}

namespace {
void write_raw(const std::filesystem::path& path, const char* descr, const void* data, size_t bytes,
               const std::vector<int64_t>& shape) {
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i) sh += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  if (shape.size() > 1 && sh.back() == ',') sh.pop_back();
  sh += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + sh + ", }";
  // Total of magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(path.string() + ": cannot write");
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = uint16_t(header.size());
  const char lb[2] = {char(len & 0xff), char(len >> 8)};
  f.write(lb, 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!f) throw Error(path.string() + ": write failed");
}

void check_count(const std::filesystem::path& path, size_t n, const std::vector<int64_t>& shape) {
  int64_t c = 1;
  for (int64_t d : shape) c *= d;
  if (size_t(c) != n) throw invalid_argument(path.string() + ": shape does not match the data size");
}
}  // namespace

void write_npy(const std::filesystem::path& path, const std::vector<float>& data, const std::vector<int64_t>& shape) {
  check_count(path, data.size(), shape);
  write_raw(path, "<f4", data.data(), data.size() * 4, shape);
}

void write_npy(const std::filesystem::path& path, const std::vector<int64_t>& data,
               const std::vector<int64_t>& shape) {
  check_count(path, data.size(), shape);
  write_raw(path, "<i8", data.data(), data.size() * 8, shape);
}

}  // namespace detfuse::tuner
