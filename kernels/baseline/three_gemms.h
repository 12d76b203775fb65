// The FLCE benchmark baseline: three cuBLASLt GEMMs of the FLCE shape, in the
// problem's input dtype with fp32 accumulation (no TF32 for fp32 inputs),
// timed in the same run as the fused variants so results compare as ratios.
//   logits = X W^T : [N, V], K = D  (A = X Major::K, B = W Major::K), fp32 out
//   dX     = G W   : [N, D], K = V  (A = G Major::K, B = W Major::MN), fp32 out
//   dW     = G^T X : [V, D], K = N  (A = G Major::MN, B = X Major::MN), fp32 out
// G is [N, V] in the input dtype. Inputs are random (never zero), made on the
// device. Each repetition flushes L2 before each GEMM (outside the timed
// region) and times every GEMM with its own CUDA events; the medians and every
// sample are returned.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/problem.h"

namespace detfuse::baseline {

struct ThreeGemmTiming {
  double logits_ms = 0, dx_ms = 0, dw_ms = 0;  // medians over the repetitions
  // Sum of the three medians: the "three GEMMs" the FLCE targets are measured against.
  double total_ms() const { return logits_ms + dx_ms + dw_ms; }
  std::vector<double> total_samples_ms;  // per repetition, logits + dX + dW
  std::vector<double> logits_samples_ms, dx_samples_ms, dw_samples_ms;
  DType logits_dtype = DType::f32;  // bf16 only if fp32 logits could not be allocated
  std::string note;                 // empty, or why something differs from the above
};

// Allocates X, W, G, logits, dX, dW for `p` (N, D, V must fit in int), fills
// the inputs with random values, runs `warmup` untimed repetitions (at least
// one: it also picks and caches the cuBLASLt algorithms) and `reps` timed ones
// (reps >= 1). Throws detfuse::Error naming the buffer if an allocation fails.
ThreeGemmTiming time_three_gemms(const FlceProblem& p, int warmup, int reps, cudaStream_t stream = nullptr);

// Median of a sample (the mean of the two middle values for an even count).
double median_ms(std::vector<double> v);

// Fills n elements of p (bf16 or fp32) with a counter-based hash, uniform in
// [-scale, scale): random-looking device data without a host copy.
void fill_random(void* p, DType t, uint64_t n, uint32_t seed, float scale, cudaStream_t stream = nullptr);

}  // namespace detfuse::baseline
