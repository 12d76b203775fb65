// The contention study's sweep, as pure functions: which problems
// and which registered variants one `detfuse study contention` run measures.
// No GPU, no store: tested on the CPU (tests/study).
//
// FLCE axes (DESIGN.md, "Gradient-accumulation strategies"):
//   - contention level (adders per dW element): the row splits sk of atomic
//     and partials, 1 to every row block of the chunk (sk0), registered as
//     study variants, measured at every problem (the fixed point N_fixed, D, V
//     is the adders axis);
//   - problem size: N from 512 to 64k at fixed D, V (the number of chunks,
//     hence of adders per dW element over the call, grows with N);
//   - vocabulary size V and hidden size D at a fixed N;
//   - per (engine, strategy): a few block shapes, and the knobs of the
//     strategies: `mb` (chunk budget of owning; with sk and vs the workspace
//     bound of partials), `sk` (row splits), `vs` (partial slab rows).
// Attention axes (the strategies concern dQ; dK, dV are owned by key blocks):
//   - contention level: Sq = Sk from 512 to 32k at a constant B*S token count
//     (Sk / bc key blocks add into every dQ tile);
//   - causal masking (a query block receives from the key blocks it sees only);
//   - GQA group size H/Hkv (how many query heads a kv head's dK, dV sum over).
// Both families: the SM-count axis, every planned variant on green-context
// slices of the GPU (tuner/sm_slice.h) at the problems of `sm_problems`, one
// tuning run per SM count (0: the whole device, every problem).
// Variants are chosen from the registry's names by parsing them
// ("family.dtype.engine.strategy.k1v1_k2v2..."), never from a list of names:
// a new strategy (e.g. `ordered`) or block shape is studied once registered.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/problem.h"
#include "kernels/registry.h"
#include "tuner/families.h"

namespace detfuse::study {

// A canonical variant name taken apart.
struct ParsedVariant {
  std::string name, family, dtype, engine, strategy;
  std::vector<std::pair<std::string, int64_t>> params;  // in name order
  // The value of `key`, or `def` when the name has none.
  int64_t param(const std::string& key, int64_t def = 0) const;
  // The block shape: the params other than the strategy knobs (mb, sk, vs),
  // as they appear in the name, e.g. "bm128_bn128_bk32_wm2_wn4_st4".
  std::string tile() const;
};

// nullopt when `name` is not "family.dtype.engine.strategy.params" with params
// "<letters><integer>" joined by '_'.
std::optional<ParsedVariant> parse_variant_name(const std::string& name);

// The knobs of a strategy, not part of the block shape.
bool is_strategy_knob(const std::string& param);

struct ContentionOptions {
  Family family = Family::flce;
  bool quick = false;
  DType dtype = DType::bf16;
  std::vector<std::string> engines;  // empty: every engine (fma: see contention_variants)
  // Registered study variants (VariantDesc::study_only): kept for the first
  // block shape of a group (the knob sweep), never as another shape's default.
  std::vector<std::string> study_variants;
  // The SM-count axis; empty: the default (quick {16, 0}, full {8, 16, 33, 66, 0}); 0 = the whole device.
  std::vector<int> sms;
};

struct ContentionPlan {
  // The study's name in the store: contention-<family>[-quick][-<engine>...].
  std::string name;
  std::vector<tuner::Problem> problems;  // of the plan's family, in sweep order
  std::vector<std::string> variants;  // in registry order
  // The SM counts, one tuning run each, in this order (0: the whole device,
  // `problems`; K > 0: a slice of K SMs, `sm_problems`).
  std::vector<int> sms;
  std::vector<tuner::Problem> sm_problems;  // the fixed point of the contention axis
  int repeats = 5;           // K
  double time_cap_s = 20;    // per variant (soft)
  std::string axes_json;     // what the plan sweeps, stored with the study
};

// Problem axes: fixed D and V of the contention sweep, its Ns, and the V and
// D sweeps at a fixed N.
struct ContentionAxes {
  int64_t D = 4096, V = 32768;
  std::vector<int64_t> N_sweep;
  int64_t N_fixed = 8192;
  std::vector<int64_t> V_sweep;
  std::vector<int64_t> D_sweep;
};
ContentionAxes contention_axes(bool quick);

// The problems of the axes (dtype as given, other options default), without
// duplicates, in sweep order: contention, then vocabulary, then hidden size.
std::vector<FlceProblem> contention_problems(const ContentionAxes& axes, DType dtype);

// Attention axes: Sq = Sk sweeps at H heads of head dim d, the batch chosen to
// keep B*S near `tokens` (B = max(1, tokens / S)); the S sweep non-causal and
// causal; the GQA sweep (Hkv values) at S_gqa, non-causal.
struct AttentionContentionAxes {
  int64_t H = 32, d = 128, tokens = 16384;
  std::vector<int64_t> S_sweep;    // non-causal, Hkv = H
  std::vector<int64_t> causal_S;   // causal, Hkv = H
  int64_t S_gqa = 4096;
  std::vector<int64_t> Hkv_sweep;  // at S_gqa, non-causal (Hkv = H is the S sweep's point)
  int64_t batch(int64_t S) const { return S >= tokens ? 1 : tokens / S; }
};
AttentionContentionAxes attention_contention_axes(bool quick);

// The problems of the attention axes (dtype as given, default scale), without
// duplicates, in sweep order: contention, then causal, then GQA.
std::vector<AttentionProblem> attention_contention_problems(const AttentionContentionAxes& axes, DType dtype);

// The variants of the registry (its names, in registry order) the study
// measures, in registry order. Per (engine, strategy) of o.family and the
// dtype (and of `engines` when not empty):
//   full:  every block shape at its default knobs (owning: its median chunk
//          budget; a default is never a study variant, o.study_variants),
//          plus every knob setting of the group's first block shape;
//   quick: the group's first block shape only: owning at its smallest and
//          largest chunk budget; FLCE atomic and partials at every row-split
//          level (the adders axis); the other strategies at their first knobs.
// Knob order: mb, then sk (sk0, every row block, last), then vs.
// Attention: the study measures forward+backward, so the forward-only
// strategy `fwd` is left out; a variant whose name carries a head dim `dNN`
// is kept only when NN is the axes' d (the wgmma and fma variants run their
// own head dim only).
// Both families: the `fma` engine (CUDA-core fp32, reference grade) is
// planned only when no other engine has a variant of the family and dtype,
// or when `engines` names it: on a tensor-core GPU one of its calls at the
// study's large points takes seconds, and it would dominate the study's time.
// Names that do not parse are ignored.
std::vector<std::string> contention_variants(const std::vector<std::string>& registry_names,
                                             const ContentionOptions& o);

// The whole plan of o.family. Throws detfuse::Error (invalid_argument) when no
// variant matches.
ContentionPlan plan_contention(const std::vector<std::string>& registry_names, const ContentionOptions& o);

}  // namespace detfuse::study
