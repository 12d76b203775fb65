// The tuned C++ API: run FLCE with the variant the autotuner measured best for
// the current GPU and this shape, falling back to the nearest tuned shape, then
// to the built-in heuristic (tuner/best.h), and saying which it used.
//
//   using namespace detfuse;
//   auto choice = tuner::forward_backward(problem, args, stream);            // ./detfuse.db
//   auto choice = tuner::forward_backward(problem, args, stream, tuner::tuned("/data/h200.db"));
//   std::cerr << choice.variant->desc.name << " (" << to_string(choice.source) << ")\n";
//   const FlceVariant& v = tuner::select_flce(problem, FlceMode::forward_backward);
//
// FLCE's backward runs the variant chosen for forward_backward (the mode the
// tuner measures). The answer for a (database, GPU, problem, mode, policy) is looked up once per
// process and cached; clear_selection_cache() forgets it (e.g. after tuning).
// A missing or unreadable database is not an error: the heuristic answers and
// the note says why.
#pragma once

#include <cuda_runtime_api.h>

#include <filesystem>
#include <string>

#include "db/store.h"
#include "kernels/registry.h"
#include "tuner/best.h"

namespace detfuse::tuner {

struct Selection {
  std::filesystem::path db_path;       // empty: heuristic only
  bool allow_nondeterministic = false; // let an atomic (nondeterministic) variant be chosen
  // The determinism level the stored result must have (db/records.h: none,
  // run_to_run, sm_count, config, portable); "" = run_to_run and
  // deterministic by design (or anything with allow_nondeterministic). An
  // unknown name throws invalid_argument. Without such a result the
  // heuristic answers and the note says its level was never shown.
  std::string level;
};

// Selection from a tuning database (default ./detfuse.db).
Selection tuned(const std::filesystem::path& db_path = db::kDefaultPath, bool allow_nondeterministic = false,
                const std::string& level = "");
// The built-in heuristic only.
Selection heuristic_only();

struct FlceChoice {
  const FlceVariant* variant = nullptr;
  ChoiceSource source = ChoiceSource::heuristic;
  std::string tuned_problem_key;  // tuned/nearest: the problem it was measured on
  double distance = 0;            // nearest: shape distance
  std::string note;               // what the user should know, one line
};

// The choice for the current device (cudaGetDevice).
FlceChoice choose_flce(const FlceProblem& p, FlceMode mode, const Selection& sel = tuned());
const FlceVariant& select_flce(const FlceProblem& p, FlceMode mode, const Selection& sel = tuned());

// Entry points on the selected variant (flce::run: validation, workspace).
FlceChoice forward(const FlceProblem& p, const FlceArgs& args, cudaStream_t stream = nullptr,
                   const Selection& sel = tuned());
FlceChoice forward_backward(const FlceProblem& p, const FlceArgs& args, cudaStream_t stream = nullptr,
                            const Selection& sel = tuned());
FlceChoice backward(const FlceProblem& p, const FlceArgs& args, cudaStream_t stream = nullptr,
                    const Selection& sel = tuned());

// The tuned choice for attention (the mode the tuner measures is
// forward_backward; forward alone may be tuned with Mode::forward). Running it
// is kernels/attention's run(); this only chooses.
struct AttentionChoice {
  const AttentionVariant* variant = nullptr;
  ChoiceSource source = ChoiceSource::heuristic;
  std::string tuned_problem_key;
  double distance = 0;
  std::string note;
};
AttentionChoice choose_attention(const AttentionProblem& p, Mode mode = Mode::forward_backward,
                                 const Selection& sel = tuned());
const AttentionVariant& select_attention(const AttentionProblem& p, Mode mode = Mode::forward_backward,
                                         const Selection& sel = tuned());

void clear_selection_cache();

}  // namespace detfuse::tuner
