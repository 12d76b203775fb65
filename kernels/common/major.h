// Operand layout of a GEMM operand X with rows r and reduction index k, shared
// by the FLCE engines (kernels/flce/gemm.cuh) and the cuBLASLt baseline
// (kernels/baseline/lt_matmul.h). Plain C++.
//   Major::K : X(r, k) = X[r*ld + k]  (K-contiguous)
//   Major::MN: X(r, k) = X[k*ld + r]  (M- or N-contiguous)
#pragma once

namespace detfuse {

enum class Major { K = 0, MN = 1 };

}  // namespace detfuse
