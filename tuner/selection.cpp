#include "tuner/selection.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tuner/text.h"

namespace detfuse::tuner {

Candidate candidate_from(const db::ResultRecord& r, const std::string& variant_name) {
  Candidate c;
  c.variant = variant_name;
  c.status = r.status;
  c.reason = r.reason;
  if (r.correctness) {
    c.correct = r.correctness->pass;
    if (!r.correctness->pass) {
      std::ostringstream os;
      os.precision(2);
      for (const auto& [k, v] : r.correctness->errors) {
        if (!(v <= r.correctness->tolerance) || std::isnan(v)) {
          os << (os.tellp() > 0 ? ", " : "") << k << " " << std::scientific << v;
        }
      }
      c.correctness_note = os.str();
    }
  }
  if (r.determinism) {
    c.level = r.determinism->level;
    c.checks = r.determinism->checks;
    std::string nd;
    for (const auto& [out, n] : r.determinism->distinct) {
      c.max_distinct = std::max(c.max_distinct, n);
      if (n > 1) nd += (nd.empty() ? "" : ",") + out + ":" + std::to_string(n);
    }
    c.nondeterministic_outputs = nd;
  }
  if (r.timing && !r.timing->samples_ms.empty()) {
    c.median_ms = r.timing->median_ms;
    c.spread = r.timing->median_ms > 0 ? (r.timing->max_ms - r.timing->min_ms) / r.timing->median_ms : 0;
    c.tflops = r.timing->tflops;
    c.peak_extra_bytes = r.timing->peak_extra_bytes;
  }
  return c;
}

bool eligible(const Candidate& c, bool allow_nondeterministic, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (c.status != db::kResultOk) return no(c.status + (c.reason.empty() ? "" : ": " + c.reason));
  if (!c.correct.has_value()) return no("correctness not checked");
  if (!*c.correct) return no("incorrect" + (c.correctness_note.empty() ? "" : " (" + c.correctness_note + ")"));
  if (!c.median_ms) return no("not timed");
  if (!allow_nondeterministic && !c.deterministic_by_design)
    return no(std::string("nondeterministic by design (fp32 atomics") +
              (c.level == db::kLevelRunToRun ? "; its repeats happened to agree" : "") +
              "); --allow-nondeterministic lets it win");
  // Every level above none implies run_to_run (db/records.h).
  if (!allow_nondeterministic && db::level_rank(c.level) < db::level_rank(db::kLevelRunToRun)) {
    if (c.level.empty()) return no("determinism not checked");
    return no("nondeterministic" +
              (c.nondeterministic_outputs.empty() ? "" : " (distinct digests " + c.nondeterministic_outputs + ")") +
              "; --allow-nondeterministic lets it win");
  }
  if (why) why->clear();
  return true;
}

std::vector<RankedRow> rank_candidates(std::vector<Candidate> cands, bool allow_nondeterministic) {
  std::vector<RankedRow> rows;
  rows.reserve(cands.size());
  for (auto& c : cands) {
    RankedRow r;
    r.c = std::move(c);
    std::string why;
    r.rank = eligible(r.c, allow_nondeterministic, &why) ? 1 : 0;
    r.note = why;
    rows.push_back(std::move(r));
  }
  auto group = [](const RankedRow& r) { return r.rank ? 0 : (r.c.median_ms ? 1 : 2); };
  std::stable_sort(rows.begin(), rows.end(), [&](const RankedRow& a, const RankedRow& b) {
    int ga = group(a), gb = group(b);
    if (ga != gb) return ga < gb;
    if (ga < 2 && *a.c.median_ms != *b.c.median_ms) return *a.c.median_ms < *b.c.median_ms;
    return a.c.variant < b.c.variant;
  });
  int k = 0;
  for (auto& r : rows)
    if (r.rank) r.rank = ++k;
  return rows;
}

std::optional<Candidate> choose_best(const std::vector<Candidate>& cands, bool allow_nondeterministic) {
  auto rows = rank_candidates(cands, allow_nondeterministic);
  if (!rows.empty() && rows.front().rank == 1) return rows.front().c;
  return std::nullopt;
}

LevelReport level_choices(const std::vector<Candidate>& cands) {
  LevelReport rep;
  for (const auto& c : cands) {
    if (c.status != db::kResultOk || !c.correct.value_or(false) || !c.median_ms) continue;
    if (!rep.fastest || *c.median_ms < *rep.fastest->median_ms ||
        (*c.median_ms == *rep.fastest->median_ms && c.variant < rep.fastest->variant))
      rep.fastest = c;
  }
  const auto& names = db::level_names();
  for (size_t i = 1; i < names.size(); ++i) {
    LevelChoice lc;
    lc.level = names[i];
    for (const auto& c : cands) {
      if (!eligible(c, false)) continue;
      // A candidate without stored checks (level only) has run_to_run by its level.
      const bool has = lc.level == db::kLevelRunToRun ? db::level_rank(c.level) >= 1 : c.checks.has(lc.level);
      if (!has) continue;
      if (!lc.best || *c.median_ms < *lc.best->median_ms ||
          (*c.median_ms == *lc.best->median_ms && c.variant < lc.best->variant))
        lc.best = c;
    }
    if (lc.best && rep.fastest && *rep.fastest->median_ms > 0) lc.ratio = *lc.best->median_ms / *rep.fastest->median_ms;
    rep.levels.push_back(lc);
  }
  return rep;
}

std::string format_level_choices(const LevelReport& r) {
  size_t w = 7;
  for (const auto& l : r.levels)
    if (l.best) w = std::max(w, l.best->variant.size());
  if (r.fastest) w = std::max(w, r.fastest->variant.size());
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-10s  %-*s  %10s  %9s\n", "level", int(w), "variant", "median ms", "x fastest");
  os << buf;
  if (r.fastest) {
    std::snprintf(buf, sizeof buf, "%-10s  %-*s  %10.3f  %9.3f\n", "(any)", int(w), r.fastest->variant.c_str(),
                  *r.fastest->median_ms, 1.0);
    os << buf;
  }
  for (const auto& l : r.levels) {
    if (l.best)
      std::snprintf(buf, sizeof buf, "%-10s  %-*s  %10.3f  %9.3f\n", l.level.c_str(), int(w), l.best->variant.c_str(),
                    *l.best->median_ms, l.ratio);
    else
      std::snprintf(buf, sizeof buf, "%-10s  %-*s  %10s  %9s\n", l.level.c_str(), int(w), "(none shown)", "-", "-");
    os << buf;
  }
  return os.str();
}

std::string format_ranked_table(const std::vector<RankedRow>& rows) {
  size_t w = 7;
  for (const auto& r : rows) w = std::max(w, r.c.variant.size());
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%4s  %-*s  %10s  %7s  %8s  %10s  %-10s  %s\n", "rank", int(w), "variant",
                "median ms", "spread", "TFLOP/s", "extra mem", "determin.", "notes");
  os << buf;
  for (const auto& r : rows) {
    std::string rank = r.rank ? std::to_string(r.rank) : "-";
    std::string med = "-", spread = "-", tf = "-", mem = "-";
    if (r.c.median_ms) {
      std::snprintf(buf, sizeof buf, "%.3f", *r.c.median_ms);
      med = buf;
      std::snprintf(buf, sizeof buf, "%.1f%%", r.c.spread * 100);
      spread = buf;
      std::snprintf(buf, sizeof buf, "%.1f", r.c.tflops);
      tf = buf;
      mem = format_bytes(double(r.c.peak_extra_bytes));
    }
    std::string det = r.c.level.empty() ? "-" : r.c.level;
    std::snprintf(buf, sizeof buf, "%4s  %-*s  %10s  %7s  %8s  %10s  %-10s  %s\n", rank.c_str(), int(w),
                  r.c.variant.c_str(), med.c_str(), spread.c_str(), tf.c_str(), mem.c_str(), det.c_str(),
                  one_line(r.note).c_str());
    os << buf;
  }
  return os.str();
}

}  // namespace detfuse::tuner
