// Float64 CPU reference of fused linear + cross-entropy (FLCE): the oracle for
// tests, the tuner and `detfuse verify`. Implements exactly the semantics in
// kernels/common/problem.h (ignore_index, reduction mean/sum/none with per-row
// upstream gradient dloss, label smoothing, z-loss, softcap, grad_output).
//
// Inputs may be float (normal use: the GPU's inputs, bf16 values held in float)
// or double (finite-difference tests). Everything is accumulated in double.
// Rows are processed in blocks (a block x V slice of logits, never N x V);
// forward and dX are parallel over row blocks, dW over vocabulary ranges and
// recomputes its logit tiles. Results are bitwise identical for any thread
// count, and flce_reference_rows gives the same bits as the full reference for
// the rows it computes.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/common/problem.h"
#include "reference/inputs.h"

namespace detfuse::reference {

struct FlceResult {
  // mean: sum_i loss_i / n_valid (0 if n_valid == 0); sum: sum_i loss_i;
  // none: also sum_i loss_i (the per-row losses are the output; dloss is not
  // applied here). grad_output never scales the loss.
  double loss = 0.0;
  std::vector<double> loss_rows;  // [N] (or [rows]); 0 for ignored rows
  std::vector<double> lse;        // [N] (or [rows]); computed for ignored rows too
  int64_t n_valid = 0;            // rows with y != ignore_index, over all N
  std::vector<double> dX;         // [N, D] (or [rows, D]); empty unless asked
  std::vector<double> dW;         // [V, D]; empty unless asked (never for _rows)
};

// Full reference. dloss ([N]) is required when backward and reduction is none,
// ignored otherwise (may be nullptr). threads = 0: hardware_concurrency().
// Throws detfuse::Error (invalid_argument) on a bad problem, null pointers or a
// target outside [0, V) that is not ignore_index.
template <class T>
FlceResult flce_reference(const FlceProblem& p, const T* X, const T* W, const int64_t* y,
                          const std::type_identity_t<T>* dloss, bool backward, int threads = 0);

// Only the listed rows (any order, repeats allowed): loss_rows, lse and (if
// with_dx) dX of those rows, in list order; loss = sum of those loss_rows;
// n_valid and the mean's 1/n_valid come from all of y. For problems too large
// to check in full. Costs |rows| * V * D * (2 or 4) flops.
template <class T>
FlceResult flce_reference_rows(const FlceProblem& p, const T* X, const T* W, const int64_t* y,
                               const std::type_identity_t<T>* dloss, const std::vector<int64_t>& rows,
                               bool with_dx, int threads = 0);

// Convenience on generated inputs (passes in.dloss).
FlceResult flce_reference(const FlceProblem& p, const FlceInputs& in, bool backward, int threads = 0);
FlceResult flce_reference_rows(const FlceProblem& p, const FlceInputs& in, const std::vector<int64_t>& rows,
                               bool with_dx, int threads = 0);

extern template FlceResult flce_reference<float>(const FlceProblem&, const float*, const float*, const int64_t*,
                                                 const float*, bool, int);
extern template FlceResult flce_reference<double>(const FlceProblem&, const double*, const double*,
                                                  const int64_t*, const double*, bool, int);
extern template FlceResult flce_reference_rows<float>(const FlceProblem&, const float*, const float*,
                                                      const int64_t*, const float*, const std::vector<int64_t>&,
                                                      bool, int);
extern template FlceResult flce_reference_rows<double>(const FlceProblem&, const double*, const double*,
                                                       const int64_t*, const double*,
                                                       const std::vector<int64_t>&, bool, int);

}  // namespace detfuse::reference
