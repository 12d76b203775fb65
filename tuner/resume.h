// Resume planning (over the store's bookkeeping; no SQL here).
//
// `tune --resume` continues the newest unfinished run (status running with a
// gone owner, crashed, interrupted, budget or failed; see tuner/ownership.h)
// made on the same device and build with the same seed, whose results all
// belong to the problems being tuned, and that no later run has resumed
// already. A run whose owner is alive is never resumed: --resume refuses.
// Older unfinished runs of the same device, build, seed and problems are
// marked abandoned (nobody will continue them). The continuation is a new run
// whose command line ends in "[resumes <uid>]"; the runs so linked form a
// chain. For each variant, by its latest row in the chain:
//   - none: measured;
//   - "running" in a run that ended "interrupted" (Ctrl-C abandoned it
//     cleanly): measured again;
//   - "running" in a run that ended otherwise without recording it: marked
//     crashed (presumed) and measured again;
//   - "crashed" presumed by another process (the owner died: a kill from
//     outside, most likely): measured again;
//   - "crashed" recorded by its owner (the variant took its worker down):
//     skipped, unless --retry-crashed;
//   - any other final status: skipped.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "db/store.h"

namespace detfuse::tuner {

enum class ResumeAction { run, skip, mark_crashed_and_run };

// state: the variant's latest row in the chain (nullptr: none); run_status: the
// status of the run that holds that row.
ResumeAction plan_resume(const db::VariantState* state, const std::string& run_status, bool retry_crashed = false);

// " [resumes <uid>]", appended to a continuation's command line.
std::string resume_tag(const std::string& uid);
// The uid a command line resumes, or "".
std::string resumed_uid(const std::string& command_line);

// The run to resume, if any; `why_not` explains when none qualifies, `older`
// receives the older unfinished runs that also match (to be marked abandoned).
// Throws detfuse::Error (runtime) with live_owner_message() when the newest
// matching run is still running: its owner is alive (mark_dead_runs() has
// marked the dead ones first). A running run without results yet (its device
// is not known) does not match.
std::optional<db::Id> find_resumable_run(const db::Store& store, db::Id device_id, db::Id build_id,
                                         const std::set<db::Id>& problem_ids, int64_t seed,
                                         std::string* why_not = nullptr, std::vector<db::Id>* older = nullptr);

// The run and every run it (transitively) resumes.
std::set<db::Id> resume_chain(const db::Store& store, db::Id run_id);

inline constexpr const char* kCrashedReason =
    "the process ended while this variant ran (killed, crashed, or the CUDA context was lost); found by --resume";

}  // namespace detfuse::tuner
