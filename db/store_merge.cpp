// Merging another detfuse store into this one. The source is validated fully
// (read-only open: a detfuse store, schema readable, PRAGMA integrity_check)
// before anything of the target changes; merge_into() validates it before the
// target is even created, and removes a target it created when the merge fails.
#include "db/store_impl.h"

namespace detfuse::db {

using detail::find_or_insert;
using detail::StmtUse;

namespace {

Store open_merge_source(const std::filesystem::path& source, int busy_timeout_ms) {
  OpenOptions o;
  o.create = false;
  o.read_only = true;
  o.busy_timeout_ms = busy_timeout_ms;
  o.integrity_check = true;
  try {
    return Store(source, o);
  } catch (const Error& e) {
    throw Error(std::string("merge: ") + e.what(), e.kind());
  }
}

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

}  // namespace

MergeCounts Store::merge(const std::filesystem::path& other_path) {
  if (same_file(other_path, impl_->path)) {
    impl_->bad_input("merge: '" + other_path.string() + "' is this database itself");
  }
  const Store other = open_merge_source(other_path, impl_->opts.busy_timeout_ms);
  return merge_from(other);
}

MergeCounts Store::merge_from(const Store& other) {
  MergeCounts n;
  Transaction tx(*this);
  std::unordered_map<Id, Id> dev, bld, prob, var, run;
  for (const auto& e : other.list_devices()) {
    if (!find_device(e.record)) ++n.devices;
    dev[e.id] = find_or_create_device(e.record);
  }
  for (const auto& e : other.list_builds()) {
    if (!find_build(e.record)) ++n.builds;
    bld[e.id] = find_or_create_build(e.record);
  }
  for (const auto& e : other.list_problems()) {
    if (!find_problem(e.record.key)) ++n.problems;
    prob[e.id] = find_or_create_problem(e.record);
  }
  for (const auto& e : other.list_variants()) {
    if (!find_variant(e.record.name)) ++n.variants;
    var[e.id] = find_or_create_variant(e.record);
  }
  for (const auto& e : other.list_studies()) find_or_create_study(e.record);  // v4; not counted
  const auto runs = other.list_runs();
  for (const auto& e : runs) {
    auto find = [&] { return impl_->find_id("SELECT id FROM runs WHERE uid=?1", e.record.uid); };
    // The run as it is in the other file (status, owner, heartbeat kept).
    run[e.id] = find_or_insert(*this, find, [&] {
      ++n.runs;
      return detail::insert_run(*impl_, e.record);
    });
  }
  for (const auto& e : runs) {
    for (const auto& sr : other.run_results(e.id)) {
      if (sr.record.status == kResultRunning) continue;
      bool presumed = false;
      {
        StmtUse s(other.impl_->stmt("SELECT crash_presumed FROM results WHERE id=?1"));
        s->bind(1, sr.id);
        presumed = s->step() && s->i64(0) != 0;
      }
      ResultRecord r = sr.record;
      r.run_id = run.at(r.run_id);
      r.device_id = dev.at(r.device_id);
      r.build_id = bld.at(r.build_id);
      r.problem_id = prob.at(r.problem_id);
      r.variant_id = var.at(r.variant_id);
      auto row = detail::find_result_row(*impl_, r.run_id, r.device_id, r.build_id, r.problem_id, r.variant_id,
                                         r.seed);
      // A final row here stays; a running marker or presumed crash here gives
      // way to the other file's final row (but a presumed crash never
      // replaces another presumed crash: nothing would be gained).
      if (row && (!row->replaceable() || (presumed && row->status == kResultCrashed))) continue;
      if (row) detail::delete_result(*impl_, row->id);
      const Id id = detail::insert_result(*impl_, r);
      if (presumed) {
        StmtUse s(impl_->stmt("UPDATE results SET crash_presumed=1 WHERE id=?1"));
        s->bind(1, id);
        s->run();
      }
      ++n.results;
    }
  }
  tx.commit();
  return n;
}

MergeCounts merge_into(const std::filesystem::path& target, const std::filesystem::path& source,
                       OpenOptions target_opts) {
  if (target_opts.read_only) {
    throw Error("detfuse db '" + target.string() + "': merge_into: the target cannot be opened read-only",
                Error::Kind::invalid_argument);
  }
  // 1. The source, fully, before the target is touched.
  if (!target.empty() && same_file(source, target)) {
    throw Error("detfuse db '" + target.string() + "': merge: '" + source.string() + "' is this database itself",
                Error::Kind::invalid_argument);
  }
  const Store other = open_merge_source(source, target_opts.busy_timeout_ms);

  // 2. The target: Store's path checks run before anything is created.
  std::error_code ec;
  const std::string t = target.string();
  const bool existed = !target.empty() && std::filesystem::exists(target, ec);
  const bool wal_existed = std::filesystem::exists(t + "-wal", ec);
  const bool shm_existed = std::filesystem::exists(t + "-shm", ec);
  std::optional<Store> store;
  try {
    store.emplace(target, target_opts);
    MergeCounts n = store->merge_from(other);
    return n;
  } catch (...) {
    store.reset();  // close: SQLite removes its -wal/-shm of an existing file itself
    if (!existed) {
      // Created by this call: leave nothing behind.
      std::filesystem::remove(target, ec);
      if (!wal_existed) std::filesystem::remove(t + "-wal", ec);
      if (!shm_existed) std::filesystem::remove(t + "-shm", ec);
    }
    throw;
  }
}

}  // namespace detfuse::db
