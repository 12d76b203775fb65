// FLCE public C++ API: fused linear + cross-entropy, loss and gradients of
// CE(softmax(X W^T), y) without materialising the [N, V] logits (see
// kernels/common/problem.h for the exact semantics of every option).
//
// Every entry point validates its arguments (problem fields, the pointers the
// mode needs, targets outside [0, V) that are not ignore_index) and throws
// detfuse::Error naming the bad argument. The problem and pointers are checked
// before anything is launched (outputs untouched); the targets are counted on
// the stream ahead of the computation and read once everything is launched
// (no synchronisation before the kernels), so a call that throws for a bad
// target has run: its outputs are unspecified (no kernel reads or writes out
// of bounds for such a target; the row computes as an ignored one).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/common/problem.h"
#include "kernels/registry.h"

namespace detfuse::flce {

// Number of targets outside [0, V) that are not ignore_index (one device pass,
// synchronises `stream`).
int64_t count_bad_targets(const FlceProblem& p, const int64_t* y, cudaStream_t stream = nullptr);

// Checks the problem, the pointers `mode` needs and the targets; throws
// detfuse::Error (invalid_argument) naming the first bad one. The target check
// synchronises `stream` before it returns (nothing else is launched); the
// tuner and benchmarks launch variants directly after one check. run() does
// not call it: it defers the target check (above).
void validate_call(const FlceProblem& p, FlceMode mode, const FlceArgs& args, cudaStream_t stream = nullptr);

// Runs one registered variant: checks the problem and pointers, enqueues the
// target count, checks can_run, allocates the workspace the variant asks for
// (unless args already carries enough), launches, then waits for the target
// count's copy (an event recorded before the computation, on `stream`) and
// throws for bad targets (same message as validate_call; outputs then
// unspecified). With a caller's workspace the only host wait is that event.
// Peak extra device memory is the workspace.
void run(const FlceVariant& v, const FlceProblem& p, FlceMode mode, const FlceArgs& args,
         cudaStream_t stream = nullptr);

// The variant the built-in heuristic picks for a problem on a device (used when
// nothing was tuned): the fastest deterministic family by design. For bf16 on
// compute capability 9.0 with the wgmma engine built, kHybridDefault; where it
// cannot run, the cuBLASLt owning variant at 1024 MiB.
inline constexpr const char* kHybridDefault = "flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024";
const FlceVariant& heuristic_variant(const FlceProblem& p, FlceMode mode, const DeviceInfo& dev);

// Entry points on the heuristic's choice (tuner/ adds the tuned selection).
void forward(const FlceProblem& p, const FlceArgs& args, cudaStream_t stream = nullptr);
void forward_backward(const FlceProblem& p, const FlceArgs& args, cudaStream_t stream = nullptr);
void backward(const FlceProblem& p, const FlceArgs& args, cudaStream_t stream = nullptr);

}  // namespace detfuse::flce
