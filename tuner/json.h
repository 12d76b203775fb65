// Minimal JSON text writing (strings escaped, numbers in round-trip form) for
// the --json outputs of the command.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace detfuse::tuner {

inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

inline std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  double back = std::strtod(b, nullptr);
  for (int p = 1; p <= 17; ++p) {
    char s[40];
    std::snprintf(s, sizeof s, "%.*g", p, v);
    if (std::strtod(s, nullptr) == back) return s;
  }
  return b;
}

}  // namespace detfuse::tuner
