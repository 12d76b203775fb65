// The C ABI (capi/detfuse_c.h) over the C++ API. Every entry point runs its
// body inside guard(), which catches everything and maps it to a status and
// the thread-local message; argument checks come before any CUDA call.
#include "capi/detfuse_c.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "db/store.h"
#include "kernels/common/device_info.h"
#include "kernels/common/digest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/attention/attention.h"
#include "kernels/common/problem.h"
#include "kernels/flce/flce.h"
#include "kernels/flce/rowwise.h"
#include "kernels/registry.h"
#include "tuner/tuned.h"

namespace {

using namespace detfuse;

thread_local std::string g_last_error;

// The call needs a GPU and none is usable.
struct NoDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class F>
int32_t guard(const char* fn, F&& body) noexcept {
  try {
    body();
    return DETFUSE_OK;
  } catch (const NoDevice& e) {
    g_last_error = std::string(fn) + ": " + e.what();
    return DETFUSE_ERR_NO_DEVICE;
  } catch (const Error& e) {
    g_last_error = std::string(fn) + ": " + e.what();
    return e.kind() == Error::Kind::invalid_argument ? DETFUSE_ERR_INVALID_ARGUMENT : DETFUSE_ERR_RUNTIME;
  } catch (const std::bad_alloc&) {
    g_last_error = std::string(fn) + ": out of host memory";
    return DETFUSE_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    g_last_error = std::string(fn) + ": internal error: " + e.what();
    return DETFUSE_ERR_INTERNAL;
  } catch (...) {
    g_last_error = std::string(fn) + ": internal error: unknown exception";
    return DETFUSE_ERR_INTERNAL;
  }
}

void require_nonnull(const void* p, const char* name) {
  if (!p) throw invalid_argument(std::string(name) + ": null pointer");
}

void require_device() {
  std::string why;
  if (cuda_device_count(&why) == 0)
    throw NoDevice("no CUDA device available (" + (why.empty() ? std::string("none found") : why) + ")");
}

DType to_dtype(int32_t v, const char* field) {
  switch (v) {
    case DETFUSE_DTYPE_F32: return DType::f32;
    case DETFUSE_DTYPE_BF16: return DType::bf16;
  }
  throw invalid_argument(std::string(field) + ": must be 0 (DETFUSE_DTYPE_F32) or 1 (DETFUSE_DTYPE_BF16), got " +
                         std::to_string(v));
}

FlceMode to_mode(int32_t v) {
  switch (v) {
    case DETFUSE_MODE_FORWARD: return FlceMode::forward;
    case DETFUSE_MODE_FORWARD_BACKWARD: return FlceMode::forward_backward;
    case DETFUSE_MODE_BACKWARD: return FlceMode::backward;
  }
  throw invalid_argument("mode: must be 0 (forward), 1 (forward_backward) or 2 (backward), got " +
                         std::to_string(v));
}

// The C struct to detfuse::FlceProblem, validated; messages name the C field
// ("problem.z_loss: ...").
FlceProblem to_problem(const detfuse_flce_problem* c) {
  require_nonnull(c, "problem");
  FlceProblem p;
  p.N = c->N;
  p.D = c->D;
  p.V = c->V;
  p.dtype = to_dtype(c->dtype, "problem.dtype");
  p.grad_dtype = to_dtype(c->grad_dtype, "problem.grad_dtype");
  p.ignore_index = c->ignore_index;
  switch (c->reduction) {
    case DETFUSE_REDUCTION_MEAN: p.reduction = Reduction::mean; break;
    case DETFUSE_REDUCTION_SUM: p.reduction = Reduction::sum; break;
    case DETFUSE_REDUCTION_NONE: p.reduction = Reduction::none; break;
    default:
      throw invalid_argument("problem.reduction: must be 0 (mean), 1 (sum) or 2 (none), got " +
                             std::to_string(c->reduction));
  }
  if (c->accumulate_dW != 0 && c->accumulate_dW != 1)
    throw invalid_argument("problem.accumulate_dW: must be 0 or 1, got " + std::to_string(c->accumulate_dW));
  p.accumulate_dW = c->accumulate_dW == 1;
  p.label_smoothing = c->label_smoothing;
  p.lse_square_scale = c->z_loss;
  p.softcap = c->softcap;
  p.grad_output = c->grad_output;
  try {
    p.validate();
  } catch (const Error& e) {
    std::string m = e.what();
    const std::string cxx = "lse_square_scale";
    if (m.rfind(cxx, 0) == 0) m = "z_loss" + m.substr(cxx.size());
    throw Error("problem." + m, e.kind());
  }
  return p;
}

// The pointers `mode` needs (the same rules as flce::validate_call, checked
// here so that a bad call fails before any CUDA call).
FlceArgs to_args(const detfuse_flce_args* c, const FlceProblem& p, FlceMode mode) {
  require_nonnull(c, "args");
  const std::string for_mode = std::string(" (required for ") + to_string(mode) + ")";
  auto need = [&](const void* ptr, const char* name) {
    if (!ptr) throw invalid_argument(std::string("args.") + name + ": null pointer" + for_mode);
  };
  need(c->X, "X");
  need(c->W, "W");
  need(c->y, "y");
  if (p.reduction == Reduction::none && mode != FlceMode::forward) need(c->dloss, "dloss");
  if (mode != FlceMode::backward) {
    need(c->loss, "loss");
    need(c->lse, "lse");
  } else {
    need(c->lse_in, "lse_in");
  }
  if (mode != FlceMode::forward) {
    need(c->dX, "dX");
    need(c->dW, "dW");
  }
  if (c->workspace_size > 0 && !c->workspace)
    throw invalid_argument("args.workspace: null pointer with workspace_size " + std::to_string(c->workspace_size));
  if (c->workspace && reinterpret_cast<uintptr_t>(c->workspace) % 256 != 0)
    throw invalid_argument("args.workspace: must be 256-byte aligned");
  FlceArgs a;
  a.X = c->X;
  a.W = c->W;
  a.y = c->y;
  a.dloss = c->dloss;
  a.lse_in = c->lse_in;
  a.loss = c->loss;
  a.lse = c->lse;
  a.dX = c->dX;
  a.dW = c->dW;
  a.workspace = c->workspace;
  a.workspace_size = c->workspace_size;
  return a;
}

void copy_text(char* dst, size_t cap, const std::string& s) {
  if (cap == 0) return;
  const size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

struct Selected {
  const FlceVariant* variant = nullptr;
  int32_t source = DETFUSE_SOURCE_NAMED;
  std::string tuned_problem_key;
  double distance = 0;
  std::string note;
};

// A tuner choice (FLCE or attention) into the C side's selected variant.
template <class Selected_, class Choice>
void copy_choice(Selected_& r, const Choice& c) {
  r.variant = c.variant;
  switch (c.source) {
    case tuner::ChoiceSource::tuned: r.source = DETFUSE_SOURCE_TUNED; break;
    case tuner::ChoiceSource::nearest: r.source = DETFUSE_SOURCE_NEAREST; break;
    case tuner::ChoiceSource::heuristic: r.source = DETFUSE_SOURCE_HEURISTIC; break;
  }
  r.tuned_problem_key = c.tuned_problem_key;
  r.distance = c.distance;
  r.note = c.note;
}

// Checks the selection without a GPU; `needs_device` says whether resolving it will.
void check_selection(const detfuse_selection* s) {
  require_nonnull(s, "selection");
  if (s->kind != DETFUSE_SELECT_NAME && s->kind != DETFUSE_SELECT_HEURISTIC && s->kind != DETFUSE_SELECT_TUNED)
    throw invalid_argument("selection.kind: must be 0 (name), 1 (heuristic) or 2 (tuned), got " +
                           std::to_string(s->kind));
  if (s->allow_nondeterministic != 0 && s->allow_nondeterministic != 1)
    throw invalid_argument("selection.allow_nondeterministic: must be 0 or 1, got " +
                           std::to_string(s->allow_nondeterministic));
  if (s->kind == DETFUSE_SELECT_NAME) {
    if (!s->name) throw invalid_argument("selection.name: null pointer (required for selection by name)");
    if (!*s->name) throw invalid_argument("selection.name: empty");
  }
}

const FlceVariant& named_variant(const char* name, const FlceProblem& p) {
  const FlceVariant* v = builtin_registry().find_flce(name);
  if (!v)
    throw invalid_argument(std::string("selection.name: no FLCE variant named '") + name +
                           "' in this build (detfuse list prints them)");
  if (v->desc.dtype != p.dtype)
    throw invalid_argument(std::string("selection.name: variant '") + name + "' is for " + to_string(v->desc.dtype) +
                           " inputs, problem.dtype is " + to_string(p.dtype));
  return *v;
}

// Resolves the selection (after check_selection and the problem's checks).
Selected select(const detfuse_selection* s, const FlceProblem& p, FlceMode mode, const std::string& level = "") {
  Selected r;
  if (s->kind == DETFUSE_SELECT_NAME) {
    r.variant = &named_variant(s->name, p);
    r.source = DETFUSE_SOURCE_NAMED;
    r.note = "variant named by the caller";
    return r;
  }
  require_device();
  tuner::Selection sel = s->kind == DETFUSE_SELECT_HEURISTIC
                             ? tuner::heuristic_only()
                             : tuner::tuned(s->db_path ? s->db_path : db::kDefaultPath, s->allow_nondeterministic != 0,
                                            level);
  tuner::FlceChoice c = tuner::choose_flce(p, mode, sel);
  copy_choice(r, c);
  if (r.note.empty() && s->kind == DETFUSE_SELECT_HEURISTIC) r.note = "built-in heuristic requested";
  return r;
}

void fill_choice(detfuse_choice* out, const Selected& s) {
  if (!out) return;
  std::memset(out, 0, sizeof *out);
  copy_text(out->name, sizeof out->name, s.variant->desc.name);
  out->source = s.source;
  out->deterministic = s.variant->desc.deterministic ? 1 : 0;
  out->distance = s.distance;
  copy_text(out->tuned_problem_key, sizeof out->tuned_problem_key, s.tuned_problem_key);
  copy_text(out->note, sizeof out->note, s.note);
}

int32_t run_mode(const char* fn, const detfuse_flce_problem* problem, int32_t mode, const detfuse_flce_args* args,
                 const detfuse_selection* selection, void* stream, detfuse_choice* choice) {
  return guard(fn, [&] {
    const FlceMode m = to_mode(mode);
    const FlceProblem p = to_problem(problem);
    const FlceArgs a = to_args(args, p, m);
    check_selection(selection);
    if (selection->kind == DETFUSE_SELECT_NAME) named_variant(selection->name, p);  // before the device check
    require_device();
    const Selected s = select(selection, p, m);
    flce::run(*s.variant, p, m, a, static_cast<cudaStream_t>(stream));
    fill_choice(choice, s);
  });
}

int32_t digest_out(const Digest& d, char* hex, size_t cap) {
  copy_text(hex, cap, d.hex());
  return DETFUSE_OK;
}

void check_hex_out(char* hex, size_t cap) {
  require_nonnull(hex, "hex");
  if (cap < 33) throw invalid_argument("hex_cap: must be at least 33 (32 hex digits and NUL), got " + std::to_string(cap));
}


// ------------------------------------------------------------------ attention

AttentionMode to_attention_mode(int32_t v) {
  switch (v) {
    case DETFUSE_ATTENTION_FORWARD: return AttentionMode::forward;
    case DETFUSE_ATTENTION_BACKWARD: return AttentionMode::backward;
  }
  throw invalid_argument("mode: must be 0 (forward) or 1 (backward), got " + std::to_string(v));
}

// The C struct to detfuse::AttentionProblem, validated; messages name the C
// field ("problem.Hkv: ...").
AttentionProblem to_attention_problem(const detfuse_attention_problem* c) {
  require_nonnull(c, "problem");
  AttentionProblem p;
  p.B = c->B;
  p.H = c->H;
  p.Hkv = c->Hkv;
  p.Sq = c->Sq;
  p.Sk = c->Sk;
  p.d = c->d;
  p.dtype = to_dtype(c->dtype, "problem.dtype");
  if (c->causal != 0 && c->causal != 1)
    throw invalid_argument("problem.causal: must be 0 or 1, got " + std::to_string(c->causal));
  p.causal = c->causal != 0;
  p.scale = c->scale;
  p.softcap = c->softcap;
  p.window = c->window;
  try {
    p.validate();
  } catch (const Error& e) {
    throw Error(std::string("problem.") + e.what(), e.kind());
  }
  return p;
}

// The pointers `mode` needs (attention::validate_call's rules, checked here
// so that a bad call fails before any CUDA call, with the C field names).
AttentionArgs to_attention_args(const detfuse_attention_args* c, AttentionMode mode) {
  require_nonnull(c, "args");
  const std::string for_mode = std::string(" (required for ") + attention::to_string(mode) + ")";
  auto need = [&](const void* ptr, const char* name) {
    if (!ptr) throw invalid_argument(std::string("args.") + name + ": null pointer" + for_mode);
  };
  need(c->Q, "Q");
  need(c->K, "K");
  need(c->V, "V");
  if (mode == AttentionMode::forward) {
    need(c->O, "O");
    need(c->lse, "lse");
  } else {
    need(c->dO, "dO");
    need(c->O_in, "O_in");
    need(c->lse_in, "lse_in");
    need(c->dQ, "dQ");
    need(c->dK, "dK");
    need(c->dV, "dV");
  }
  if (c->workspace_size > 0 && !c->workspace)
    throw invalid_argument("args.workspace: null pointer with workspace_size " + std::to_string(c->workspace_size));
  if (c->workspace && reinterpret_cast<uintptr_t>(c->workspace) % 256 != 0)
    throw invalid_argument("args.workspace: must be 256-byte aligned");
  AttentionArgs a;
  a.Q = c->Q;
  a.K = c->K;
  a.V = c->V;
  a.dO = c->dO;
  a.O_in = c->O_in;
  a.lse_in = c->lse_in;
  a.O = c->O;
  a.lse = c->lse;
  a.dQ = c->dQ;
  a.dK = c->dK;
  a.dV = c->dV;
  a.workspace = c->workspace;
  a.workspace_size = c->workspace_size;
  return a;
}

// Name, heuristic and tuned (the same selection checks as FLCE's).
void check_attention_selection(const detfuse_selection* s) { check_selection(s); }

// The device the calling thread's CUDA context is on (after require_device).
const DeviceInfo& current_device() {
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  return cached_device(dev);
}

// By name: the name and the dtype (no GPU); where a device is present, also
// the variant's can_run for this mode on the current device, so that a
// forward-only variant is refused for the backward with its reason.
const AttentionVariant& named_attention_variant(const char* name, const AttentionProblem& p, AttentionMode mode) {
  const AttentionVariant* v = builtin_registry().find_attention(name);
  if (!v)
    throw invalid_argument(std::string("selection.name: no attention variant named '") + name +
                           "' in this build (detfuse list prints them)");
  if (v->desc.dtype != p.dtype)
    throw invalid_argument(std::string("selection.name: variant '") + name + "' is for " + to_string(v->desc.dtype) +
                           " inputs, problem.dtype is " + to_string(p.dtype));
  if (cuda_device_count(nullptr) > 0) {
    if (auto why = v->can_run(p, mode, current_device()))
      throw invalid_argument(std::string("selection.name: variant '") + name + "' cannot run the " +
                             attention::to_string(mode) + " of " + p.key() + ": " + *why);
  }
  return *v;
}

struct AttentionSelected {
  const AttentionVariant* variant = nullptr;
  int32_t source = DETFUSE_SOURCE_NAMED;
  std::string tuned_problem_key;
  double distance = 0;
  std::string note;
};

// TUNED: the store holds forward+backward measurements (the mode the tuner
// times), so both passes look up the same best result; the forward asks for a
// variant that runs the forward (tuner Mode::forward), the backward for one
// that runs both passes (Mode::forward_backward). Then the nearest tuned
// shape, then the per-pass heuristic (tuner/best.h), each said in the note.
AttentionSelected select_attention_on_device(const detfuse_selection* s, const AttentionProblem& p,
                                             AttentionMode mode, const std::string& level);

AttentionSelected select_attention(const detfuse_selection* s, const AttentionProblem& p, AttentionMode mode,
                                   const std::string& level = "") {
  AttentionSelected r;
  if (s->kind == DETFUSE_SELECT_NAME) {
    r.variant = &named_attention_variant(s->name, p, mode);
    r.note = "variant named by the caller";
    return r;
  }
  require_device();
  try {
    return select_attention_on_device(s, p, mode, level);
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::invalid_argument) throw;
    // "no registered attention variant can run ...": add the reason a variant
    // of this head dim gives (the softcap/window refusals name the feature).
    const std::string suffix = "_d" + std::to_string(p.d);
    for (const auto& v : builtin_registry().attention()) {
      const std::string& n = v.desc.name;
      const bool same_d = n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
      if (v.desc.dtype != p.dtype || !same_d) continue;
      if (auto why = v.can_run(p, mode, current_device()))
        throw Error(std::string(e.what()) + " (for example " + n + ": " + *why + ")", e.kind());
    }
    throw;
  }
}

AttentionSelected select_attention_on_device(const detfuse_selection* s, const AttentionProblem& p,
                                             AttentionMode mode, const std::string& level) {
  AttentionSelected r;
  if (s->kind == DETFUSE_SELECT_HEURISTIC) {
    r.variant = &attention::heuristic_variant(p, mode, current_device());
    r.source = DETFUSE_SOURCE_HEURISTIC;
    r.note = std::string("built-in heuristic for the ") + attention::to_string(mode) +
             " requested (deterministic owning variant first)";
    return r;
  }
  const tuner::Selection sel =
      tuner::tuned(s->db_path ? s->db_path : db::kDefaultPath, s->allow_nondeterministic != 0, level);
  const tuner::AttentionChoice c = tuner::choose_attention(
      p, mode == AttentionMode::forward ? tuner::Mode::forward : tuner::Mode::forward_backward, sel);
  copy_choice(r, c);
  return r;
}

void fill_attention_choice(detfuse_choice* out, const AttentionSelected& s) {
  if (!out) return;
  std::memset(out, 0, sizeof *out);
  copy_text(out->name, sizeof out->name, s.variant->desc.name);
  out->source = s.source;
  out->deterministic = s.variant->desc.deterministic ? 1 : 0;
  out->distance = s.distance;
  copy_text(out->tuned_problem_key, sizeof out->tuned_problem_key, s.tuned_problem_key);
  copy_text(out->note, sizeof out->note, s.note);
}

int32_t run_attention_mode(const char* fn, const detfuse_attention_problem* problem, int32_t mode,
                           const detfuse_attention_args* args, const detfuse_selection* selection, void* stream,
                           detfuse_choice* choice) {
  return guard(fn, [&] {
    const AttentionMode m = to_attention_mode(mode);
    const AttentionProblem p = to_attention_problem(problem);
    const AttentionArgs a = to_attention_args(args, m);
    check_attention_selection(selection);
    if (selection->kind == DETFUSE_SELECT_NAME)
      named_attention_variant(selection->name, p, m);  // name and dtype errors before the device check
    require_device();
    const AttentionSelected s = select_attention(selection, p, m);
    attention::run(*s.variant, p, m, a, static_cast<cudaStream_t>(stream));
    fill_attention_choice(choice, s);
  });
}

// The level of a *_choose_level call: checked without a GPU; only a TUNED
// selection has stored levels to pick among.
std::string level_of(const detfuse_selection* s, const char* level) {
  if (!level || !*level) return "";
  db::check_level_name(level, "level");
  if (s->kind != DETFUSE_SELECT_TUNED)
    throw invalid_argument(std::string("level: '") + level +
                           "' needs a tuned selection (selection.kind 2): only stored results have a level");
  return level;
}

// The registry's variants of one family: their count, and the name at an index.
template <class List>
void count_variants(const List& all, int64_t* count) {
  require_nonnull(count, "count");
  *count = int64_t(all.size());
}

template <class List>
void name_variant(const List& all, int64_t index, char* name, size_t name_cap) {
  require_nonnull(name, "name");
  if (index < 0 || index >= int64_t(all.size()))
    throw invalid_argument("index: must be in [0, " + std::to_string(all.size()) + "), got " + std::to_string(index));
  copy_text(name, name_cap, all[size_t(index)].desc.name);
}

// detfuse_*_choose and *_choose_level (level null or empty: any level).
int32_t choose_flce(const char* fn, const detfuse_flce_problem* problem, int32_t mode,
                    const detfuse_selection* selection, const char* level, detfuse_choice* choice) {
  return guard(fn, [&] {
    const FlceMode m = to_mode(mode);
    const FlceProblem p = to_problem(problem);
    check_selection(selection);
    const std::string l = level_of(selection, level);
    require_nonnull(choice, "choice");
    fill_choice(choice, select(selection, p, m, l));
  });
}

int32_t choose_attention(const char* fn, const detfuse_attention_problem* problem, int32_t mode,
                         const detfuse_selection* selection, const char* level, detfuse_choice* choice) {
  return guard(fn, [&] {
    const AttentionMode m = to_attention_mode(mode);
    const AttentionProblem p = to_attention_problem(problem);
    check_attention_selection(selection);
    const std::string l = level_of(selection, level);
    require_nonnull(choice, "choice");
    fill_attention_choice(choice, select_attention(selection, p, m, l));
  });
}

}  // namespace

