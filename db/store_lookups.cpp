// Natural-key lookups and inserts: devices, builds, problems, variants.
#include "db/store_impl.h"

namespace detfuse::db {

using detail::find_or_insert;
using detail::Stmt;
using detail::StmtUse;

namespace detail {

const char* const kDeviceCols =
    "uuid, name, cc, sm_count, total_memory_bytes, l2_bytes, driver_version, driver_release, "
    "runtime_version";

DeviceRecord read_device(Stmt& s, int c) {
  DeviceRecord d;
  d.uuid = s.text(c + 0);
  d.name = s.text(c + 1);
  d.cc = s.text(c + 2);
  d.sm_count = s.i32(c + 3);
  d.total_memory_bytes = s.i64(c + 4);
  d.l2_bytes = s.i64(c + 5);
  d.driver_version = s.i32(c + 6);
  d.driver_release = s.text(c + 7);
  d.runtime_version = s.i32(c + 8);
  return d;
}

const char* const kVariantCols = "name, family, strategy, dtype, params, deterministic_by_design, engine";

VariantRecord read_variant(Stmt& s, int c) {
  VariantRecord v;
  v.name = s.text(c);
  v.family = s.text(c + 1);
  v.strategy = s.text(c + 2);
  v.dtype = s.text(c + 3);
  v.params = s.text(c + 4);
  v.deterministic_by_design = s.i64(c + 5) != 0;
  v.engine = s.text(c + 6);
  return v;
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Devices

std::optional<Id> Store::find_device(const DeviceRecord& d) const {
  StmtUse s(impl_->stmt(
      "SELECT id FROM devices WHERE uuid=?1 AND name=?2 AND cc=?3 AND sm_count=?4 AND "
      "driver_version=?5 AND driver_release=?6"));
  s->bind_all(d.uuid, d.name, d.cc, d.sm_count, d.driver_version, d.driver_release);
  if (s->step()) return s->i64(0);
  return std::nullopt;
}

Id Store::find_or_create_device(const DeviceRecord& d) {
  if (d.uuid.empty() && d.name.empty()) impl_->fail("device record has neither uuid nor name");
  return find_or_insert(
      *this, [&] { return find_device(d); },
      [&] {
        StmtUse s(impl_->stmt(std::string("INSERT INTO devices (") + detail::kDeviceCols +
                              ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
        s->bind_all(d.uuid, d.name, d.cc, d.sm_count, d.total_memory_bytes, d.l2_bytes, d.driver_version,
                    d.driver_release, d.runtime_version);
        s->run();
        return impl_->last_id();
      });
}

DeviceRecord Store::device(Id id) const {
  StmtUse s(impl_->stmt(std::string("SELECT ") + detail::kDeviceCols + " FROM devices WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no device with id " + std::to_string(id));
  return detail::read_device(*s, 0);
}

std::vector<Entry<DeviceRecord>> Store::list_devices() const {
  StmtUse s(impl_->stmt(std::string("SELECT id, ") + detail::kDeviceCols + " FROM devices ORDER BY id"));
  std::vector<Entry<DeviceRecord>> out;
  while (s->step()) out.push_back({s->i64(0), detail::read_device(*s, 1)});
  return out;
}

std::vector<Entry<DeviceRecord>> Store::find_devices(const std::string& query) const {
  auto all = list_devices();
  if (query.empty()) return all;
  const std::string q = detail::lower(query);
  std::vector<Entry<DeviceRecord>> out;
  for (auto& e : all) {
    const std::string uuid = detail::lower(e.record.uuid), name = detail::lower(e.record.name);
    if (uuid.rfind(q, 0) == 0 || name.rfind(q, 0) == 0 ||
        (uuid.rfind("gpu-", 0) == 0 && uuid.compare(4, q.size(), q) == 0)) {
      out.push_back(std::move(e));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Builds

std::optional<Id> Store::find_build(const BuildRecord& b) const {
  StmtUse s(impl_->stmt(
      "SELECT id FROM builds WHERE version=?1 AND git_commit=?2 AND compiler=?3 AND flags=?4 AND "
      "build_type=?5"));
  s->bind_all(b.version, b.git_commit, b.compiler, b.flags, b.build_type);
  if (s->step()) return s->i64(0);
  return std::nullopt;
}

Id Store::find_or_create_build(const BuildRecord& b) {
  return find_or_insert(
      *this, [&] { return find_build(b); },
      [&] {
        StmtUse s(impl_->stmt(
            "INSERT INTO builds (version, git_commit, compiler, flags, build_type) VALUES (?1, ?2, ?3, ?4, ?5)"));
        s->bind_all(b.version, b.git_commit, b.compiler, b.flags, b.build_type);
        s->run();
        return impl_->last_id();
      });
}

BuildRecord Store::build(Id id) const {
  StmtUse s(impl_->stmt("SELECT version, git_commit, compiler, flags, build_type FROM builds WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no build with id " + std::to_string(id));
  return {s->text(0), s->text(1), s->text(2), s->text(3), s->text(4)};
}

std::vector<Entry<BuildRecord>> Store::list_builds() const {
  StmtUse s(impl_->stmt("SELECT id, version, git_commit, compiler, flags, build_type FROM builds ORDER BY id"));
  std::vector<Entry<BuildRecord>> out;
  while (s->step()) out.push_back({s->i64(0), {s->text(1), s->text(2), s->text(3), s->text(4), s->text(5)}});
  return out;
}

// ---------------------------------------------------------------------------
// Problems

std::optional<Id> Store::find_problem(const std::string& key) const {
  return impl_->find_id("SELECT id FROM problems WHERE key=?1", key);
}

ProblemRecord Store::problem(Id id) const {
  ProblemRecord p;
  {
    StmtUse s(impl_->stmt("SELECT family, key, dtype, options_key FROM problems WHERE id=?1"));
    s->bind(1, id);
    if (!s->step()) impl_->fail("no problem with id " + std::to_string(id));
    p.family = s->text(0);
    p.key = s->text(1);
    p.dtype = s->text(2);
    p.options_key = s->text(3);
  }
  StmtUse s(impl_->stmt("SELECT dim, value FROM problem_dims WHERE problem_id=?1"));
  s->bind(1, id);
  while (s->step()) p.shape.emplace(s->text(0), s->i64(1));
  return p;
}

Id Store::find_or_create_problem(const ProblemRecord& p) {
  if (p.key.empty() || p.family.empty()) impl_->fail("problem record needs a family and a key");
  for (const auto& [dim, v] : p.shape) {
    if (v <= 0) impl_->fail("problem '" + p.key + "': shape dim " + dim + " must be > 0");
  }
  auto existing = [&]() -> std::optional<Id> {
    auto id = find_problem(p.key);
    if (!id) return std::nullopt;
    const ProblemRecord have = problem(*id);
    if (have.family != p.family || have.dtype != p.dtype || have.options_key != p.options_key ||
        have.shape != p.shape) {
      impl_->fail("problem '" + p.key + "' is stored with a different family, dtype, options_key or shape");
    }
    return id;
  };
  return find_or_insert(*this, existing, [&] {
    {
      StmtUse s(impl_->stmt("INSERT INTO problems (family, key, dtype, options_key) VALUES (?1, ?2, ?3, ?4)"));
      s->bind_all(p.family, p.key, p.dtype, p.options_key);
      s->run();
    }
    const Id id = impl_->last_id();
    for (const auto& [dim, v] : p.shape) {
      StmtUse s(impl_->stmt("INSERT INTO problem_dims (problem_id, dim, value) VALUES (?1, ?2, ?3)"));
      s->bind_all(id, dim, v);
      s->run();
    }
    return id;
  });
}

std::vector<Entry<ProblemRecord>> Store::list_problems(const std::string& family) const {
  std::vector<Id> ids;
  {
    StmtUse s(impl_->stmt("SELECT id FROM problems WHERE ?1 = '' OR family = ?1 ORDER BY id"));
    s->bind(1, family);
    while (s->step()) ids.push_back(s->i64(0));
  }
  std::vector<Entry<ProblemRecord>> out;
  for (Id id : ids) out.push_back({id, problem(id)});
  return out;
}

// ---------------------------------------------------------------------------
// Variants

std::optional<Id> Store::find_variant(const std::string& name) const {
  return impl_->find_id("SELECT id FROM variants WHERE name=?1", name);
}

VariantRecord Store::variant(Id id) const {
  StmtUse s(impl_->stmt(std::string("SELECT ") + detail::kVariantCols + " FROM variants WHERE id=?1"));
  s->bind(1, id);
  if (!s->step()) impl_->fail("no variant with id " + std::to_string(id));
  return detail::read_variant(*s, 0);
}

Id Store::find_or_create_variant(const VariantRecord& v) {
  if (v.name.empty()) impl_->fail("variant record has no name");
  auto existing = [&]() -> std::optional<Id> {
    auto id = find_variant(v.name);
    if (!id) return std::nullopt;
    const VariantRecord have = variant(*id);
    // An engine is compared only when both know it (a row migrated from v2
    // may have none).
    if (have.family != v.family || have.strategy != v.strategy || have.dtype != v.dtype ||
        (!have.engine.empty() && !v.engine.empty() && have.engine != v.engine)) {
      impl_->fail("variant '" + v.name + "' is stored with a different family, strategy, dtype or engine");
    }
    return id;
  };
  return find_or_insert(*this, existing, [&] {
    StmtUse s(impl_->stmt(std::string("INSERT INTO variants (") + detail::kVariantCols +
                          ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    s->bind_all(v.name, v.family, v.strategy, v.dtype, v.params, v.deterministic_by_design, v.engine);
    s->run();
    return impl_->last_id();
  });
}

std::vector<Entry<VariantRecord>> Store::list_variants(const std::string& family) const {
  StmtUse s(impl_->stmt(std::string("SELECT id, ") + detail::kVariantCols +
                        " FROM variants WHERE ?1 = '' OR family = ?1 ORDER BY name"));
  s->bind(1, family);
  std::vector<Entry<VariantRecord>> out;
  while (s->step()) out.push_back({s->i64(0), detail::read_variant(*s, 1)});
  return out;
}

// ---------------------------------------------------------------------------
// Studies (v4)

Id Store::find_or_create_study(const StudyRecord& in) {
  if (in.name.empty()) impl_->fail("study record has no name");
  if (in.kind.empty()) impl_->fail("study '" + in.name + "' has no kind");
  StudyRecord st = in;
  if (st.created_at.empty()) st.created_at = now_utc();
  auto existing = [&]() -> std::optional<Id> {
    StmtUse s(impl_->stmt("SELECT id, kind FROM studies WHERE name=?1"));
    s->bind(1, st.name);
    if (!s->step()) return std::nullopt;
    if (s->text(1) != st.kind)
      impl_->fail("study '" + st.name + "' is stored with kind '" + s->text(1) + "', not '" + st.kind + "'");
    return s->i64(0);
  };
  return find_or_insert(*this, existing, [&] {
    StmtUse s(impl_->stmt("INSERT INTO studies (name, kind, axes, created_at) VALUES (?1, ?2, ?3, ?4)"));
    s->bind_all(st.name, st.kind, st.axes, st.created_at);
    s->run();
    return impl_->last_id();
  });
}

std::vector<Entry<StudyRecord>> Store::list_studies() const {
  StmtUse s(impl_->stmt("SELECT id, name, kind, axes, created_at FROM studies ORDER BY id"));
  std::vector<Entry<StudyRecord>> out;
  while (s->step()) out.push_back({s->i64(0), StudyRecord{s->text(1), s->text(2), s->text(3), s->text(4)}});
  return out;
}

}  // namespace detfuse::db
