// The answer to "which variant should run this problem on this GPU?", shared by
// `detfuse best` and the tuned C++ API (tuner/tuned.h). In order:
//   1. tuned:     the store's best result for this device and exact problem;
//   2. nearest:   the best result of the nearest tuned shape of the same
//                 family with the same dtype and options (distance: sum over the
//                 named dims of |log2(a/b)|, db/README.md), marked as such;
//   3. heuristic: the family's built-in choice (flce::heuristic_variant, ...),
//                 marked as such.
// Family-neutral: the problem is a tuner::Problem (tuner/family.h).
// A stored variant that this build does not have, or that cannot run the
// problem, is passed over with a note. Results from another build or another
// driver of the same GPU are used and said so.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "db/store.h"
#include "kernels/common/device_info.h"
#include "kernels/registry.h"
#include "tuner/families.h"

namespace detfuse::tuner {

enum class ChoiceSource { tuned, nearest, heuristic };
const char* to_string(ChoiceSource s);

// The built-in choice for a problem: a variant name. Empty function: the
// family's own heuristic (FamilyTraits<P>::heuristic).
using HeuristicFn = std::function<std::string(const Problem&, Mode, const DeviceInfo&)>;
HeuristicFn default_heuristic(const Registry& reg);
// A heuristic from per-family ones written against the family's types (tests
// and the command replace them); an empty one falls back to the family's own.
HeuristicFn heuristic_from(const Registry& reg, FlceHeuristicFn flce, AttentionHeuristicFn attention = {});

struct BestAnswer {
  ChoiceSource source = ChoiceSource::heuristic;
  std::string variant;            // canonical name
  std::string problem_key;        // the problem asked about
  std::string tuned_problem_key;  // the problem the result was measured on (tuned/nearest)
  double distance = 0;            // nearest: shape distance
  std::optional<db::BestResult> result;  // tuned/nearest
  std::string device;             // the GPU answered for: "NAME (UUID)"
  std::vector<std::string> notes; // everything the user should know
};

// store may be null (no database). device_ids: the store's rows for this GPU,
// best first (exact device, then the same UUID under another driver).
// `level` (a db level name; "" = the default rule: run_to_run and
// deterministic by design, or anything with allow_nondeterministic): only a
// stored result that HAS the level is taken (db::Store::best); a level taken
// from the nearest tuned shape is noted as such (it was shown there, not on
// this shape); the heuristic fallback says that its level was never shown.
// An unknown level name throws invalid_argument.
BestAnswer resolve_best(const db::Store* store, const std::vector<db::Id>& device_ids, const DeviceInfo& dev,
                        const Problem& p, Mode mode, bool allow_nondeterministic, const Registry& reg,
                        const HeuristicFn& heuristic = {}, const std::string& level = "");

// The store's rows for a GPU: the exact device record first, then others with
// the same UUID (another driver).
std::vector<db::Id> device_rows_for(const db::Store& store, const DeviceInfo& dev);

}  // namespace detfuse::tuner
