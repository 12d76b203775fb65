// Ranking of measured variants and the choice of the best one (pure).
//
// Eligible to win: status ok, correctness checked and passed, and determinism
// run_to_run (any level when allow_nondeterministic). Eligible variants are
// ranked by median time (ties: name); the others follow, those with a timing
// first, each with the reason it cannot win.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/records.h"

namespace detfuse::tuner {

struct Candidate {
  std::string variant;
  std::string status = db::kResultOk;  // db result status
  std::string reason;                  // why not ok
  std::optional<bool> correct;         // empty: not checked
  std::string correctness_note;        // e.g. "dW 3.1e-02 > 1.0e-02"
  std::string level;                   // a db level name ("none" .. "portable"), or empty: not checked
  db::LevelChecks checks;              // v6: each level check's outcome
  // What the variant's design promises. Digests that agree over K repeats are
  // evidence, not a promise: a variant built on atomics (whose order nothing
  // fixes) never wins by default even when its repeats happened to agree.
  bool deterministic_by_design = true;
  int max_distinct = 0;                // most distinct digests of any output
  std::string nondeterministic_outputs;  // "dW:5" etc.
  std::optional<double> median_ms;
  double spread = 0;
  double tflops = 0;
  int64_t peak_extra_bytes = 0;
};

Candidate candidate_from(const db::ResultRecord& r, const std::string& variant_name);

struct RankedRow {
  Candidate c;
  int rank = 0;      // 1 = the choice; 0 = cannot win
  std::string note;  // why it cannot win, or "" for eligible rows
};

// Whether a candidate may be selected; `why` gets the reason when not.
bool eligible(const Candidate& c, bool allow_nondeterministic, std::string* why = nullptr);

std::vector<RankedRow> rank_candidates(std::vector<Candidate> cands, bool allow_nondeterministic);

// The rank-1 row, if any candidate is eligible.
std::optional<Candidate> choose_best(const std::vector<Candidate>& cands, bool allow_nondeterministic);

// Per determinism level (run_to_run .. portable): the fastest candidate that
// may win by default (eligible() without --allow-nondeterministic) and has the
// level, and its cost: its median over the median of the fastest correct,
// timed candidate of any determinism (`fastest`). No best: no candidate has it.
struct LevelChoice {
  std::string level;
  std::optional<Candidate> best;
  double ratio = 0;  // best's median / fastest's median
};
struct LevelReport {
  std::optional<Candidate> fastest;
  std::vector<LevelChoice> levels;
};
LevelReport level_choices(const std::vector<Candidate>& cands);
// "level  variant  median ms  x fastest" lines.
std::string format_level_choices(const LevelReport& r);

// The ranked table as text (columns: rank, variant, median ms, spread, TFLOP/s,
// extra memory, determinism, status/notes).
std::string format_ranked_table(const std::vector<RankedRow>& rows);

}  // namespace detfuse::tuner
