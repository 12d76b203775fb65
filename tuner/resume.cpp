#include "tuner/resume.h"

#include <cmath>
#include <map>

#include "kernels/common/error.h"
#include "tuner/ownership.h"

namespace detfuse::tuner {

ResumeAction plan_resume(const db::VariantState* state, const std::string& run_status, bool retry_crashed) {
  if (!state) return ResumeAction::run;
  if (state->status == db::kResultRunning)
    return run_status == db::kRunInterrupted ? ResumeAction::run : ResumeAction::mark_crashed_and_run;
  if (state->status == db::kResultCrashed)
    return state->crash_presumed || retry_crashed ? ResumeAction::run : ResumeAction::skip;
  return ResumeAction::skip;
}

std::string resume_tag(const std::string& uid) { return " [resumes " + uid + "]"; }

std::string resumed_uid(const std::string& command_line) {
  const std::string open = " [resumes ";
  size_t i = command_line.rfind(open);
  if (i == std::string::npos || command_line.back() != ']') return "";
  return command_line.substr(i + open.size(), command_line.size() - 1 - (i + open.size()));
}

std::optional<db::Id> find_resumable_run(const db::Store& store, db::Id device_id, db::Id build_id,
                                         const std::set<db::Id>& problem_ids, int64_t seed,
                                         std::string* why_not, std::vector<db::Id>* older) {
  const auto runs = store.list_runs();  // newest first
  std::set<std::string> superseded;
  for (const auto& r : runs) {
    std::string u = resumed_uid(r.record.command_line);
    if (!u.empty()) superseded.insert(u);
  }
  std::string why = "no unfinished run in " + store.path().string();
  std::optional<db::Id> found;
  for (const auto& run : runs) {
    const std::string& st = run.record.status;
    if (st == db::kRunComplete || st == db::kRunAbandoned || superseded.count(run.record.uid)) continue;
    if (run.record.seed != seed) {
      if (!found) why = "the newest unfinished run used seed " + std::to_string(run.record.seed);
      continue;
    }
    bool same = true;
    const auto results = store.run_results(run.id);
    for (const auto& r : results) {
      if (r.record.device_id != device_id || r.record.build_id != build_id ||
          !problem_ids.count(r.record.problem_id)) {
        same = false;
        break;
      }
    }
    if (!same) {
      if (!found) why = "the unfinished runs were made on another device or build, or for other problems";
      continue;
    }
    if (st == db::kRunRunning) {
      if (results.empty()) continue;  // its device is not known yet: not ours to judge
      if (found) continue;            // an older live run: not abandoned, not ours
      double age = std::nan("");
      for (const auto& u : store.unfinished_runs())
        if (u.id == run.id) age = u.heartbeat_age_s;
      throw Error(live_owner_message(run.record, age));
    }
    if (!found) {
      found = run.id;
      if (!older) break;
    } else {
      older->push_back(run.id);
    }
  }
  if (!found && why_not) *why_not = why;
  return found;
}

std::set<db::Id> resume_chain(const db::Store& store, db::Id run_id) {
  std::map<std::string, db::Id> by_uid;
  std::map<db::Id, std::string> cmd;
  for (const auto& r : store.list_runs()) {
    by_uid[r.record.uid] = r.id;
    cmd[r.id] = r.record.command_line;
  }
  std::set<db::Id> chain;
  db::Id id = run_id;
  while (chain.insert(id).second) {
    auto it = by_uid.find(resumed_uid(cmd[id]));
    if (it == by_uid.end()) break;
    id = it->second;
  }
  return chain;
}

}  // namespace detfuse::tuner
