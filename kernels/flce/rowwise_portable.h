// The fp32 row pass's arithmetic, written once for the device (rowwise.cu,
// row_kernel_f32 and reduce_loss_f32, used by every fp32 variant: the `fma`
// engine) and the host (reference/emulate_flce.cpp, the CPU emulation that
// must give the same bits). Every step is a named IEEE operation of
// kernels/common/portable_math.h; the order of the reductions is fixed here.
//
// One row of V logits z_j (softcap already applied by the logits GEMM):
//   thread t (of kRowThreads) visits the columns j = 4 t + q + 4 kRowThreads i
//   (i = 0, 1, ...; q = 0..3) in increasing order and folds each into its
//   RowStat with row_push; then a shared-memory tree combines the threads:
//   for stride = kRowThreads/2, ..., 1: s[t] = row_combine(s[t], s[t + stride])
//   for t < stride. LSE = m + log(s).
// The loss of a valid row, the coefficient and the gradient of each column
// are the functions below. The loss reduction (reduce_loss_f32): thread t of
// kLossThreads sums loss_rows[t + kLossThreads i] in double in i order, then
// the same halving tree in double; mean divides by double(n_valid); the
// result is rounded once to float.
#pragma once

#include "kernels/common/portable_math.h"

#if defined(__CUDACC__)
#define DETFUSE_RP_FN __host__ __device__ __forceinline__
#else
#define DETFUSE_RP_FN inline
#endif

namespace detfuse::flce::portable {

constexpr int kRowThreads = 512;
constexpr int kLossThreads = 1024;

// Running statistics of a set of logits: max m, sum of exp(z - m), sum of z.
struct RowStat {
  float m, s, sz;
};

DETFUSE_RP_FN RowStat row_init() { return RowStat{-pm::kInf, 0.f, 0.f}; }

// Folds one logit into the statistics (online softmax).
DETFUSE_RP_FN void row_push(RowStat& st, float z) {
  if (z > st.m) {
    st.s = pm::fma(st.s, pm::exp(pm::sub(st.m, z)), 1.f);
    st.m = z;
  } else {
    st.s = pm::add(st.s, pm::exp(pm::sub(z, st.m)));
  }
  st.sz = pm::add(st.sz, z);
}

// a holds the lower threads' columns, b the higher ones'.
DETFUSE_RP_FN RowStat row_combine(const RowStat& a, const RowStat& b) {
  const float m = pm::max(a.m, b.m);
  RowStat r;
  r.m = m;
  r.s = m == -pm::kInf ? 0.f : pm::fma(a.s, pm::exp(pm::sub(a.m, m)), pm::mul(b.s, pm::exp(pm::sub(b.m, m))));
  r.sz = pm::add(a.sz, b.sz);
  return r;
}

DETFUSE_RP_FN float row_lse(const RowStat& st) { return pm::add(st.m, pm::log(st.s)); }

// The option values as the kernels hold them (floats of the problem's doubles).
struct RowOptions {
  float eps;          // label smoothing
  float zscale;       // lse_square_scale (z-loss)
  float softcap;      // 0: off
  float grad_output;
  float Vf;           // float(V)
};

// Loss of a valid row: lse - (1 - eps) z_t - (eps / V) sum z + zscale lse^2.
DETFUSE_RP_FN float row_loss(const RowOptions& o, float lse, float zt, float sz) {
  const float a = pm::mul(pm::sub(1.f, o.eps), zt);
  const float b = pm::mul(pm::div(o.eps, o.Vf), sz);
  const float c = pm::mul(pm::mul(o.zscale, lse), lse);
  return pm::add(pm::sub(pm::sub(lse, a), b), c);
}

// Gradient scale of a row. reduction: 0 mean (n_valid rows), 1 sum, 2 none
// (dloss_i the upstream per-row gradient).
DETFUSE_RP_FN float row_coef(const RowOptions& o, bool valid, int reduction, int64_t n_valid, float dloss_i) {
  if (!valid) return 0.f;
  if (reduction == 0) return n_valid > 0 ? pm::div(o.grad_output, float(n_valid)) : 0.f;
  if (reduction == 2) return pm::mul(o.grad_output, dloss_i);
  return o.grad_output;
}

// dL/dz_j = coef * ((1 + 2 zscale lse) e^(z - lse) - eps/V - [j = t](1 - eps)),
// times 1 - (z / softcap)^2 with the softcap. Call only when coef != 0 (the
// kernels write +0 for a row whose coefficient is 0).
DETFUSE_RP_FN float row_grad(const RowOptions& o, float z, bool is_target, float lse, float coef) {
  const float pscale = pm::fma(pm::mul(2.f, o.zscale), lse, 1.f);
  float d = pm::sub(pm::mul(pscale, pm::exp(pm::sub(z, lse))), pm::div(o.eps, o.Vf));
  if (is_target) d = pm::sub(d, pm::sub(1.f, o.eps));
  if (o.softcap > 0.f) {
    const float u = pm::div(z, o.softcap);
    d = pm::mul(d, pm::fma(-u, u, 1.f));
  }
  return pm::mul(coef, d);
}

}  // namespace detfuse::flce::portable

#undef DETFUSE_RP_FN
