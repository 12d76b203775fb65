// Runs, their owners and heartbeats, and the resume bookkeeping of result rows
// (running markers, presumed crashes). The store records and answers; when an
// owner counts as gone is the tuner's policy (tuner/resume.h).
#include <cmath>

#include "db/store_impl.h"

namespace detfuse::db {

using detail::Stmt;
using detail::StmtUse;

namespace detail {

const char* const kRunCols =
    "uid, started_at, finished_at, budget_seconds, status, command_line, repeats, seed, "
    "allow_nondeterministic, owner_host, owner_pid, owner_start, heartbeat_at, end_reason, study, sms";

RunRecord read_run(Stmt& s, int c) {
  RunRecord r;
  r.uid = s.text(c);
  r.started_at = s.text(c + 1);
  r.finished_at = s.text(c + 2);
  r.budget_seconds = s.f64(c + 3);
  r.status = s.text(c + 4);
  r.command_line = s.text(c + 5);
  r.repeats = s.i32(c + 6);
  r.seed = s.i64(c + 7);
  r.allow_nondeterministic = s.i64(c + 8) != 0;
  r.owner.host = s.text(c + 9);
  r.owner.pid = s.i64(c + 10);
  r.owner.start_time = s.i64(c + 11);
  r.heartbeat_at = s.text(c + 12);
  r.end_reason = s.text(c + 13);
  r.study = s.text(c + 14);
  if (!s.is_null(c + 15)) r.sms = s.i64(c + 15);
  return r;
}

Id insert_run(const Store::Impl& im, const RunRecord& r) {
  StmtUse s(im.stmt(std::string("INSERT INTO runs (") + kRunCols +
                    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"));
  s->bind_all(r.uid, r.started_at, r.finished_at, r.budget_seconds, r.status, r.command_line, r.repeats, r.seed,
              r.allow_nondeterministic, r.owner.host, r.owner.pid, r.owner.start_time, r.heartbeat_at,
              r.end_reason, r.study, r.sms);
  s->run();
  return im.last_id();
}

bool ResultKeyRow::replaceable() const {
  return status == kResultRunning || (status == kResultCrashed && crash_presumed);
}

std::optional<ResultKeyRow> find_result_row(const Store::Impl& im, Id run, Id dev, Id build, Id prob, Id var,
                                            int64_t seed) {
  StmtUse s(im.stmt(
      "SELECT id, status, crash_presumed FROM results WHERE run_id=?1 AND device_id=?2 AND build_id=?3 AND "
      "problem_id=?4 AND variant_id=?5 AND seed=?6"));
  s->bind_all(run, dev, build, prob, var, seed);
  if (s->step()) return ResultKeyRow{s->i64(0), s->text(1), s->i64(2) != 0};
  return std::nullopt;
}

void delete_result(const Store::Impl& im, Id id) {
  StmtUse s(im.stmt("DELETE FROM results WHERE id=?1"));  // children cascade
  s->bind(1, id);
  s->run();
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Runs

Id Store::begin_run(const RunRecord& in) {
  RunRecord r = in;
  if (r.uid.empty()) r.uid = new_uid();
  if (r.started_at.empty()) r.started_at = now_utc();
  if (r.heartbeat_at.empty() && r.status == kRunRunning) r.heartbeat_at = r.started_at;
  if (!detail::valid_run_status(r.status)) impl_->fail("run status '" + r.status + "' is not a run status");
  if (!std::isfinite(r.budget_seconds) || r.budget_seconds < 0) impl_->fail("run budget_seconds must be >= 0");
  Transaction tx(*this);
  const Id id = detail::insert_run(*impl_, r);
  tx.commit();
  return id;
}

void Store::finish_run(Id run_id, const std::string& status, const std::string& reason) {
  if (status != kRunComplete && status != kRunBudget && status != kRunInterrupted && status != kRunFailed) {
    impl_->fail("finish_run: '" + status + "' is not a status the owner ends a run with "
                "(complete, budget, interrupted, failed)");
  }
  Transaction tx(*this);
  StmtUse s(impl_->stmt("UPDATE runs SET status=?2, finished_at=?3, end_reason=?4 WHERE id=?1"));
  s->bind_all(run_id, status, now_utc(), reason);
  s->run();
  if (impl_->changes() != 1) impl_->fail("finish_run: no run with id " + std::to_string(run_id));
  tx.commit();
}

RunRecord Store::run(Id id) const {
  StmtUse s(impl_->stmt(std::string("SELECT ") + detail::kRunCols + " FROM runs WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no run with id " + std::to_string(id));
  return detail::read_run(*s, 0);
}

std::vector<Entry<RunRecord>> Store::list_runs() const {
  StmtUse s(impl_->stmt(std::string("SELECT id, ") + detail::kRunCols +
                        " FROM runs ORDER BY started_at DESC, id DESC"));
  std::vector<Entry<RunRecord>> out;
  while (s->step()) out.push_back({s->i64(0), detail::read_run(*s, 1)});
  return out;
}

// ---------------------------------------------------------------------------
// Liveness

std::string Store::heartbeat(Id run_id) {
  Transaction tx(*this);
  {
    StmtUse s(impl_->stmt("UPDATE runs SET heartbeat_at=?2 WHERE id=?1"));
    s->bind_all(run_id, now_utc());
    s->run();
    if (impl_->changes() != 1) impl_->fail("heartbeat: no run with id " + std::to_string(run_id));
  }
  StmtUse s(impl_->stmt("SELECT status FROM runs WHERE id=?1"));
  s->bind(1, run_id);
  s->step();
  std::string status = s->text(0);
  tx.commit();
  return status;
}

std::vector<UnfinishedRun> Store::unfinished_runs() const {
  StmtUse s(impl_->stmt(std::string("SELECT id, ") + detail::kRunCols +
                        " FROM runs WHERE status='running' ORDER BY started_at DESC, id DESC"));
  std::vector<UnfinishedRun> out;
  while (s->step()) {
    UnfinishedRun u;
    u.id = s->i64(0);
    u.record = detail::read_run(*s, 1);
    u.heartbeat_age_s = detail::seconds_since(u.record.heartbeat_at);
    out.push_back(std::move(u));
  }
  return out;
}

namespace {

// The compare-and-set behind mark_run_crashed / mark_run_abandoned.
bool mark_run_gone(Store& store, Store::Impl& im, Id run_id, const char* status, const char* from_statuses,
                   const std::string& reason, const std::optional<std::string>& seen_heartbeat) {
  const std::string what = std::string("mark_run_") + status;
  if (reason.empty()) im.fail(what + ": a reason is required");
  Transaction tx(store);
  {
    StmtUse s(im.stmt("SELECT 1 FROM runs WHERE id=?1"));
    s->bind(1, run_id);
    if (!s->step()) im.fail(what + ": no run with id " + std::to_string(run_id));
  }
  StmtUse s(im.stmt(std::string("UPDATE runs SET status=?2, end_reason=?3, "
                                "finished_at=CASE WHEN status='running' THEN ?4 ELSE finished_at END "
                                "WHERE id=?1 AND status IN ") +
                    from_statuses + " AND (?5 IS NULL OR heartbeat_at=?5)"));
  s->bind_all(run_id, status, reason, now_utc());
  if (seen_heartbeat) s->bind(5, *seen_heartbeat); else s->bind_null(5);
  s->run();
  const bool changed = im.changes() == 1;
  tx.commit();
  return changed;
}

}  // namespace

bool Store::mark_run_crashed(Id run_id, const std::string& reason,
                             const std::optional<std::string>& seen_heartbeat) {
  return mark_run_gone(*this, *impl_, run_id, kRunCrashed, "('running')", reason, seen_heartbeat);
}

bool Store::mark_run_abandoned(Id run_id, const std::string& reason,
                               const std::optional<std::string>& seen_heartbeat) {
  return mark_run_gone(*this, *impl_, run_id, kRunAbandoned,
                       "('running', 'budget', 'interrupted', 'failed', 'crashed')", reason, seen_heartbeat);
}

// ---------------------------------------------------------------------------
// Resume bookkeeping

Id Store::mark_running(Id run_id, Id device_id, Id build_id, Id problem_id, Id variant_id, int64_t seed) {
  Transaction tx(*this);
  if (auto row = detail::find_result_row(*impl_, run_id, device_id, build_id, problem_id, variant_id, seed)) {
    if (!row->replaceable()) {
      impl_->fail("mark_running: variant " + variant(variant_id).name + " already has a final result (" +
                  row->status + ") in run " + std::to_string(run_id));
    }
    detail::delete_result(*impl_, row->id);
  }
  StmtUse s(impl_->stmt(
      "INSERT INTO results (run_id, device_id, build_id, problem_id, variant_id, seed, status, "
      "reason, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', '', ?7)"));
  s->bind_all(run_id, device_id, build_id, problem_id, variant_id, seed, now_utc());
  s->run();
  const Id id = impl_->last_id();
  tx.commit();
  return id;
}

std::vector<VariantState> Store::variant_states(Id device_id, Id build_id, Id problem_id, int64_t seed) const {
  StmtUse s(impl_->stmt(
      "SELECT r.id, r.run_id, r.variant_id, v.name, r.status, r.reason, r.crash_presumed, "
      "       u.status, u.owner_host, u.owner_pid, u.owner_start, u.heartbeat_at "
      "FROM results r JOIN variants v ON v.id = r.variant_id JOIN runs u ON u.id = r.run_id "
      "WHERE r.device_id=?1 AND r.build_id=?2 AND r.problem_id=?3 AND r.seed=?4 "
      "  AND r.id = (SELECT max(r2.id) FROM results r2 WHERE r2.device_id=r.device_id AND "
      "    r2.build_id=r.build_id AND r2.problem_id=r.problem_id AND r2.seed=r.seed AND "
      "    r2.variant_id=r.variant_id) "
      "ORDER BY v.name"));
  s->bind_all(device_id, build_id, problem_id, seed);
  std::vector<VariantState> out;
  while (s->step()) {
    VariantState v;
    v.result_id = s->i64(0);
    v.run_id = s->i64(1);
    v.variant_id = s->i64(2);
    v.variant_name = s->text(3);
    v.status = s->text(4);
    v.reason = s->text(5);
    v.crash_presumed = s->i64(6) != 0;
    v.run_status = s->text(7);
    v.owner = {s->text(8), s->i64(9), s->i64(10)};
    v.heartbeat_at = s->text(11);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<VariantState> Store::finished_variants(Id device_id, Id build_id, Id problem_id,
                                                   int64_t seed) const {
  auto all = variant_states(device_id, build_id, problem_id, seed);
  std::erase_if(all, [](const VariantState& v) { return v.status == kResultRunning; });
  return all;
}

std::vector<VariantState> Store::running_variants(Id device_id, Id build_id, Id problem_id,
                                                  int64_t seed) const {
  auto all = variant_states(device_id, build_id, problem_id, seed);
  std::erase_if(all, [](const VariantState& v) { return v.status != kResultRunning; });
  return all;
}

std::vector<VariantState> Store::crashed_variants(Id device_id, Id build_id, Id problem_id,
                                                  int64_t seed) const {
  auto all = variant_states(device_id, build_id, problem_id, seed);
  std::erase_if(all, [](const VariantState& v) { return v.status != kResultCrashed; });
  return all;
}

bool Store::mark_crashed(Id result_id, const std::string& reason, const std::optional<std::string>& seen_heartbeat) {
  Transaction tx(*this);
  {
    StmtUse s(impl_->stmt("SELECT 1 FROM results WHERE id=?1"));
    s->bind(1, result_id);
    if (!s->step()) impl_->fail("mark_crashed: no result with id " + std::to_string(result_id));
  }
  StmtUse s(impl_->stmt(
      "UPDATE results SET status='crashed', crash_presumed=1, reason=?2, recorded_at=?3 "
      "WHERE id=?1 AND status='running' AND "
      "  (?4 IS NULL OR (SELECT u.heartbeat_at FROM runs u WHERE u.id = results.run_id) = ?4)"));
  s->bind_all(result_id, reason, now_utc());
  if (seen_heartbeat) s->bind(4, *seen_heartbeat); else s->bind_null(4);
  s->run();
  const bool changed = impl_->changes() == 1;
  tx.commit();
  return changed;
}

}  // namespace detfuse::db
