#include "tuner/npy.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kernels/common/error.h"
#include "kernels/common/problem.h"

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

namespace {

// What the header says, validated: the dtype, the shape (each dimension within
// kMaxDim, the byte count computed without overflow) and where the data starts.
struct NpyHeader {
  std::string descr;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  uint64_t data_bytes = 0;
};

constexpr size_t kMaxHeaderBytes = size_t(1) << 20;  // numpy writes < 100 bytes; 1 MiB is plenty

// `prefix` holds at least the first 12 bytes of the file (fewer when the file
// is shorter); `read_header(n)` returns the first n bytes (fewer when short).
template <class ReadPrefix>
NpyHeader parse_header(const std::string& prefix, ReadPrefix read_header, const std::string& name) {
  static const char magic[] = "\x93NUMPY";
  if (prefix.size() < 10 || std::memcmp(prefix.data(), magic, 6) != 0) throw bad(name, "not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(prefix[6]);
  size_t header_len, off;
  if (major == 1) {
    header_len = static_cast<unsigned char>(prefix[8]) | (size_t(static_cast<unsigned char>(prefix[9])) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (prefix.size() < 12) throw bad(name, "truncated npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<unsigned char>(prefix[8 + i])) << (8 * i);
    off = 12;
  } else {
    throw bad(name, "unsupported npy version " + std::to_string(major));
  }
  if (header_len > kMaxHeaderBytes)
    throw bad(name, "npy header length " + std::to_string(header_len) + " bytes is implausible (a corrupt file?)");
  const std::string all = read_header(off + header_len);
  if (all.size() < off + header_len) throw bad(name, "truncated npy header");
  const std::string h = all.substr(off, header_len);
  NpyHeader out;
  std::string descr = dict_value(h, "descr", name);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') || descr.back() != descr.front())
    throw bad(name, "malformed descr");
  out.descr = descr.substr(1, descr.size() - 2);
  if (out.descr != "<f4" && out.descr != "<i8")
    throw bad(name, "dtype '" + out.descr + "' not supported (need little-endian float32 '<f4' or int64 '<i8')");
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
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 18)
      throw bad(name, "malformed shape " + sh);
    const int64_t d = std::stoll(t);
    if (d > kMaxDim)
      throw bad(name, "shape " + sh + ": dimension " + std::to_string(out.shape.size()) + " is " + t +
                          ", above the limit of " + kMaxDimText);
    out.shape.push_back(d);
  }
  if (out.shape.size() > 8) throw bad(name, "shape " + sh + " has more than 8 dimensions");
  const uint64_t elem = out.descr == "<i8" ? 8 : 4;
  uint64_t bytes = elem;
  for (int64_t d : out.shape) {
    auto b = checked_bytes({d}, bytes);
    if (!b) throw bad(name, "shape " + sh + " times " + std::to_string(elem) + " bytes overflows 64 bits");
    bytes = *b;
  }
  out.data_offset = off + header_len;
  out.data_bytes = bytes;
  return out;
}

std::string size_mismatch(const NpyHeader& h, uint64_t have) {
  std::string sh = "(";
  for (size_t i = 0; i < h.shape.size(); ++i) sh += (i ? ", " : "") + std::to_string(h.shape[i]);
  sh += ")";
  return "data size " + std::to_string(have) + " bytes does not match shape " + sh + " of " + h.descr + " (" +
         std::to_string(h.data_bytes) + " bytes)";
}

// The element vector of `a` sized for the header, or a named error when the
// host cannot hold it.
char* allocate_data(NpyArray& a, const NpyHeader& h, const std::string& name) {
  const size_t n = size_t(h.data_bytes / (a.descr == "<i8" ? 8 : 4));
  try {
    if (a.descr == "<f4") {
      a.f32.resize(n);
      return reinterpret_cast<char*>(a.f32.data());
    }
    a.i64.resize(n);
    return reinterpret_cast<char*>(a.i64.data());
  } catch (const std::bad_alloc&) {
    throw Error(name + ": out of host memory: cannot allocate " + std::to_string(h.data_bytes) + " bytes to read it");
  } catch (const std::length_error&) {
    throw Error(name + ": out of host memory: cannot allocate " + std::to_string(h.data_bytes) + " bytes to read it");
  }
}

}  // namespace

NpyArray parse_npy(const std::string& b, const std::string& name) {
  const NpyHeader h =
      parse_header(b.substr(0, 12), [&](size_t n) { return b.substr(0, n); }, name);
  const uint64_t have = b.size() - std::min(b.size(), h.data_offset);
  if (have != h.data_bytes) throw bad(name, size_mismatch(h, have));
  NpyArray a;
  a.descr = h.descr;
  a.shape = h.shape;
  char* dst = allocate_data(a, h, name);
  if (h.data_bytes) std::memcpy(dst, b.data() + h.data_offset, size_t(h.data_bytes));
  return a;
}

NpyArray read_npy(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw bad(name, "cannot open: no such file");
  if (std::filesystem::is_directory(st)) throw bad(name, "is a directory, not a .npy file");
  if (!std::filesystem::is_regular_file(st)) throw bad(name, "is not a regular file");
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw bad(name, "cannot read its size: " + ec.message());
  std::ifstream f(path, std::ios::binary);
  if (!f) throw bad(name, std::string("cannot open: ") + std::strerror(errno));
  auto read_first = [&](size_t n) {
    std::string s(n, '\0');
    f.clear();
    f.seekg(0);
    f.read(s.data(), std::streamsize(n));
    s.resize(size_t(f.gcount()));
    return s;
  };
  const NpyHeader h = parse_header(read_first(12), read_first, name);
  // The file size is checked against the header before any data is allocated.
  const uint64_t have = file_size - std::min<uint64_t>(file_size, h.data_offset);
  if (have != h.data_bytes) throw bad(name, size_mismatch(h, have));
  NpyArray a;
  a.descr = h.descr;
  a.shape = h.shape;
  char* dst = allocate_data(a, h, name);
  f.clear();
  f.seekg(std::streamoff(h.data_offset));
  f.read(dst, std::streamsize(h.data_bytes));
  if (uint64_t(f.gcount()) != h.data_bytes) throw bad(name, "read failed (the file changed while it was read?)");
  return a;
}

std::optional<std::string> nonfinite_values(const NpyArray& a) {
  int64_t nans = 0, infs = 0, first = -1;
  for (size_t i = 0; i < a.f32.size(); ++i) {
    const float v = a.f32[i];
    if (std::isfinite(v)) continue;
    (std::isnan(v) ? nans : infs) += 1;
    if (first < 0) first = int64_t(i);
  }
  if (first < 0) return std::nullopt;
  // The flat index as a C-order multi-index.
  std::vector<int64_t> idx(a.shape.size());
  int64_t rest = first;
  for (size_t k = a.shape.size(); k-- > 0;) {
    const int64_t d = std::max<int64_t>(1, a.shape[k]);
    idx[k] = rest % d;
    rest /= d;
  }
  std::string at = "[";
  for (size_t k = 0; k < idx.size(); ++k) at += (k ? ", " : "") + std::to_string(idx[k]);
  at += "]";
  std::string what;
  if (nans) what += std::to_string(nans) + " NaN";
  if (infs) what += (what.empty() ? "" : " and ") + std::to_string(infs) + " infinite";
  return what + " value(s); the first at " + at + " is " + (std::isnan(a.f32[size_t(first)]) ? "NaN" : "infinite");
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
