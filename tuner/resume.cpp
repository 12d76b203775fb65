#include "tuner/resume.h"

#include <map>

namespace detfuse::tuner {

ResumeAction plan_resume(const db::VariantState* state, const std::string& run_status) {
  if (!state) return ResumeAction::run;
  if (state->status == db::kResultRunning)
    return run_status == db::kRunInterrupted ? ResumeAction::run : ResumeAction::mark_crashed;
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
                                         std::string* why_not) {
  const auto runs = store.list_runs();  // newest first
  std::set<std::string> superseded;
  for (const auto& r : runs) {
    std::string u = resumed_uid(r.record.command_line);
    if (!u.empty()) superseded.insert(u);
  }
  std::string why = "no unfinished run in " + store.path().string();
  for (const auto& run : runs) {
    if (run.record.status == db::kRunComplete || superseded.count(run.record.uid)) continue;
    if (run.record.seed != seed) {
      why = "the newest unfinished run used seed " + std::to_string(run.record.seed);
      continue;
    }
    bool same = true;
    for (const auto& r : store.run_results(run.id)) {
      if (r.record.device_id != device_id || r.record.build_id != build_id ||
          !problem_ids.count(r.record.problem_id)) {
        same = false;
        break;
      }
    }
    if (!same) {
      why = "the unfinished runs were made on another device or build, or for other problems";
      continue;
    }
    return run.id;
  }
  if (why_not) *why_not = why;
  return std::nullopt;
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