extern "C" {

int32_t detfuse_abi_version(void) { return DETFUSE_C_ABI_VERSION; }

const char* detfuse_version(void) { return "0.1.0"; }

const char* detfuse_last_error(void) { return g_last_error.c_str(); }

const char* detfuse_status_name(int32_t status) {
  switch (status) {
    case DETFUSE_OK: return "DETFUSE_OK";
    case DETFUSE_ERR_INVALID_ARGUMENT: return "DETFUSE_ERR_INVALID_ARGUMENT";
    case DETFUSE_ERR_NO_DEVICE: return "DETFUSE_ERR_NO_DEVICE";
    case DETFUSE_ERR_RUNTIME: return "DETFUSE_ERR_RUNTIME";
    case DETFUSE_ERR_OUT_OF_MEMORY: return "DETFUSE_ERR_OUT_OF_MEMORY";
    case DETFUSE_ERR_INTERNAL: return "DETFUSE_ERR_INTERNAL";
  }
  return "unknown status";
}

int32_t detfuse_device_count(void) {
  try {
    return cuda_device_count(nullptr);
  } catch (...) {
    return 0;
  }
}

int32_t detfuse_flce_problem_init(detfuse_flce_problem* problem) {
  return guard("detfuse_flce_problem_init", [&] {
    require_nonnull(problem, "problem");
    const FlceProblem d;
    std::memset(problem, 0, sizeof *problem);
    problem->N = d.N;
    problem->D = d.D;
    problem->V = d.V;
    problem->dtype = d.dtype == DType::bf16 ? DETFUSE_DTYPE_BF16 : DETFUSE_DTYPE_F32;
    problem->grad_dtype = d.grad_dtype == DType::bf16 ? DETFUSE_DTYPE_BF16 : DETFUSE_DTYPE_F32;
    problem->ignore_index = d.ignore_index;
    problem->reduction = DETFUSE_REDUCTION_MEAN;
    problem->label_smoothing = d.label_smoothing;
    problem->z_loss = d.lse_square_scale;
    problem->softcap = d.softcap;
    problem->grad_output = d.grad_output;
  });
}

int32_t detfuse_flce_problem_key(const detfuse_flce_problem* problem, char* key, size_t key_cap) {
  return guard("detfuse_flce_problem_key", [&] {
    const FlceProblem p = to_problem(problem);
    if (key) copy_text(key, key_cap, p.key());
  });
}

int32_t detfuse_flce_variant_count(int64_t* count) {
  return guard("detfuse_flce_variant_count", [&] { count_variants(builtin_registry().flce(), count); });
}

int32_t detfuse_flce_variant_name(int64_t index, char* name, size_t name_cap) {
  return guard("detfuse_flce_variant_name", [&] { name_variant(builtin_registry().flce(), index, name, name_cap); });
}

int32_t detfuse_flce_choose(const detfuse_flce_problem* problem, int32_t mode, const detfuse_selection* selection,
                            detfuse_choice* choice) {
  return choose_flce("detfuse_flce_choose", problem, mode, selection, nullptr, choice);
}

int32_t detfuse_flce_choose_level(const detfuse_flce_problem* problem, int32_t mode,
                                  const detfuse_selection* selection, const char* level, detfuse_choice* choice) {
  return choose_flce("detfuse_flce_choose_level", problem, mode, selection, level, choice);
}

int32_t detfuse_flce_workspace_size(const detfuse_flce_problem* problem, int32_t mode,
                                    const detfuse_selection* selection, size_t* bytes) {
  return guard("detfuse_flce_workspace_size", [&] {
    const FlceMode m = to_mode(mode);
    const FlceProblem p = to_problem(problem);
    check_selection(selection);
    require_nonnull(bytes, "bytes");
    *bytes = select(selection, p, m).variant->workspace_bytes(p, m);
  });
}

int32_t detfuse_flce_run(const detfuse_flce_problem* problem, int32_t mode, const detfuse_flce_args* args,
                         const detfuse_selection* selection, void* stream, detfuse_choice* choice) {
  return run_mode("detfuse_flce_run", problem, mode, args, selection, stream, choice);
}

int32_t detfuse_flce_forward(const detfuse_flce_problem* problem, const detfuse_flce_args* args,
                             const detfuse_selection* selection, void* stream, detfuse_choice* choice) {
  return run_mode("detfuse_flce_forward", problem, DETFUSE_MODE_FORWARD, args, selection, stream, choice);
}

int32_t detfuse_flce_forward_backward(const detfuse_flce_problem* problem, const detfuse_flce_args* args,
                                      const detfuse_selection* selection, void* stream, detfuse_choice* choice) {
  return run_mode("detfuse_flce_forward_backward", problem, DETFUSE_MODE_FORWARD_BACKWARD, args, selection, stream,
                  choice);
}

int32_t detfuse_flce_backward(const detfuse_flce_problem* problem, const detfuse_flce_args* args,
                              const detfuse_selection* selection, void* stream, detfuse_choice* choice) {
  return run_mode("detfuse_flce_backward", problem, DETFUSE_MODE_BACKWARD, args, selection, stream, choice);
}

int32_t detfuse_attention_problem_init(detfuse_attention_problem* problem) {
  return guard("detfuse_attention_problem_init", [&] {
    require_nonnull(problem, "problem");
    const AttentionProblem d;
    std::memset(problem, 0, sizeof *problem);
    problem->B = d.B;
    problem->H = d.H;
    problem->Hkv = d.Hkv;
    problem->Sq = d.Sq;
    problem->Sk = d.Sk;
    problem->d = d.d;
    problem->dtype = d.dtype == DType::bf16 ? DETFUSE_DTYPE_BF16 : DETFUSE_DTYPE_F32;
    problem->causal = d.causal ? 1 : 0;
    problem->scale = d.scale;
    problem->softcap = d.softcap;
    problem->window = d.window;
  });
}

int32_t detfuse_attention_problem_key(const detfuse_attention_problem* problem, char* key, size_t key_cap) {
  return guard("detfuse_attention_problem_key", [&] {
    const AttentionProblem p = to_attention_problem(problem);
    if (key) copy_text(key, key_cap, p.key());
  });
}

int32_t detfuse_attention_variant_count(int64_t* count) {
  return guard("detfuse_attention_variant_count", [&] { count_variants(builtin_registry().attention(), count); });
}

int32_t detfuse_attention_variant_name(int64_t index, char* name, size_t name_cap) {
  return guard("detfuse_attention_variant_name", [&] { name_variant(builtin_registry().attention(), index, name, name_cap); });
}

int32_t detfuse_attention_choose(const detfuse_attention_problem* problem, int32_t mode,
                                 const detfuse_selection* selection, detfuse_choice* choice) {
  return choose_attention("detfuse_attention_choose", problem, mode, selection, nullptr, choice);
}

int32_t detfuse_attention_choose_level(const detfuse_attention_problem* problem, int32_t mode,
                                       const detfuse_selection* selection, const char* level,
                                       detfuse_choice* choice) {
  return choose_attention("detfuse_attention_choose_level", problem, mode, selection, level, choice);
}

int32_t detfuse_attention_workspace_size(const detfuse_attention_problem* problem, int32_t mode,
                                         const detfuse_selection* selection, size_t* bytes) {
  return guard("detfuse_attention_workspace_size", [&] {
    const AttentionMode m = to_attention_mode(mode);
    const AttentionProblem p = to_attention_problem(problem);
    check_attention_selection(selection);
    require_nonnull(bytes, "bytes");
    *bytes = select_attention(selection, p, m).variant->workspace_bytes(p, m);
  });
}

int32_t detfuse_attention_run(const detfuse_attention_problem* problem, int32_t mode,
                              const detfuse_attention_args* args, const detfuse_selection* selection, void* stream,
                              detfuse_choice* choice) {
  return run_attention_mode("detfuse_attention_run", problem, mode, args, selection, stream, choice);
}

int32_t detfuse_attention_forward(const detfuse_attention_problem* problem, const detfuse_attention_args* args,
                                  const detfuse_selection* selection, void* stream, detfuse_choice* choice) {
  return run_attention_mode("detfuse_attention_forward", problem, DETFUSE_ATTENTION_FORWARD, args, selection, stream,
                            choice);
}

int32_t detfuse_attention_backward(const detfuse_attention_problem* problem, const detfuse_attention_args* args,
                                   const detfuse_selection* selection, void* stream, detfuse_choice* choice) {
  return run_attention_mode("detfuse_attention_backward", problem, DETFUSE_ATTENTION_BACKWARD, args, selection,
                            stream, choice);
}

int32_t detfuse_scale_unless_one(void* data, int64_t n, int32_t dtype, const float* scale, void* stream) {
  return guard("detfuse_scale_unless_one", [&] {
    if (n < 0) throw invalid_argument("n: must be >= 0, got " + std::to_string(n));
    const DType t = to_dtype(dtype, "dtype");
    if (n > 0) {
      require_nonnull(data, "data");
      require_nonnull(scale, "scale");
    }
    require_device();
    flce::launch_scale_unless_one(data, n, t, scale, static_cast<cudaStream_t>(stream));
  });
}

int32_t detfuse_digest_device(const void* data, size_t bytes, void* stream, char* hex, size_t hex_cap) {
  return guard("detfuse_digest_device", [&] {
    if (bytes > 0) require_nonnull(data, "data");
    check_hex_out(hex, hex_cap);
    require_device();
    digest_out(digest_device(data, bytes, static_cast<cudaStream_t>(stream)), hex, hex_cap);
  });
}

int32_t detfuse_digest_host(const void* data, size_t bytes, char* hex, size_t hex_cap) {
  return guard("detfuse_digest_host", [&] {
    if (bytes > 0) require_nonnull(data, "data");
    check_hex_out(hex, hex_cap);
    digest_out(digest_host(data, bytes), hex, hex_cap);
  });
}

}  // extern "C"
