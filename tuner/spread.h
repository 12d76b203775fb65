// Run-to-run spread of one output, computed on the device: two device arrays
// of the same output from two repeats (fp32 or bf16 elements), reduced with
// Thrust into max |a - b|, sum (a - b)^2 and sum b^2 (the reference repeat),
// so only three numbers cross to the host, whatever the size of dW.
#pragma once

#include <cstddef>

#include "kernels/common/problem.h"

namespace detfuse::tuner {

struct SpreadSums {
  double max_abs_diff = 0;  // max_i |a[i] - b[i]| (NaN if any difference is NaN)
  double diff_sq = 0;       // sum_i (a[i] - b[i])^2, accumulated in double
  double ref_sq = 0;        // sum_i b[i]^2, accumulated in double
};

// a: a later repeat, b: the reference repeat (repeat 0); n elements of type t.
// Runs on the legacy default stream and synchronises. Throws detfuse::Error on
// a CUDA failure.
SpreadSums device_spread(const void* a, const void* b, size_t n, DType t);

}  // namespace detfuse::tuner
