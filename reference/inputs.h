// Seeded, machine-independent random inputs for FLCE and attention.
//
// Every value is a pure function of (seed, tensor, index): splitmix64 as a
// counter-based generator and Box-Muller with a hand-written log and cos that
// use only +, -, *, / and sqrt (all IEEE correctly rounded, compiled without FMA
// contraction), so the bytes are the same with any C++ library, any libm, any
// thread count and any machine. Values are rounded to the problem's dtype
// (round_to_bf16 for bf16) so the reference sees exactly what the GPU sees.
// Each tensor has its own stream, so e.g. W does not change when N does.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/problem.h"

namespace detfuse::reference {

struct FlceInputs {
  std::vector<float> X;        // [N, D], values exactly representable in p.dtype
  std::vector<float> W;        // [V, D], idem
  std::vector<int64_t> y;      // [N], in [0, V) or p.ignore_index
  std::vector<float> dloss;    // [N], uniform(0.5, 1.5): the upstream gradient for reduction none
};

struct FlceInputOptions {
  double logit_std = 2.0;        // standard deviation of the logits z = x.w
  double ignore_fraction = 0.05; // probability that a row's target is ignore_index
  // Adds a common component of about this size to every logit of a row, with a
  // random sign per row (x_i0 = +-1, w_j0 = offset; needs D >= 2). 1e4 gives
  // logits near +-1e4 to exercise the max trick.
  double logit_offset = 0.0;
};

// X ~ N(0, 1), W ~ N(0, logit_std^2 / D'), D' = D (or D - 1 with an offset).
FlceInputs make_flce_inputs(const FlceProblem& p, uint64_t seed, const FlceInputOptions& o = {});

struct AttentionInputs {
  std::vector<float> Q;   // [B, H, Sq, d]
  std::vector<float> K;   // [B, Hkv, Sk, d]
  std::vector<float> V;   // [B, Hkv, Sk, d]
  std::vector<float> dO;  // [B, H, Sq, d]
};

// Q, K, V, dO ~ N(0, 1), rounded to p.dtype.
AttentionInputs make_attention_inputs(const AttentionProblem& p, uint64_t seed);

// --- building blocks (also for callers that need their own tensors) ---

// splitmix64 output number `index` of the sequence seeded with `key`.
uint64_t splitmix64_at(uint64_t key, uint64_t index);
// A key for tensor `stream` of `seed` (distinct streams are independent).
uint64_t stream_key(uint64_t seed, uint64_t stream);
// Standard normal number `index` of the stream `key` (Box-Muller, cos branch).
double normal_at(uint64_t key, uint64_t index);
// Uniform in [0, 1) with 53 random bits.
double uniform_at(uint64_t key, uint64_t index);
// out[i] = round_to_dtype(stddev * normal_at(key, i)), filled in parallel.
void fill_normal(float* out, int64_t n, uint64_t key, double stddev, DType dtype);
// Rounds v to the nearest value representable in dtype (identity for f32).
float round_to_dtype(float v, DType dtype);

}  // namespace detfuse::reference
