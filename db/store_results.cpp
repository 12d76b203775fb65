// Results: validation, the insert of a result and its children, record_result
// (which replaces the owner's running marker or a presumed crash), reading back.
#include <algorithm>
#include <cmath>
#include <set>

#include "db/store_impl.h"

namespace detfuse::db {

using detail::StmtUse;

namespace {

bool valid_result_status(const std::string& s) {
  return s == kResultOk || s == kResultCannotRun || s == kResultError || s == kResultCrashed ||
         s == kResultIncorrect;
}

bool is_hex32(const std::string& s) {
  if (s.size() != 32) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The checks as stored: a writer that left run_to_run not_checked gets it from
// its level (run_to_run: shown) or from its digests (an output with several
// distinct digests: failed).
LevelChecks effective_checks(const Determinism& d) {
  LevelChecks c = d.checks;
  if (c.run_to_run != kCheckNotChecked) return c;
  if (level_rank(d.level) >= level_rank(kLevelRunToRun)) {
    c.run_to_run = kCheckShown;
    return c;
  }
  std::map<std::string, std::set<std::string>> distinct;
  for (const auto& g : d.digests) distinct[g.output].insert(g.digest);
  for (const auto& [out, set] : distinct)
    if (set.size() > 1) c.run_to_run = kCheckFailed;
  for (const auto& [out, n] : d.distinct)
    if (n > 1) c.run_to_run = kCheckFailed;
  return c;
}

void validate_checks(const Store::Impl& im, const LevelChecks& c, const std::string& what) {
  for (const char* l : {kLevelRunToRun, kLevelSmCount, kLevelConfig, kLevelPortable})
    if (!valid_check_outcome(c.at(l)))
      im.bad_input(what + ": the " + l + " check's outcome '" + c.at(l) + "' is not shown, failed or not_checked");
}

void validate_result(const Store::Impl& im, const ResultRecord& r) {
  if (!valid_result_status(r.status)) {
    im.fail("record_result: status '" + r.status +
            "' is not one of ok, cannot_run, error, crashed, incorrect");
  }
  if (r.status == kResultOk && !r.correctness) {
    im.fail("record_result: an 'ok' result needs a correctness check");
  }
  if (r.correctness && !std::isfinite(r.correctness->tolerance)) {
    im.fail("record_result: correctness tolerance must be finite");
  }
  if (const auto& d = r.determinism) {
    if (level_rank(d->level) < 0) {
      im.fail("record_result: determinism level '" + d->level +
              "' is not one of none, run_to_run, sm_count, config, portable");
    }
    validate_checks(im, d->checks, "record_result");
    std::set<std::pair<int, std::string>> seen;
    std::map<std::string, std::set<std::string>> distinct;
    for (const auto& g : d->digests) {
      if (!is_hex32(g.digest)) {
        im.fail("record_result: digest '" + g.digest + "' of " + g.output +
                " is not 32 lowercase hex digits");
      }
      if (g.repeat < 0 || g.repeat >= d->repeats) {
        im.fail("record_result: digest repeat " + std::to_string(g.repeat) + " outside 0.." +
                std::to_string(d->repeats - 1));
      }
      if (!seen.emplace(g.repeat, g.output).second) {
        im.fail("record_result: two digests for repeat " + std::to_string(g.repeat) + " output " + g.output);
      }
      distinct[g.output].insert(g.digest);
    }
    for (const auto& [out, n] : d->distinct) {
      auto it = distinct.find(out);
      if (it == distinct.end() || int(it->second.size()) != n) {
        im.fail("record_result: distinct count " + std::to_string(n) + " for " + out +
                " disagrees with the digests");
      }
    }
    const LevelChecks c = effective_checks(*d);
    if (c.run_to_run == kCheckShown) {
      for (const auto& [out, set] : distinct) {
        if (set.size() != 1) im.fail("record_result: level run_to_run but " + out + " has several digests");
      }
    }
    // A level given beyond run_to_run must be the one the checks show.
    if (level_rank(d->level) > level_rank(kLevelRunToRun) && d->level != derive_level(c)) {
      im.fail("record_result: determinism level '" + d->level + "' but the checks show '" + derive_level(c) + "'");
    }
  }
  if (const auto& t = r.timing) {
    for (double v : t->samples_ms) {
      if (!std::isfinite(v) || v < 0) im.fail("record_result: timing sample is not a finite time");
    }
    for (double v : {t->median_ms, t->min_ms, t->max_ms, t->flops, t->tflops}) {
      if (!std::isfinite(v)) im.fail("record_result: timing summary is not finite");
    }
  }
}

}  // namespace

namespace detail {

Id insert_result(const Store::Impl& im, const ResultRecord& r) {
  {
    StmtUse s(im.stmt(
        "INSERT INTO results (run_id, device_id, build_id, problem_id, variant_id, seed, status, "
        "reason, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
    s->bind_all(r.run_id, r.device_id, r.build_id, r.problem_id, r.variant_id, r.seed, r.status, r.reason, r.recorded_at.empty() ? now_utc() : r.recorded_at);
    s->run();
  }
  const Id id = im.last_id();
  if (const auto& c = r.correctness) {
    StmtUse s(im.stmt(
        "INSERT INTO correctness (result_id, checked_what, tolerance, pass) VALUES (?1, ?2, ?3, ?4)"));
    s->bind_all(id, c->checked_what, c->tolerance, c->pass);
    s->run();
    for (const auto& [out, err] : c->errors) {
      StmtUse e(im.stmt("INSERT INTO correctness_errors (result_id, output, error) VALUES (?1, ?2, ?3)"));
      e->bind_all(id, out, err);
      e->run();
    }
  }
  if (const auto& d = r.determinism) {
    {
      const LevelChecks c = effective_checks(*d);
      StmtUse s(im.stmt(
          "INSERT INTO determinism (result_id, repeats, level, run_to_run, sm_count, config, portable, level_notes) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
      s->bind_all(id, d->repeats, derive_level(c), c.run_to_run, c.sm_count, c.config, c.portable, c.notes);
      s->run();
    }
    std::map<std::string, std::set<std::string>> distinct;
    for (const auto& g : d->digests) {
      distinct[g.output].insert(g.digest);
      StmtUse s(im.stmt("INSERT INTO digests (result_id, repeat, output, digest) VALUES (?1, ?2, ?3, ?4)"));
      s->bind_all(id, g.repeat, g.output, g.digest);
      s->run();
    }
    for (const auto& [out, set] : distinct) {
      StmtUse s(im.stmt(
          "INSERT INTO determinism_outputs (result_id, output, distinct_digests) VALUES (?1, ?2, ?3)"));
      s->bind_all(id, out, int64_t(set.size()));
      s->run();
    }
    for (const auto& [out, sp] : d->spread) {
      StmtUse s(im.stmt("INSERT INTO determinism_spread (result_id, output, max_abs_diff, diff_norm, norm) "
                        "VALUES (?1, ?2, ?3, ?4, ?5)"));
      s->bind_all(id, out, sp.max_abs_diff, sp.diff_norm, sp.norm);
      s->run();
    }
  }
  if (const auto& t = r.timing) {
    {
      StmtUse s(im.stmt(
          "INSERT INTO timing (result_id, median_ms, min_ms, max_ms, warmup, clock_min_mhz, "
          "clock_max_mhz, peak_extra_bytes, flops, tflops, clock_events) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"));
      s->bind_all(id, t->median_ms, t->min_ms, t->max_ms, t->warmup, t->clock_min_mhz, t->clock_max_mhz,
                  t->peak_extra_bytes, t->flops, t->tflops, t->clock_events);
      s->run();
    }
    for (size_t i = 0; i < t->samples_ms.size(); ++i) {
      StmtUse s(im.stmt("INSERT INTO timing_samples (result_id, idx, ms) VALUES (?1, ?2, ?3)"));
      s->bind_all(id, int64_t(i), t->samples_ms[i]);
      s->run();
    }
  }
  return id;
}

}  // namespace detail

Id Store::record_result(const ResultRecord& r) {
  validate_result(*impl_, r);
  Transaction tx(*this);
  if (auto row = detail::find_result_row(*impl_, r.run_id, r.device_id, r.build_id, r.problem_id, r.variant_id,
                                         r.seed)) {
    if (!row->replaceable()) {
      impl_->fail("record_result: run " + std::to_string(r.run_id) + " already has a final result (" +
                  row->status + ") for variant " + variant(r.variant_id).name + ", seed " +
                  std::to_string(r.seed));
    }
    detail::delete_result(*impl_, row->id);
  }
  const Id id = detail::insert_result(*impl_, r);
  tx.commit();
  return id;
}

StoredResult Store::result(Id result_id) const {
  StoredResult out;
  out.id = result_id;
  ResultRecord& r = out.record;
  {
    StmtUse s(impl_->stmt(
        "SELECT r.run_id, r.device_id, r.build_id, r.problem_id, r.variant_id, r.seed, r.status, "
        "r.reason, r.recorded_at, v.name FROM results r JOIN variants v ON v.id = r.variant_id "
        "WHERE r.id=?1"));
    s->bind(1, result_id);
    if (!s->step()) impl_->fail("no result with id " + std::to_string(result_id));
    r.run_id = s->i64(0);
    r.device_id = s->i64(1);
    r.build_id = s->i64(2);
    r.problem_id = s->i64(3);
    r.variant_id = s->i64(4);
    r.seed = s->i64(5);
    r.status = s->text(6);
    r.reason = s->text(7);
    r.recorded_at = s->text(8);
    out.variant_name = s->text(9);
  }
  {
    StmtUse s(impl_->stmt("SELECT checked_what, tolerance, pass FROM correctness WHERE result_id=?1"));
    s->bind(1, result_id);
    if (s->step()) {
      Correctness c;
      c.checked_what = s->text(0);
      c.tolerance = s->f64(1);
      c.pass = s->i64(2) != 0;
      r.correctness = c;
    }
  }
  if (r.correctness) {
    StmtUse s(impl_->stmt("SELECT output, error FROM correctness_errors WHERE result_id=?1"));
    s->bind(1, result_id);
    while (s->step()) r.correctness->errors.emplace(s->text(0), s->f64(1));
  }
  {
    StmtUse s(impl_->stmt(
        "SELECT repeats, level, run_to_run, sm_count, config, portable, level_notes FROM determinism "
        "WHERE result_id=?1"));
    s->bind(1, result_id);
    if (s->step()) {
      Determinism d;
      d.repeats = s->i32(0);
      d.level = s->text(1);
      d.checks = detail::read_checks(*s, 2);
      r.determinism = d;
    }
  }
  if (r.determinism) {
    {
      StmtUse s(impl_->stmt(
          "SELECT repeat, output, digest FROM digests WHERE result_id=?1 ORDER BY repeat, output"));
      s->bind(1, result_id);
      while (s->step()) r.determinism->digests.push_back({s->i32(0), s->text(1), s->text(2)});
    }
    StmtUse s(impl_->stmt("SELECT output, distinct_digests FROM determinism_outputs WHERE result_id=?1"));
    s->bind(1, result_id);
    while (s->step()) r.determinism->distinct.emplace(s->text(0), s->i32(1));
    StmtUse sp(impl_->stmt("SELECT output, max_abs_diff, diff_norm, norm FROM determinism_spread WHERE result_id=?1"));
    sp->bind(1, result_id);
    while (sp->step()) r.determinism->spread.emplace(sp->text(0), Spread{sp->f64(1), sp->f64(2), sp->f64(3)});
  }
  {
    StmtUse s(impl_->stmt(
        "SELECT median_ms, min_ms, max_ms, warmup, clock_min_mhz, clock_max_mhz, peak_extra_bytes, "
        "flops, tflops, clock_events FROM timing WHERE result_id=?1"));
    s->bind(1, result_id);
    if (s->step()) {
      Timing t;
      t.median_ms = s->f64(0);
      t.min_ms = s->f64(1);
      t.max_ms = s->f64(2);
      t.warmup = s->i32(3);
      t.clock_min_mhz = s->i32(4);
      t.clock_max_mhz = s->i32(5);
      t.peak_extra_bytes = s->i64(6);
      t.flops = s->f64(7);
      t.tflops = s->f64(8);
      if (!s->is_null(9)) t.clock_events = s->i64(9);
      r.timing = t;
    }
  }
  if (r.timing) {
    StmtUse s(impl_->stmt("SELECT ms FROM timing_samples WHERE result_id=?1 ORDER BY idx"));
    s->bind(1, result_id);
    while (s->step()) r.timing->samples_ms.push_back(s->f64(0));
  }
  return out;
}

void Store::set_level_checks(Id result_id, const LevelChecks& checks) {
  validate_checks(*impl_, checks, "set_level_checks");
  Transaction tx(*this);
  {
    StmtUse s(impl_->stmt("SELECT run_to_run FROM determinism WHERE result_id=?1"));
    s->bind(1, result_id);
    if (!s->step())
      impl_->bad_input("set_level_checks: result " + std::to_string(result_id) + " has no determinism check");
    // run_to_run is what the result's own repeats showed: not rewritten here.
    if (s->text(0) != checks.run_to_run)
      impl_->bad_input("set_level_checks: result " + std::to_string(result_id) + " has run_to_run " + s->text(0) +
                       ", the checks given say " + checks.run_to_run);
  }
  StmtUse s(impl_->stmt(
      "UPDATE determinism SET level=?2, sm_count=?3, config=?4, portable=?5, level_notes=?6 WHERE result_id=?1"));
  s->bind_all(result_id, derive_level(checks), checks.sm_count, checks.config, checks.portable, checks.notes);
  s->run();
  tx.commit();
}

std::vector<StoredResult> Store::run_results(Id run_id) const {
  std::vector<Id> ids;
  {
    StmtUse s(impl_->stmt("SELECT id FROM results WHERE run_id=?1 ORDER BY id"));
    s->bind(1, run_id);
    while (s->step()) ids.push_back(s->i64(0));
  }
  std::vector<StoredResult> out;
  out.reserve(ids.size());
  for (Id id : ids) out.push_back(result(id));
  return out;
}

}  // namespace detfuse::db
