// Free helpers of the store: timestamps, uids, problem keys, shape distance and
// timing summaries, and small text helpers of the store_*.cpp files. No SQL here.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <random>
#include <set>

#include "db/store_impl.h"

namespace detfuse::db {

std::string now_utc() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms));
  return buf;
}

std::string new_uid() {
  // Fresh bits from the OS for every uid: a generator seeded once per thread
  // would hand the same sequence to processes forked after its first use (two
  // forked tuners then collide on runs.uid). begin_run is rare; this is cheap.
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", unsigned(rd()), unsigned(rd()), unsigned(rd()),
                unsigned(rd()));
  return buf;
}

ProblemRecord make_problem_record(const std::string& key, const std::vector<std::string>& shape_dims) {
  const auto colon = key.find(':');
  if (colon == std::string::npos || colon == 0) {
    throw Error("detfuse db: problem key '" + key + "' has no 'family:' prefix");
  }
  ProblemRecord p;
  p.family = key.substr(0, colon);
  p.key = key;
  const std::set<std::string> wanted(shape_dims.begin(), shape_dims.end());
  std::string options;
  size_t pos = colon + 1;
  while (pos <= key.size()) {
    size_t comma = key.find(',', pos);
    if (comma == std::string::npos) comma = key.size();
    const std::string field = key.substr(pos, comma - pos);
    pos = comma + 1;
    if (field.empty()) {
      if (comma == key.size()) break;
      throw Error("detfuse db: problem key '" + key + "' has an empty field");
    }
    const auto eq = field.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error("detfuse db: problem key '" + key + "': field '" + field + "' is not name=value");
    }
    const std::string name = field.substr(0, eq), value = field.substr(eq + 1);
    if (wanted.count(name)) {
      int64_t v = 0;
      size_t used = 0;
      try {
        v = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size() || v <= 0) {
        throw Error("detfuse db: problem key '" + key + "': shape dim " + name +
                    " must be an integer > 0, got '" + value + "'");
      }
      if (!p.shape.emplace(name, v).second) {
        throw Error("detfuse db: problem key '" + key + "': dim " + name + " appears twice");
      }
      continue;
    }
    if (name == "dtype") p.dtype = value;
    if (!options.empty()) options += ',';
    options += field;
  }
  for (const auto& d : shape_dims) {
    if (!p.shape.count(d)) throw Error("detfuse db: problem key '" + key + "' lacks shape dim " + d);
  }
  p.options_key = p.family + ":" + options;
  return p;
}

double shape_distance(const std::map<std::string, int64_t>& a, const std::map<std::string, int64_t>& b) {
  if (a.size() != b.size()) throw Error("detfuse db: shape_distance: shapes have different dims");
  double d = 0;
  auto ib = b.begin();
  for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first) {
      throw Error("detfuse db: shape_distance: dim " + ia->first + " vs " + ib->first);
    }
    if (ia->second <= 0 || ib->second <= 0) {
      throw Error("detfuse db: shape_distance: dim " + ia->first + " must be > 0");
    }
    d += std::fabs(std::log2(double(ia->second) / double(ib->second)));
  }
  return d;
}

namespace detail {

bool valid_run_status(const std::string& s) {
  return s == kRunRunning || s == kRunComplete || s == kRunBudget || s == kRunInterrupted || s == kRunFailed ||
         s == kRunCrashed || s == kRunAbandoned;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

double seconds_since(const std::string& iso) {
  std::tm tm{};
  int ms = 0;
  char z = 0;
  if (std::sscanf(iso.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms, &z) != 8 ||
      z != 'Z') {
    return std::numeric_limits<double>::quiet_NaN();
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t t = timegm(&tm);
  using namespace std::chrono;
  const double now = duration<double>(system_clock::now().time_since_epoch()).count();
  return now - (double(t) + ms * 1e-3);
}

}  // namespace detail

void summarize(Timing& t) {
  if (t.samples_ms.empty()) throw Error("detfuse db: summarize: Timing has no samples");
  std::vector<double> s = t.samples_ms;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  t.median_ms = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  t.min_ms = s.front();
  t.max_ms = s.back();
  t.tflops = t.median_ms > 0 ? t.flops / (t.median_ms * 1e-3) / 1e12 : 0.0;
}

}  // namespace detfuse::db

namespace detfuse::db {

// ------------------------------------------------------------ levels (v6)

const std::vector<std::string>& level_names() {
  static const std::vector<std::string> names = {kLevelNone, kLevelRunToRun, kLevelSmCount, kLevelConfig,
                                                 kLevelPortable};
  return names;
}

int level_rank(const std::string& level) {
  const auto& n = level_names();
  for (size_t i = 0; i < n.size(); ++i)
    if (n[i] == level) return int(i);
  return -1;
}

void check_level_name(const std::string& level, const std::string& what) {
  if (level_rank(level) >= 0) return;
  throw Error(what + ": unknown determinism level '" + level + "' (one of none, run_to_run, sm_count, config, portable)",
              Error::Kind::invalid_argument);
}

bool valid_check_outcome(const std::string& o) { return o == kCheckShown || o == kCheckFailed || o == kCheckNotChecked; }

std::string& LevelChecks::at(const std::string& level) {
  return const_cast<std::string&>(static_cast<const LevelChecks&>(*this).at(level));
}

const std::string& LevelChecks::at(const std::string& level) const {
  if (level == kLevelRunToRun) return run_to_run;
  if (level == kLevelSmCount) return sm_count;
  if (level == kLevelConfig) return config;
  if (level == kLevelPortable) return portable;
  throw Error("'" + level + "' is not a checked determinism level (run_to_run, sm_count, config, portable)",
              Error::Kind::invalid_argument);
}

bool LevelChecks::has(const std::string& level) const {
  check_level_name(level, "level");
  if (level == kLevelNone) return true;
  return run_to_run == kCheckShown && at(level) == kCheckShown;
}

void LevelChecks::note(const std::string& check, const std::string& text) {
  notes += (notes.empty() ? "" : "; ") + check + ": " + text;
}

std::string derive_level(const LevelChecks& c) {
  const auto& n = level_names();
  for (size_t i = n.size(); i-- > 1;)
    if (c.has(n[i])) return n[i];
  return kLevelNone;
}

}  // namespace detfuse::db
