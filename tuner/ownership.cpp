#include "tuner/ownership.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "tuner/text.h"

namespace detfuse::tuner {

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

namespace {
// Boot time (s since the epoch), from /proc/stat's btime.
std::optional<int64_t> boot_time_s() {
  std::ifstream f("/proc/stat");
  std::string key;
  while (f >> key) {
    if (key == "btime") {
      int64_t t = 0;
      if (f >> t) return t;
      return std::nullopt;
    }
    f.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}
}  // namespace

std::optional<int64_t> process_start_ms(int64_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  // The command name (field 2) is in parentheses and may hold spaces: fields
  // 3.. follow the last ')'. starttime is field 22, in clock ticks since boot.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  int64_t ticks = -1;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) ticks = std::stoll(field);
  if (ticks < 0) return std::nullopt;
  const auto boot = boot_time_s();
  const long hz = sysconf(_SC_CLK_TCK);
  if (!boot || hz <= 0) return std::nullopt;
  return *boot * 1000 + ticks * 1000 / hz;
}

db::RunOwner this_process_owner() {
  db::RunOwner o;
  o.host = this_host();
  o.pid = getpid();
  o.start_time = process_start_ms(o.pid).value_or(0);
  return o;
}

std::optional<std::string> owner_gone(const db::RunOwner& owner, double heartbeat_age_s, const OwnerCheck& check) {
  if (!owner.known()) return std::string("its owner was not recorded (a run from before schema v3)");
  const std::string who = "pid " + std::to_string(owner.pid) + " on host " + owner.host;
  if (owner.host == check.host) {
    const auto started = check.start_ms(owner.pid);
    if (!started) return "its process (" + who + ") is gone";
    // Start times read through /proc may differ by a tick's rounding.
    if (owner.start_time != 0 && std::llabs(*started - owner.start_time) > 20)
      return "its process (" + who + ") is gone (that pid now belongs to a process started later)";
    return std::nullopt;
  }
  if (std::isnan(heartbeat_age_s) || heartbeat_age_s > check.stale_after_s)
    return "its owner (" + who + ") has not written a heartbeat for " +
           (std::isnan(heartbeat_age_s) ? std::string("ever") : format_duration(heartbeat_age_s)) + " (limit " +
           format_duration(check.stale_after_s) + ")";
  return std::nullopt;
}

std::vector<std::string> mark_dead_runs(db::Store& store, const OwnerCheck& check) {
  std::vector<std::string> done;
  for (const auto& u : store.unfinished_runs()) {
    const auto why = owner_gone(u.record.owner, u.heartbeat_age_s, check);
    if (!why) continue;
    const std::string reason = "the run's " + why->substr(4) + "; found by " + this_host() + " pid " +
                               std::to_string(getpid());
    const std::optional<std::string> seen =
        u.record.heartbeat_at.empty() ? std::nullopt : std::optional<std::string>(u.record.heartbeat_at);
    // Rows first: if the owner proves alive (a heartbeat since), neither changes.
    int rows = 0;
    for (const auto& r : store.run_results(u.id))
      if (r.record.status == db::kResultRunning &&
          store.mark_crashed(r.id, "the process ended while this variant ran (" + *why + "); found by --resume or a later tune", seen))
        ++rows;
    if (store.mark_run_crashed(u.id, reason, seen))
      done.push_back("run " + u.record.uid + " marked crashed: " + *why +
                     (rows ? "; " + std::to_string(rows) + " variant(s) it was measuring marked crashed" : ""));
  }
  return done;
}

std::string live_owner_message(const db::RunRecord& run, double heartbeat_age_s) {
  std::string age = std::isnan(heartbeat_age_s) ? "no heartbeat" : "last heartbeat " + format_duration(heartbeat_age_s) + " ago";
  return "--resume: run " + run.uid + " is still running (pid " + std::to_string(run.owner.pid) + " on host " +
         run.owner.host + ", " + age + "); it owns these problems, so it is not resumed. Wait for it to end or stop "
         "it (Ctrl-C or kill); a run whose process is gone is resumed";
}

}  // namespace detfuse::tuner
