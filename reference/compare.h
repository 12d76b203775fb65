// Error measures between a result (float from a GPU, or double) and a float64
// reference.
//
// rel_norm_error = ||got - ref||_2 / ||ref||_2, or ||got||_2 when ||ref|| == 0.
// max_abs_error  = max_i |got_i - ref_i|.
// Both return +inf when any got_i is NaN or +-inf, except where ref_i is the
// same infinity (e.g. LSE = -inf of a fully masked attention row): such entries
// must match exactly and then count as zero error; a NaN or infinite ref_i that
// got does not match exactly also gives +inf. Sizes of the vector forms must
// agree (detfuse::Error otherwise).
#pragma once

#include <cstddef>
#include <vector>

namespace detfuse::reference {

double rel_norm_error(const float* got, const double* ref, size_t n);
double rel_norm_error(const double* got, const double* ref, size_t n);
double max_abs_error(const float* got, const double* ref, size_t n);
double max_abs_error(const double* got, const double* ref, size_t n);

double rel_norm_error(const std::vector<float>& got, const std::vector<double>& ref);
double rel_norm_error(const std::vector<double>& got, const std::vector<double>& ref);
double max_abs_error(const std::vector<float>& got, const std::vector<double>& ref);
double max_abs_error(const std::vector<double>& got, const std::vector<double>& ref);

}  // namespace detfuse::reference
