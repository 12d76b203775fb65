// Shared helpers of the store tests: a unique temporary directory removed at the
// end, sample records, and a raw-sqlite helper for fabricating files.
#pragma once

#include <grp.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "db/store.h"

namespace detfuse::db::test {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = fs::temp_directory_path() /
            ("detfuse-db-test-" + std::to_string(::getpid()) + "-" + std::to_string(t) + "-" +
             std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Runs SQL on a file with the raw sqlite3 API (no detfuse checks).
inline void raw_exec(const fs::path& p, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(p.string().c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

inline int64_t raw_count(const fs::path& p, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(p.string().c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  int64_t v = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
    v = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

// Runs `f` in a forked child. When this process is root (CI), the child first
// drops to uid/gid 65534 (nobody), so that file permissions apply to it as to
// a user. `f` returns "" on success or what went wrong. Returns the child's
// answer; sets *skipped (and returns "") when privileges cannot be dropped.
inline std::string in_unprivileged_child(const std::function<std::string()>& f, bool* skipped) {
  *skipped = false;
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg;
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      ::_exit(77);
    }
    try {
      msg = f();
    } catch (const std::exception& e) {
      msg = std::string("exception: ") + e.what();
    }
    if (!msg.empty()) (void)!::write(fds[1], msg.data(), msg.size());
    ::close(fds[1]);
    ::_exit(msg.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    *skipped = true;
    return "";
  }
  if (!WIFEXITED(status)) return "child died: " + msg;
  return msg;
}

// The message of the db::Error `f` throws (kind checked), or a failure text.
template <class F>
std::string error_of(F&& f, Error::Kind kind = Error::Kind::invalid_argument) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() != kind) return std::string("wrong kind: ") + e.what();
    return e.what();
  }
  return "no db::Error thrown";
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

inline DeviceRecord h200(const std::string& uuid = "GPU-11111111-2222-3333-4444-555555555555") {
  DeviceRecord d;
  d.uuid = uuid;
  d.name = "NVIDIA H200";
  d.cc = "9.0";
  d.sm_count = 132;
  d.total_memory_bytes = 150ll << 30;
  d.l2_bytes = 60ll << 20;
  d.driver_version = 13000;
  d.driver_release = "580.159.04";
  d.runtime_version = 13000;
  return d;
}

inline BuildRecord build_a() { return {"0.1.0", "c5e17a4abcde", "GNU 12.2.0", "-O3", "Release"}; }

inline ProblemRecord flce_problem(int64_t N, int64_t D, int64_t V, const std::string& dtype = "bf16") {
  const std::string key = "flce:N=" + std::to_string(N) + ",D=" + std::to_string(D) + ",V=" +
                          std::to_string(V) + ",dtype=" + dtype +
                          ",grad=fp32,ii=-100,red=mean,ls=0,z=0,cap=0,go=1";
  return make_problem_record(key, {"N", "D", "V"});
}

inline VariantRecord variant(const std::string& strategy, const std::string& tile = "bn128_bv128_bd64_w8_s3") {
  VariantRecord v;
  v.name = "flce.bf16.mma." + strategy + "." + tile;
  v.family = "flce";
  v.engine = "mma";
  v.strategy = strategy;
  v.dtype = "bf16";
  v.params = tile;
  v.deterministic_by_design = strategy != "atomic";
  return v;
}

inline std::string hex32(int k) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%032x", k);
  return buf;
}

// A complete result: correctness, K repeats of 4 outputs, timing samples.
// `deterministic` false makes dW differ between repeats.
inline ResultRecord full_result(Id run, Id dev, Id build, Id prob, Id var, int64_t seed, double median_ms,
                                bool pass = true, bool deterministic = true, int K = 3) {
  ResultRecord r;
  r.run_id = run;
  r.device_id = dev;
  r.build_id = build;
  r.problem_id = prob;
  r.variant_id = var;
  r.seed = seed;
  r.status = pass ? kResultOk : kResultIncorrect;
  if (!pass) r.reason = "dW error 3.1 > tolerance 1";
  Correctness c;
  c.checked_what = "full";
  c.errors = {{"loss", 1e-6}, {"lse", 2e-6}, {"dX", 0.25}, {"dW", pass ? 0.5 : 3.1}};
  c.tolerance = 1.0;
  c.pass = pass;
  r.correctness = c;
  Determinism d;
  d.repeats = K;
  for (int k = 0; k < K; ++k) {
    for (const char* out : {"loss", "lse", "dX", "dW"}) {
      const bool varies = !deterministic && std::string(out) == "dW";
      d.digests.push_back({k, out, hex32(int(var) * 100 + (varies ? k : 0) + (std::string(out) == "dW" ? 7 : 0))});
    }
  }
  d.level = deterministic ? kLevelRunToRun : kLevelNone;
  r.determinism = d;
  Timing t;
  for (int i = 0; i < 9; ++i) t.samples_ms.push_back(median_ms * (0.95 + 0.0125 * i));
  t.warmup = 3;
  t.clock_min_mhz = 1755;
  t.clock_max_mhz = 1980;
  t.clock_events = 0x4;  // v7: NVML's sw_power_cap bit seen during the samples
  t.peak_extra_bytes = 1 << 20;
  t.flops = 6.0 * 4096 * 4096 * 128256;
  summarize(t);
  r.timing = t;
  return r;
}

}  // namespace detfuse::db::test
