// Central finite differences for the reference tests: the gradient of a scalar
// objective f() with respect to every entry of v, perturbing v in place.
#pragma once

#include <cstddef>
#include <vector>

namespace detfuse::reference::testing {

template <class F>
std::vector<double> finite_diff(F&& f, std::vector<double>& v, double h = 1e-5) {
  std::vector<double> g(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    const double v0 = v[k];
    v[k] = v0 + h;
    const double fp = f();
    v[k] = v0 - h;
    const double fm = f();
    v[k] = v0;
    g[k] = (fp - fm) / (2 * h);
  }
  return g;
}

}  // namespace detfuse::reference::testing
