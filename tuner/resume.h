// Resume planning (over the store's bookkeeping; no SQL here).
//
// `tune --resume` continues the newest unfinished run (status running,
// interrupted, budget or failed) made on the same device and build with the
// same seed, whose results all belong to the problems being tuned, and that no
// later run has resumed already. The continuation is a new run whose command
// line ends in "[resumes <uid>]"; the runs so linked form a chain, and a variant
// whose latest row in the chain is final is not measured again. A variant whose
// latest row is still "running" is
//   - measured again when the run holding that row ended "interrupted" (Ctrl-C
//     abandoned it cleanly),
//   - recorded as "crashed" otherwise (the process died while it ran: a kill, a
//     crash, a variant that took the CUDA context down) and not measured again.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "db/store.h"

namespace detfuse::tuner {

enum class ResumeAction { run, skip, mark_crashed };

// state: the variant's latest row in the chain (nullptr: none); run_status: the
// status of the run that holds that row.
ResumeAction plan_resume(const db::VariantState* state, const std::string& run_status);

// " [resumes <uid>]", appended to a continuation's command line.
std::string resume_tag(const std::string& uid);
// The uid a command line resumes, or "".
std::string resumed_uid(const std::string& command_line);

// The run to resume, if any; `why_not` explains when none qualifies.
std::optional<db::Id> find_resumable_run(const db::Store& store, db::Id device_id, db::Id build_id,
                                         const std::set<db::Id>& problem_ids, int64_t seed,
                                         std::string* why_not = nullptr);

// The run and every run it (transitively) resumes.
std::set<db::Id> resume_chain(const db::Store& store, db::Id run_id);

inline constexpr const char* kCrashedReason =
    "the process ended while this variant ran (killed, crashed, or the CUDA context was lost); found by --resume";

}  // namespace detfuse::tuner
