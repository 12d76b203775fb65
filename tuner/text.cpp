#include "tuner/text.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "kernels/common/error.h"

namespace detfuse::tuner {

std::string format_tolerance(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0e", v);
  return b;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

double parse_duration(const std::string& text) {
  const std::string s = trim(text);
  auto bad = [&]() {
    return invalid_argument("malformed duration '" + text + "' (expected e.g. 90s, 10m, 1h30m)");
  };
  if (s.empty()) throw bad();
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
    if (j == i) throw bad();
    const std::string num = s.substr(i, j - i);
    if (num.find('.') != num.rfind('.') || num == ".") throw bad();
    double v = std::stod(num);
    size_t k = j;
    while (k < s.size() && std::isalpha(static_cast<unsigned char>(s[k]))) ++k;
    const std::string unit = s.substr(j, k - j);
    double mult;
    if (unit.empty()) {
      if (k != s.size() || any) throw bad();  // a bare number only on its own
      mult = 1;
    } else if (unit == "ms") {
      mult = 1e-3;
    } else if (unit == "s" || unit == "sec") {
      mult = 1;
    } else if (unit == "m" || unit == "min") {
      mult = 60;
    } else if (unit == "h") {
      mult = 3600;
    } else {
      throw bad();
    }
    total += v * mult;
    any = true;
    i = k;
  }
  if (!std::isfinite(total)) throw bad();
  return total;
}

std::string format_duration(double seconds) {
  char buf[64];
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 1.0) {
    std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  } else if (seconds < 10.0) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < 60.0) {
    std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  } else if (seconds < 3600.0) {
    long t = std::lround(seconds);
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  } else {
    long t = std::lround(seconds / 60.0);
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 60, t % 60);
  }
  return buf;
}

double estimate_remaining_seconds(int done, int total, double elapsed_s) {
  if (done <= 0 || total <= done) return done >= total ? 0.0 : NAN;
  return elapsed_s / done * (total - done);
}

std::string format_eta(int done, int total, double elapsed_s) {
  double r = estimate_remaining_seconds(done, total, elapsed_s);
  if (std::isnan(r)) return "ETA ?";
  return "ETA " + format_duration(r);
}

std::string progress_line(int index, int total, const std::string& what, double item_seconds, int done,
                          double elapsed_s) {
  return "[" + std::to_string(index) + "/" + std::to_string(total) + "] " + what + "... " +
         format_duration(item_seconds) + ", " + format_eta(done, total, elapsed_s);
}

Shape3 parse_shape(const std::string& text, const std::string& option) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(option + ": " + why + " in '" + text + "' (expected N,D,V, e.g. 16384,4096,128256)");
  };
  int64_t v[3];
  size_t start = 0;
  for (int f = 0; f < 3; ++f) {
    size_t comma = text.find(',', start);
    if ((f < 2) != (comma != std::string::npos)) throw bad("expected three comma-separated numbers");
    std::string part = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos)
      throw bad("'" + part + "' is not a positive integer");
    if (part.size() > 12) throw bad("'" + part + "' is too large");
    v[f] = std::stoll(part);
    if (v[f] <= 0) throw bad("'" + part + "' is not a positive integer");
    start = comma == std::string::npos ? text.size() : comma + 1;
  }
  return Shape3{v[0], v[1], v[2]};
}

std::vector<int64_t> parse_dims(const std::string& text, size_t count, const std::string& option,
                                const std::string& expected) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(option + ": " + why + " in '" + text + "' (expected " + expected + ")");
  };
  std::vector<int64_t> v;
  size_t start = 0;
  for (size_t f = 0; f < count; ++f) {
    size_t comma = text.find(',', start);
    if ((f + 1 < count) != (comma != std::string::npos))
      throw bad("expected " + std::to_string(count) + " comma-separated numbers");
    std::string part = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos)
      throw bad("'" + part + "' is not a positive integer");
    if (part.size() > 12) throw bad("'" + part + "' is too large");
    v.push_back(std::stoll(part));
    if (v.back() <= 0) throw bad("'" + part + "' is not a positive integer");
    start = comma == std::string::npos ? text.size() : comma + 1;
  }
  return v;
}

std::string format_bytes(double bytes) {
  char buf[64];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

std::string one_line(const std::string& text) {
  std::string s = text;
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return trim(s);
}

}  // namespace detfuse::tuner
