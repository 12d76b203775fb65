#include "reference/compare.h"

#include <cmath>
#include <limits>
#include <string>

#include "kernels/common/error.h"

namespace detfuse::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// False when the pair makes the error infinite; sets skip for matching infinities.
inline bool pair_ok(double g, double r, bool& skip) {
  skip = false;
  if (std::isfinite(g) && std::isfinite(r)) return true;
  if (std::isinf(r) && g == r) {
    skip = true;
    return true;
  }
  return false;
}

template <class G>
double rel_norm(const G* got, const double* ref, size_t n) {
  double num = 0.0, den = 0.0, gn = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double g = double(got[i]), r = ref[i];
    bool skip;
    if (!pair_ok(g, r, skip)) return kInf;
    if (skip) continue;
    num += (g - r) * (g - r);
    den += r * r;
    gn += g * g;
  }
  return den > 0 ? std::sqrt(num) / std::sqrt(den) : std::sqrt(gn);
}

template <class G>
double max_abs(const G* got, const double* ref, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double g = double(got[i]), r = ref[i];
    bool skip;
    if (!pair_ok(g, r, skip)) return kInf;
    if (!skip) m = std::max(m, std::fabs(g - r));
  }
  return m;
}

template <class G>
void check_sizes(const std::vector<G>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size())
    throw invalid_argument("got: size " + std::to_string(got.size()) + " differs from ref size " +
                           std::to_string(ref.size()));
}

// A measure of two vectors of equal size (else invalid_argument).
template <class G, class Measure>
double on_vectors(const std::vector<G>& got, const std::vector<double>& ref, Measure measure) {
  check_sizes(got, ref);
  return measure(got.data(), ref.data(), ref.size());
}

}  // namespace

double rel_norm_error(const float* got, const double* ref, size_t n) { return rel_norm(got, ref, n); }
double rel_norm_error(const double* got, const double* ref, size_t n) { return rel_norm(got, ref, n); }
double max_abs_error(const float* got, const double* ref, size_t n) { return max_abs(got, ref, n); }
double max_abs_error(const double* got, const double* ref, size_t n) { return max_abs(got, ref, n); }

double rel_norm_error(const std::vector<float>& got, const std::vector<double>& ref) {
  return on_vectors(got, ref, rel_norm<float>);
}
double rel_norm_error(const std::vector<double>& got, const std::vector<double>& ref) {
  return on_vectors(got, ref, rel_norm<double>);
}
double max_abs_error(const std::vector<float>& got, const std::vector<double>& ref) {
  return on_vectors(got, ref, max_abs<float>);
}
double max_abs_error(const std::vector<double>& got, const std::vector<double>& ref) {
  return on_vectors(got, ref, max_abs<double>);
}

}  // namespace detfuse::reference
