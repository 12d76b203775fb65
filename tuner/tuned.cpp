#include "tuner/tuned.h"

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "kernels/common/cuda_check.h"
#include "kernels/flce/flce.h"

namespace detfuse::tuner {

Selection tuned(const std::filesystem::path& db_path, bool allow_nondeterministic, const std::string& level) {
  if (!level.empty()) db::check_level_name(level, "level");
  return Selection{db_path, allow_nondeterministic, level};
}

Selection heuristic_only() { return Selection{}; }

namespace {

struct Cached {
  std::string variant;
  ChoiceSource source;
  std::string tuned_problem_key;
  double distance;
  std::string note;
};

std::mutex g_mutex;
std::map<std::tuple<std::string, std::string, std::string, int, bool, std::string>, Cached> g_cache;
const DeviceInfo& current_device() {
  int ordinal = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&ordinal));
  return cached_device(ordinal);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "; ") + x;
  return s;
}

// The answer for (database, GPU, problem, mode, policy): looked up once, cached.
Cached choose(const Problem& p, Mode mode, const Selection& sel) {
  p.validate();
  if (!sel.level.empty()) db::check_level_name(sel.level, "level");  // before the GPU is asked
  std::lock_guard<std::mutex> lock(g_mutex);
  const DeviceInfo dev = current_device();
  const auto key =
      std::make_tuple(sel.db_path.string(), dev.uuid, p.key(), int(mode), sel.allow_nondeterministic, sel.level);
  auto it = g_cache.find(key);
  if (it == g_cache.end()) {
    const Registry& reg = builtin_registry();
    BestAnswer a;
    std::string open_note;
    std::unique_ptr<db::Store> store;
    if (!sel.db_path.empty()) {
      std::error_code ec;
      if (!std::filesystem::exists(sel.db_path, ec)) {
        open_note = "no tuning database at " + sel.db_path.string();
      } else {
        try {
          db::OpenOptions o;
          o.create = false;
          o.read_only = true;
          store = std::make_unique<db::Store>(sel.db_path, o);
        } catch (const std::exception& e) {
          open_note = std::string("tuning database unusable: ") + e.what();
        }
      }
    }
    std::vector<db::Id> ids = store ? device_rows_for(*store, dev) : std::vector<db::Id>{};
    a = resolve_best(store.get(), ids, dev, p, mode, sel.allow_nondeterministic, reg, default_heuristic(reg), sel.level);
    if (!open_note.empty()) a.notes.insert(a.notes.begin(), open_note);
    it = g_cache.emplace(key, Cached{a.variant, a.source, a.tuned_problem_key, a.distance, join(a.notes)}).first;
  }
  return it->second;
}

template <class Choice>
Choice choice_of(const Problem& p, const Cached& c) {
  Choice out;
  const std::optional<Variant> v = p.find_variant(builtin_registry(), c.variant);
  if (!v) throw Error("selection: variant '" + c.variant + "' is not in this build");
  out.variant = &v->as<std::remove_cv_t<std::remove_pointer_t<decltype(out.variant)>>>();
  out.source = c.source;
  out.tuned_problem_key = c.tuned_problem_key;
  out.distance = c.distance;
  out.note = c.note;
  return out;
}

}  // namespace

FlceChoice choose_flce(const FlceProblem& p, FlceMode mode, const Selection& sel) {
  // backward runs the variant chosen for forward_backward (the mode the tuner measures).
  return choice_of<FlceChoice>(p, choose(p, FamilyTraits<FlceProblem>::family_mode_of(mode), sel));
}

AttentionChoice choose_attention(const AttentionProblem& p, Mode mode, const Selection& sel) {
  return choice_of<AttentionChoice>(p, choose(p, mode, sel));
}

const AttentionVariant& select_attention(const AttentionProblem& p, Mode mode, const Selection& sel) {
  return *choose_attention(p, mode, sel).variant;
}

const FlceVariant& select_flce(const FlceProblem& p, FlceMode mode, const Selection& sel) {
  return *choose_flce(p, mode, sel).variant;
}

namespace {
FlceChoice run_selected(const FlceProblem& p, FlceMode mode, const FlceArgs& a, cudaStream_t s,
                        const Selection& sel) {
  FlceChoice c = choose_flce(p, mode, sel);
  flce::run(*c.variant, p, mode, a, s);
  return c;
}
}  // namespace

FlceChoice forward(const FlceProblem& p, const FlceArgs& a, cudaStream_t s, const Selection& sel) {
  return run_selected(p, FlceMode::forward, a, s, sel);
}
FlceChoice forward_backward(const FlceProblem& p, const FlceArgs& a, cudaStream_t s, const Selection& sel) {
  return run_selected(p, FlceMode::forward_backward, a, s, sel);
}
FlceChoice backward(const FlceProblem& p, const FlceArgs& a, cudaStream_t s, const Selection& sel) {
  return run_selected(p, FlceMode::backward, a, s, sel);
}

void clear_selection_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_cache.clear();
}

}  // namespace detfuse::tuner
