// Who owns a tuning run, and whether that owner is gone (the policy half of
// runs that know who owns them; the store keeps owner and heartbeat, db/).
//
// A run records its owner: host name, pid, and the process start time (ms
// since the epoch: boot time plus /proc/<pid>/stat field 22), which tells a
// reused pid apart. The tuner writes a heartbeat between variants and, while
// a supervised worker measures, about every `heartbeat_every_s` seconds.
//
// An owner is gone when
//   - same host: no process has its pid, or the process with its pid started
//     at another time (the pid was reused);
//   - another host: its heartbeat is older than `stale_after_s` (default 10
//     minutes; the host's clocks are trusted to agree within that);
//   - unknown (a run written before schema v3, no owner or heartbeat): gone,
//     as --resume treated every unfinished run before.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "db/store.h"

namespace detfuse::tuner {

inline constexpr double kHeartbeatEveryS = 10;
inline constexpr double kStaleHeartbeatS = 600;

std::string this_host();
// Start time of a process of this host in ms since the epoch; nullopt when no
// process has that pid (or /proc cannot say).
std::optional<int64_t> process_start_ms(int64_t pid);
// This process as a run owner.
db::RunOwner this_process_owner();

struct OwnerCheck {
  std::string host = this_host();
  double stale_after_s = kStaleHeartbeatS;
  std::function<std::optional<int64_t>(int64_t pid)> start_ms = process_start_ms;  // replaceable by tests
};

// nullopt when the owner may be alive; else why it is gone (one line, e.g.
// "its process (pid 1234 on host h) is gone").
std::optional<std::string> owner_gone(const db::RunOwner& owner, double heartbeat_age_s, const OwnerCheck& check = {});

// Marks crashed every "running" run of the store whose owner is gone, and its
// "running" result rows as presumed crashes (compare-and-set on the heartbeat
// seen, so an owner that is alive after all keeps its run). Returns one line
// per run marked.
std::vector<std::string> mark_dead_runs(db::Store& store, const OwnerCheck& check = {});

// A run that --resume would continue but whose owner is alive: the refusal.
std::string live_owner_message(const db::RunRecord& run, double heartbeat_age_s);

}  // namespace detfuse::tuner
