// Float64 CPU reference of softmax attention, forward (O, LSE) and backward
// (dQ, dK, dV), with the semantics of kernels/common/problem.h: S = scale Q K^T,
// causal masking bottom-right aligned (query i sees key j iff j <= i + Sk - Sq),
// GQA (head h reads kv head h / (H / Hkv); dK, dV sum over the heads sharing a
// kv head), logit softcap (s = c tanh(s / c) before the mask; the backward
// multiplies dS by 1 - (s / c)^2), sliding window (query i sees key j only if
// j > i + Sk - Sq - window), and rows that see no key give O = 0, LSE = -inf,
// zero gradients.
//
// Parallel over (b, h); each head works through its queries in blocks of 64
// (a 64 x Sk score block at most, never Sq x Sk; with a window only the keys
// the block's rows can see). dK/dV are formed per query head and
// then summed over the heads of a group in head order, so results are bitwise
// identical for any thread count.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/common/problem.h"
#include "reference/inputs.h"

namespace detfuse::reference {

struct AttentionResult {
  std::vector<double> O;    // [B, H, Sq, d]
  std::vector<double> lse;  // [B, H, Sq], natural log; -inf for rows that see no key
  std::vector<double> dQ;   // [B, H, Sq, d]   (empty for forward only)
  std::vector<double> dK;   // [B, Hkv, Sk, d] (idem)
  std::vector<double> dV;   // [B, Hkv, Sk, d] (idem)
};

// dO == nullptr: forward only. Backward uses D_i = rowsum(dO * O).
// threads = 0: hardware_concurrency(). Throws detfuse::Error (invalid_argument)
// on a bad problem or null pointers.
template <class T>
AttentionResult attention_reference(const AttentionProblem& p, const T* Q, const T* K, const T* V,
                                    const std::type_identity_t<T>* dO, int threads = 0);

// Convenience on generated inputs (backward uses in.dO).
AttentionResult attention_reference(const AttentionProblem& p, const AttentionInputs& in, bool backward,
                                    int threads = 0);

extern template AttentionResult attention_reference<float>(const AttentionProblem&, const float*, const float*,
                                                           const float*, const float*, int);
extern template AttentionResult attention_reference<double>(const AttentionProblem&, const double*,
                                                            const double*, const double*, const double*, int);

}  // namespace detfuse::reference
