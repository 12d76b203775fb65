// The run-time list of compiled kernel variants (DESIGN.md, "Variants").
//
// Every compile-time instantiation of a kernel is mirrored by a descriptor with
// a canonical name that spells every parameter (flce.bf16.mma.owning.bm128_bn128_bk32_wm2_wn4_st4_mb1024),
// paired with can_run / workspace_bytes / launch. Tests, the tuner, experiments
// and `detfuse list` walk this list, so adding a variant is one registration line.
// Registration is explicit: builtin_registry() calls register_flce() and
// register_attention(); nothing registers itself during static initialisation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"

namespace detfuse {

enum class Family { flce, attention };
const char* to_string(Family f);
Family parse_family(const std::string& s);

struct VariantDesc {
  std::string name;      // canonical; the key in the database, tests and CLI
  Family family = Family::flce;
  DType dtype = DType::bf16;
  std::string engine;    // the matrix engine: "fma", "mma", "wgmma", "cublaslt"
  std::string strategy;  // gradient accumulation: a token of kernels/common/strategy.h ("owning", "atomic", ...)
  std::vector<std::pair<std::string, int64_t>> params;  // block sizes etc., in name order
  bool deterministic = false;  // what the design promises run to run; the tuner checks it
  std::string summary;         // one line for `detfuse list`
  // A study variant (e.g. a row-split level of the contention study): the
  // tuner's default selection skips it; named with --variant, or planned by a
  // study, it is measured like any other.
  bool study_only = false;

  // "family.dtype.engine.strategy.k1v1_k2v2..." from the other fields.
  static std::string canonical_name(Family f, DType t, const std::string& engine, const std::string& strategy,
                                    const std::vector<std::pair<std::string, int64_t>>& params);
  std::string params_text() const;  // "bm=128 bn=128 ..."
};

// The engine tokens of variant names (DESIGN.md, "Engines"), in this order.
const std::vector<std::string>& known_engines();
// "fma, mma, wgmma or cublaslt", for messages.
std::string known_engines_text();

// ----------------------------------------------------------------------------- FLCE
enum class FlceMode { forward, forward_backward, backward };
const char* to_string(FlceMode m);

// Device pointers for one FLCE call. Which are read and written depends on the mode:
//   forward:          reads X, W, y;            writes loss, lse
//   forward_backward: reads X, W, y (dloss);    writes loss, lse, dX, dW
//   backward:         reads X, W, y, lse_in (dloss); writes dX, dW
// y values must be in [0, V) or equal ignore_index (flce::count_bad_targets checks).
struct FlceArgs {
  const void* X = nullptr;        // [N, D] problem.dtype, row-major
  const void* W = nullptr;        // [V, D] problem.dtype, row-major (nn.Linear layout)
  const int64_t* y = nullptr;     // [N]
  const float* dloss = nullptr;   // [N] upstream per-row gradient; reduction none only
  const float* lse_in = nullptr;  // [N] saved LSE; backward mode only
  float* loss = nullptr;          // [1] for mean/sum, [N] for none
  float* lse = nullptr;           // [N]
  void* dX = nullptr;             // [N, D] problem.grad_dtype
  void* dW = nullptr;             // [V, D] problem.grad_dtype
  void* workspace = nullptr;      // workspace_bytes(problem, mode) bytes, 256-byte aligned
  size_t workspace_size = 0;
};

struct FlceVariant {
  VariantDesc desc;
  // Empty when the variant can run the problem on the device; else the reason.
  std::function<std::optional<std::string>(const FlceProblem&, FlceMode, const DeviceInfo&)> can_run;
  std::function<size_t(const FlceProblem&, FlceMode)> workspace_bytes;
  // Enqueues the work on stream; throws detfuse::Error on launch failure.
  std::function<void(const FlceProblem&, FlceMode, const FlceArgs&, cudaStream_t)> launch;
};

// ------------------------------------------------------------------------ attention
enum class AttentionMode { forward, backward };

struct AttentionArgs {
  const void* Q = nullptr;   // [B, H, Sq, d]
  const void* K = nullptr;   // [B, Hkv, Sk, d]
  const void* V = nullptr;   // [B, Hkv, Sk, d]
  const void* dO = nullptr;  // [B, H, Sq, d], backward
  const void* O_in = nullptr;      // backward: the forward's O
  const float* lse_in = nullptr;   // backward: the forward's LSE
  void* O = nullptr;         // [B, H, Sq, d], forward
  float* lse = nullptr;      // [B, H, Sq], forward
  void* dQ = nullptr;        // backward, fp32 or dtype
  void* dK = nullptr;
  void* dV = nullptr;
  void* workspace = nullptr;
  size_t workspace_size = 0;
};

struct AttentionVariant {
  VariantDesc desc;
  std::function<std::optional<std::string>(const AttentionProblem&, AttentionMode, const DeviceInfo&)> can_run;
  std::function<size_t(const AttentionProblem&, AttentionMode)> workspace_bytes;
  std::function<void(const AttentionProblem&, AttentionMode, const AttentionArgs&, cudaStream_t)> launch;
};

// ------------------------------------------------------------------------- registry
class Registry {
 public:
  void add(FlceVariant v);       // throws detfuse::Error on a duplicate or malformed entry
  void add(AttentionVariant v);
  const std::vector<FlceVariant>& flce() const { return flce_; }
  const std::vector<AttentionVariant>& attention() const { return attention_; }
  const FlceVariant* find_flce(std::string_view name) const;
  const AttentionVariant* find_attention(std::string_view name) const;
  // Every descriptor, FLCE first, in registration order.
  std::vector<const VariantDesc*> descriptors() const;

 private:
  void check_new(const VariantDesc& d) const;
  std::vector<FlceVariant> flce_;
  std::vector<AttentionVariant> attention_;
};

// Explicit registration functions, one per family (kernels/flce/, kernels/attention/).
void register_flce(Registry& r);
void register_attention(Registry& r);

// The registry of every built-in variant, built on first use by the calls above.
const Registry& builtin_registry();

}  // namespace detfuse
