// device_spread: one Thrust transform-reduce over the element index; each
// element contributes (|a-b|, (a-b)^2, b^2), combined by (max, +, +). NaN is
// kept by the max (a NaN anywhere makes the spread NaN, never hides it).
#include "tuner/spread.h"

#include <cuda_bf16.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include "kernels/common/cuda_check.h"

namespace detfuse::tuner {

namespace {

struct Triple {
  double mx, dsq, rsq;
};

struct Combine {
  __host__ __device__ Triple operator()(const Triple& x, const Triple& y) const {
    // NaN propagates: (x != x) is true only for NaN.
    const double mx = (x.mx != x.mx || y.mx != y.mx) ? x.mx + y.mx : (x.mx > y.mx ? x.mx : y.mx);
    return Triple{mx, x.dsq + y.dsq, x.rsq + y.rsq};
  }
};

template <class T>
__host__ __device__ inline double as_double(T v) {
  return double(v);
}
template <>
__host__ __device__ inline double as_double<__nv_bfloat16>(__nv_bfloat16 v) {
  return double(__bfloat162float(v));
}

template <class T>
struct Element {
  const T* a;
  const T* b;
  __host__ __device__ Triple operator()(size_t i) const {
    const double x = as_double(a[i]), y = as_double(b[i]);
    // Equal values differ by 0, infinities included (attention's LSE is -inf on
    // rows that see no key); the reference norm counts finite values. NaN still
    // propagates (NaN == NaN is false).
    const double d = x == y ? 0.0 : x - y;
    const bool finite = y - y == 0.0;
    return Triple{d < 0 ? -d : d, d * d, finite ? y * y : 0.0};
  }
};

template <class T>
SpreadSums run(const void* a, const void* b, size_t n) {
  SpreadSums s;
  if (n == 0) return s;
  const Triple r = thrust::transform_reduce(thrust::device, thrust::counting_iterator<size_t>(0),
                                            thrust::counting_iterator<size_t>(n),
                                            Element<T>{static_cast<const T*>(a), static_cast<const T*>(b)},
                                            Triple{0, 0, 0}, Combine{});
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  s.max_abs_diff = r.mx;
  s.diff_sq = r.dsq;
  s.ref_sq = r.rsq;
  return s;
}

}  // namespace

SpreadSums device_spread(const void* a, const void* b, size_t n, DType t) {
  if (!a || !b) throw invalid_argument("device_spread: null device pointer");
  return t == DType::bf16 ? run<__nv_bfloat16>(a, b, n) : run<float>(a, b, n);
}

}  // namespace detfuse::tuner
