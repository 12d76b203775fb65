// Attention public C++ API: exact softmax attention forward (O, LSE) and
// backward (dQ, dK, dV) without materialising the Sq x Sk scores (see
// kernels/common/problem.h for the semantics: GQA, bottom-right causal mask,
// rows that see no key).
//
// Dtypes: Q, K, V, dO, O, dQ, dK, dV in problem.dtype (fp32 or bf16), LSE fp32
// (natural log). Layouts are contiguous [B, heads, S, d].
//
// Every entry point validates its arguments first (problem fields, the
// pointers the mode needs, the workspace) and throws detfuse::Error naming the
// bad argument, leaving outputs untouched.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/problem.h"
#include "kernels/registry.h"

namespace detfuse::attention {

const char* to_string(AttentionMode m);

// Checks the problem and the pointers `mode` needs; throws detfuse::Error
// (invalid_argument) naming the first bad one. Host only: no device work.
//   forward:  Q, K, V, O, lse
//   backward: Q, K, V, dO, O_in, lse_in, dQ, dK, dV
// A workspace pointer without a size, or a size without a pointer, is an error.
void validate_call(const AttentionProblem& p, AttentionMode mode, const AttentionArgs& args);

// Runs one registered variant: validates, checks can_run, and launches. The
// workspace: when args.workspace is null, run allocates what the variant asks
// for (freed after the stream drains); when it is given, it must hold at least
// v.workspace_bytes(p, mode) bytes ("workspace_size" error otherwise).
void run(const AttentionVariant& v, const AttentionProblem& p, AttentionMode mode, const AttentionArgs& args,
         cudaStream_t stream = nullptr);

// The variant the built-in heuristic picks before any tuning: a deterministic
// (owning) variant of the problem's dtype and head dim.
const AttentionVariant& heuristic_variant(const AttentionProblem& p, AttentionMode mode, const DeviceInfo& dev);

// Entry points on the heuristic's choice. backward needs the forward's O and
// LSE (args.O_in, args.lse_in) of the same variant family or any other: the
// backward recomputes the scores from Q, K and the saved LSE.
void forward(const AttentionProblem& p, const AttentionArgs& args, cudaStream_t stream = nullptr);
void backward(const AttentionProblem& p, const AttentionArgs& args, cudaStream_t stream = nullptr);

}  // namespace detfuse::attention
