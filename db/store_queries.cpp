// The selection queries: best, nearest_tuned (db/README.md, "Queries"), and the
// stored digests that verify and the config-invariance classes read.
#include <algorithm>

#include "db/store_impl.h"

namespace detfuse::db {

using detail::StmtUse;

std::optional<BestResult> Store::best(Id device_id, Id problem_id, bool allow_nondeterministic,
                                      std::optional<Id> build_id, const std::string& level) const {
  if (!level.empty()) {
    check_level_name(level, "best");
    if (level == kLevelNone) allow_nondeterministic = true;
  }
  // The level's check column (a fixed name from the list, never the caller's text).
  std::string need = "d.run_to_run='shown'";
  if (!level.empty() && level != kLevelNone && level != kLevelRunToRun) {
    allow_nondeterministic = false;
    need += std::string(" AND d.") + level_names()[size_t(level_rank(level))] + "='shown'";
  } else if (level == kLevelRunToRun) {
    allow_nondeterministic = false;
  }
  BestResult b;
  {
    StmtUse s(impl_->stmt(
        "SELECT r.id, r.run_id, r.variant_id, v.name, r.build_id, r.seed, t.median_ms, t.tflops, "
        "       coalesce(d.level, ''), r.recorded_at, p.key, "
        "       coalesce(d.run_to_run, 'not_checked'), coalesce(d.sm_count, 'not_checked'), "
        "       coalesce(d.config, 'not_checked'), coalesce(d.portable, 'not_checked'), coalesce(d.level_notes, '') "
        "FROM results r "
        "JOIN variants v ON v.id = r.variant_id "
        "JOIN problems p ON p.id = r.problem_id "
        "JOIN correctness c ON c.result_id = r.id "
        "JOIN timing t ON t.result_id = r.id "
        "LEFT JOIN determinism d ON d.result_id = r.id "
        "WHERE r.device_id=?1 AND r.problem_id=?2 AND r.status='ok' AND c.pass=1 "
        "  AND ((" + need + " AND v.deterministic_by_design=1) OR ?3=1) "
        "  AND (?4 IS NULL OR r.build_id=?4) "
        // Measured on the whole device: not on a --sms slice (runs.sms, v5).
        "  AND coalesce((SELECT u.sms FROM runs u WHERE u.id = r.run_id), "
        "               (SELECT dv.sm_count FROM devices dv WHERE dv.id = r.device_id)) = "
        "      (SELECT dv.sm_count FROM devices dv WHERE dv.id = r.device_id) "
        "ORDER BY t.median_ms, r.id LIMIT 1"));
    s->bind_all(device_id, problem_id, allow_nondeterministic, build_id);
    if (!s->step()) return std::nullopt;
    b.result_id = s->i64(0);
    b.run_id = s->i64(1);
    b.variant_id = s->i64(2);
    b.variant_name = s->text(3);
    b.build_id = s->i64(4);
    b.seed = s->i64(5);
    b.median_ms = s->f64(6);
    b.tflops = s->f64(7);
    b.level = s->text(8);
    b.recorded_at = s->text(9);
    b.problem_key = s->text(10);
    b.checks = detail::read_checks(*s, 11);
  }
  b.device_id = device_id;
  b.problem_id = problem_id;
  b.build = build(b.build_id);
  return b;
}

std::optional<NearestMatch> Store::nearest_tuned(Id device_id, const ProblemRecord& p,
                                                 bool allow_nondeterministic,
                                                 std::optional<Id> build_id, const std::string& level) const {
  if (!level.empty()) check_level_name(level, "nearest_tuned");
  std::vector<Id> candidates;
  {
    StmtUse s(impl_->stmt(
        "SELECT DISTINCT p.id FROM problems p JOIN results r ON r.problem_id = p.id "
        "WHERE p.family=?1 AND p.options_key=?2 AND r.device_id=?3 AND r.status='ok' "
        "ORDER BY p.key"));
    s->bind_all(p.family, p.options_key, device_id);
    while (s->step()) candidates.push_back(s->i64(0));
  }
  std::optional<NearestMatch> found;
  for (Id id : candidates) {
    ProblemRecord q = problem(id);
    if (q.shape.size() != p.shape.size() ||
        !std::equal(q.shape.begin(), q.shape.end(), p.shape.begin(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      continue;
    }
    const double dist = shape_distance(p.shape, q.shape);
    if (found && !(dist < found->distance ||
                   (dist == found->distance && q.key < found->problem.record.key))) {
      continue;
    }
    auto b = best(device_id, id, allow_nondeterministic, build_id, level);
    if (!b) continue;
    found = NearestMatch{{id, std::move(q)}, dist, std::move(*b)};
  }
  return found;
}

namespace {

std::optional<StoredDigests> digests_of(const Store::Impl& im, Id result_id) {
  StoredDigests sd;
  {
    StmtUse s(im.stmt(
        "SELECT r.run_id, v.name, d.repeats, d.level, d.run_to_run, d.sm_count, d.config, d.portable, "
        "d.level_notes FROM results r "
        "JOIN variants v ON v.id = r.variant_id JOIN determinism d ON d.result_id = r.id "
        "WHERE r.id=?1"));
    s->bind(1, result_id);
    if (!s->step()) return std::nullopt;
    sd.result_id = result_id;
    sd.run_id = s->i64(0);
    sd.variant_name = s->text(1);
    sd.repeats = s->i32(2);
    sd.level = s->text(3);
    sd.checks = detail::read_checks(*s, 4);
  }
  StmtUse s(im.stmt("SELECT repeat, output, digest FROM digests WHERE result_id=?1 ORDER BY repeat, output"));
  s->bind(1, result_id);
  while (s->step()) sd.digests.push_back({s->i32(0), s->text(1), s->text(2)});
  return sd;
}

}  // namespace

std::optional<StoredDigests> Store::stored_digests(Id device_id, Id build_id, Id variant_id,
                                                   Id problem_id, int64_t seed) const {
  Id rid = 0;
  {
    StmtUse s(impl_->stmt(
        "SELECT r.id FROM results r JOIN determinism d ON d.result_id = r.id "
        "WHERE r.device_id=?1 AND r.build_id=?2 AND r.variant_id=?3 AND r.problem_id=?4 AND r.seed=?5 "
        "ORDER BY r.id DESC LIMIT 1"));
    s->bind_all(device_id, build_id, variant_id, problem_id, seed);
    if (!s->step()) return std::nullopt;
    rid = s->i64(0);
  }
  return digests_of(*impl_, rid);
}

std::vector<StoredDigests> Store::problem_digests(Id device_id, Id build_id, Id problem_id,
                                                  int64_t seed) const {
  std::vector<Id> ids;
  {
    StmtUse s(impl_->stmt(
        "SELECT max(r.id) FROM results r JOIN determinism d ON d.result_id = r.id "
        "JOIN variants v ON v.id = r.variant_id "
        "WHERE r.device_id=?1 AND r.build_id=?2 AND r.problem_id=?3 AND r.seed=?4 "
        "GROUP BY r.variant_id ORDER BY min(v.name)"));
    s->bind_all(device_id, build_id, problem_id, seed);
    while (s->step()) ids.push_back(s->i64(0));
  }
  std::vector<StoredDigests> out;
  for (Id id : ids) {
    if (auto d = digests_of(*impl_, id)) out.push_back(std::move(*d));
  }
  return out;
}

}  // namespace detfuse::db
