// An FLCE problem of a shape with every option at its default (mean, no
// smoothing, fp32 gradients): the tests' one way to spell "N rows, D, V".
#pragma once

#include <cstdint>

#include "kernels/common/problem.h"

namespace detfuse {

inline FlceProblem flce_shape(int64_t N, int64_t D, int64_t V, DType dtype = DType::bf16) {
  FlceProblem p;
  p.N = N;
  p.D = D;
  p.V = V;
  p.dtype = dtype;
  return p;
}

}  // namespace detfuse
