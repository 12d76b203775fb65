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
#include "kernels/common/error.h"
#include "kernels/common/problem.h"
#include "kernels/flce/flce.h"
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
  if (c->reserved0 != 0)
    throw invalid_argument("problem.reserved0: must be 0, got " + std::to_string(c->reserved0));
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
Selected select(const detfuse_selection* s, const FlceProblem& p, FlceMode mode) {
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
                             : tuner::tuned(s->db_path ? s->db_path : db::kDefaultPath, s->allow_nondeterministic != 0);
  tuner::FlceChoice c = tuner::choose_flce(p, mode, sel);
  r.variant = c.variant;
  switch (c.source) {
    case tuner::ChoiceSource::tuned: r.source = DETFUSE_SOURCE_TUNED; break;
    case tuner::ChoiceSource::nearest: r.source = DETFUSE_SOURCE_NEAREST; break;
    case tuner::ChoiceSource::heuristic: r.source = DETFUSE_SOURCE_HEURISTIC; break;
  }
  r.tuned_problem_key = c.tuned_problem_key;
  r.distance = c.distance;
  r.note = c.note;
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
  return guard("detfuse_flce_variant_count", [&] {
    require_nonnull(count, "count");
    *count = int64_t(builtin_registry().flce().size());
  });
}

int32_t detfuse_flce_variant_name(int64_t index, char* name, size_t name_cap) {
  return guard("detfuse_flce_variant_name", [&] {
    require_nonnull(name, "name");
    const auto& all = builtin_registry().flce();
    if (index < 0 || index >= int64_t(all.size()))
      throw invalid_argument("index: must be in [0, " + std::to_string(all.size()) + "), got " + std::to_string(index));
    copy_text(name, name_cap, all[size_t(index)].desc.name);
  });
}

int32_t detfuse_flce_choose(const detfuse_flce_problem* problem, int32_t mode, const detfuse_selection* selection,
                            detfuse_choice* choice) {
  return guard("detfuse_flce_choose", [&] {
    const FlceMode m = to_mode(mode);
    const FlceProblem p = to_problem(problem);
    check_selection(selection);
    require_nonnull(choice, "choice");
    fill_choice(choice, select(selection, p, m));
  });
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
