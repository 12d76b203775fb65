// Float64 FLCE reference (see flce_ref.h and the semantics in problem.h).
//
// Phase 1, parallel over blocks of rows: gather the block's x rows, logits
// Z = X_blk W^T (rows x V, the only large buffer, per thread), softcap, per-row
// max / log-sum-exp / loss; then, if gradients are asked, Z is overwritten by
// G = dL/dz and dX_blk = G W.
// Phase 2 (dW), parallel over vocabulary ranges: walk all rows in blocks, in
// order, recompute the logit tile (same kernel, same bits as phase 1), turn it
// into G with the phase-1 row statistics, and accumulate dW_range += G^T X_blk.
// Cost: 2NDV (logits) + 2NDV (dX) + 2NDV (logits again) + 2NDV (dW).
#include "reference/flce_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/common/error.h"
#include "reference/gemm.h"
#include "reference/parallel.h"

namespace detfuse::reference {
namespace {

using detail::chunks;
using detail::gemm_ab_acc;
using detail::gemm_abt;
using detail::parallel_for;

struct Opts {
  int64_t V;
  double eps_over_V;     // label_smoothing / V
  double one_minus_eps;  // 1 - label_smoothing
  double zloss;          // lse_square_scale
  double cap;            // softcap (0: off)
};

Opts make_opts(const FlceProblem& p) {
  return Opts{p.V, p.label_smoothing / double(p.V), 1.0 - p.label_smoothing, p.lse_square_scale, p.softcap};
}

void apply_softcap(double* z, int64_t n, double cap) {
  if (cap > 0)
    for (int64_t j = 0; j < n; ++j) z[j] = cap * std::tanh(z[j] / cap);
}

struct RowForward {
  double max, sum, lse, loss;  // sum = sum_j exp(z_j - max)
};

// z: one row of (capped) logits, all V of them.
RowForward row_forward(const double* z, int64_t yi, bool valid, const Opts& o) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < o.V; ++j) m = std::max(m, z[j]);
  double s = 0.0;
  for (int64_t j = 0; j < o.V; ++j) s += std::exp(z[j] - m);
  const double lse = m + std::log(s);
  if (!valid) return {m, s, lse, 0.0};
  // loss = lse - (1 - eps) z_y - (eps / V) sum_j z_j + s lse^2, rearranged as
  // log(sum) + (1 - eps)(max - z_y) + (eps / V) sum_j (max - z_j) + s lse^2 so that
  // no large logit cancels against another (max - z is exact near 1e4).
  double gap = 0.0;
  for (int64_t j = 0; j < o.V; ++j) gap += m - z[j];
  const double loss =
      std::log(s) + o.one_minus_eps * (m - z[yi]) + o.eps_over_V * gap + o.zloss * lse * lse;
  return {m, s, lse, loss};
}

// z: n capped logits of one row, columns j0 .. j0+n-1; replaced by
// G = c ((1 + 2 s lse) p - (1 - eps)[j == y] - eps / V) (1 - (z / cap)^2).
// p = exp(z - max) / sum rather than exp(z - lse): the same number, but exact to
// an ulp when logits are huge (z - max is exact there, lse carries ulp(1e4)).
void row_grad(double* z, int64_t j0, int64_t n, int64_t yi, const RowForward& f, double c, const Opts& o) {
  if (c == 0.0) {
    std::fill(z, z + n, 0.0);
    return;
  }
  const double a = 1.0 + 2.0 * o.zloss * f.lse;
  for (int64_t j = 0; j < n; ++j) {
    const double zc = z[j];
    double g = a * (std::exp(zc - f.max) / f.sum);
    if (j0 + j == yi) g -= o.one_minus_eps;
    g -= o.eps_over_V;
    if (o.cap > 0) {
      const double t = zc / o.cap;
      g *= 1.0 - t * t;
    }
    z[j] = c * g;
  }
}

// Rows per phase-1 task: enough tasks for the threads, at most 128 rows and at
// most 2^22 logits (32 MB) per thread. Results do not depend on it.
int64_t phase1_block(int64_t nrows, int64_t V, int nthreads) {
  int64_t rb = chunks(nrows, 2 * int64_t(nthreads));
  rb = std::clamp<int64_t>(rb, 8, 128);
  return std::max<int64_t>(1, std::min(rb, (int64_t(1) << 22) / V));
}

template <class T>
struct AsDouble {  // a double view of an input array, converting floats once
  std::vector<double> copy;
  const double* ptr = nullptr;
  AsDouble(const T* src, int64_t n) {
    if constexpr (std::is_same_v<T, double>) {
      ptr = src;
    } else {
      copy.resize(size_t(n));
      constexpr int64_t kChunk = 1 << 18;
      parallel_for(chunks(n, kChunk), 0, [&](int64_t c, int) {
        const int64_t end = std::min(n, (c + 1) * kChunk);
        for (int64_t i = c * kChunk; i < end; ++i) copy[size_t(i)] = double(src[i]);
      });
      ptr = copy.data();
    }
  }
};

template <class T>
void check_args(const FlceProblem& p, const T* X, const T* W, const int64_t* y, const T* dloss, bool need_dloss) {
  p.validate();
  if (!X) throw invalid_argument("X: null pointer");
  if (!W) throw invalid_argument("W: null pointer");
  if (!y) throw invalid_argument("y: null pointer");
  if (need_dloss && !dloss) throw invalid_argument("dloss: required for reduction none with gradients");
  for (int64_t i = 0; i < p.N; ++i)
    if (y[i] != p.ignore_index && (y[i] < 0 || y[i] >= p.V))
      throw invalid_argument("y[" + std::to_string(i) + "]: target " + std::to_string(y[i]) +
                             " is outside [0, V=" + std::to_string(p.V) + ") and is not ignore_index " +
                             std::to_string(p.ignore_index));
}

int64_t count_valid(const FlceProblem& p, const int64_t* y) {
  int64_t n = 0;
  for (int64_t i = 0; i < p.N; ++i) n += y[i] != p.ignore_index;
  return n;
}

// Gradient coefficient c_i of problem.h (0 for ignored rows).
template <class T>
double row_coeff(const FlceProblem& p, int64_t n_valid, const int64_t* y, const T* dloss, int64_t i) {
  if (y[i] == p.ignore_index) return 0.0;
  double c = p.grad_output;
  if (p.reduction == Reduction::mean) c = n_valid > 0 ? c / double(n_valid) : 0.0;
  if (p.reduction == Reduction::none) c *= double(dloss[i]);
  return c;
}

// Phase 1 over a list of rows; outputs in list order. coeff[k] is the
// coefficient of rows[k]; dX (nrows x D) is written when non-null, and the
// rows' softmax statistics when stats is.
template <class T>
void phase1(const FlceProblem& p, const T* X, const double* Wd, const int64_t* y, const int64_t* rows,
            int64_t nrows, const double* coeff, double* lse, double* loss, double* dX, RowForward* stats,
            int threads) {
  const Opts o = make_opts(p);
  const int64_t D = p.D, V = p.V;
  const int nt = detail::resolve_threads(threads);
  const int64_t rb = phase1_block(nrows, V, nt);
  std::vector<std::vector<double>> zbuf(static_cast<size_t>(nt)), xbuf(static_cast<size_t>(nt));
  parallel_for(chunks(nrows, rb), nt, [&](int64_t task, int w) {
    const int64_t i0 = task * rb, R = std::min(rb, nrows - i0);
    auto& xb = xbuf[size_t(w)];
    auto& Z = zbuf[size_t(w)];
    xb.resize(size_t(rb * D));
    Z.resize(size_t(rb * V));
    for (int64_t r = 0; r < R; ++r) {  // (R, D)
      const T* src = X + rows[i0 + r] * D;
      for (int64_t k = 0; k < D; ++k) xb[size_t(r * D + k)] = double(src[k]);
    }
    gemm_abt(R, V, D, xb.data(), D, Wd, D, Z.data(), V);  // Z (R, V)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = rows[i0 + r];
      double* z = Z.data() + r * V;
      apply_softcap(z, V, o.cap);
      const RowForward f = row_forward(z, y[i], y[i] != p.ignore_index, o);
      lse[i0 + r] = f.lse;
      loss[i0 + r] = f.loss;
      if (stats) stats[i0 + r] = f;
      if (dX) row_grad(z, 0, V, y[i], f, coeff[i0 + r], o);
    }
    if (dX) {
      double* out = dX + i0 * D;  // (R, D)
      std::fill(out, out + R * D, 0.0);
      gemm_ab_acc(R, D, V, Z.data(), V, 1, Wd, D, out, D);
    }
  });
}

}  // namespace

template <class T>
FlceResult flce_reference(const FlceProblem& p, const T* X, const T* W, const int64_t* y,
                          const std::type_identity_t<T>* dloss, bool backward, int threads) {
  check_args<T>(p, X, W, y, dloss, backward && p.reduction == Reduction::none);
  const int nt = detail::resolve_threads(threads);
  const int64_t N = p.N, D = p.D, V = p.V;
  FlceResult res;
  res.n_valid = count_valid(p, y);
  res.loss_rows.resize(size_t(N));
  res.lse.resize(size_t(N));
  std::vector<int64_t> rows(static_cast<size_t>(N));
  std::vector<double> coeff(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    rows[size_t(i)] = i;
    coeff[size_t(i)] = backward ? row_coeff(p, res.n_valid, y, dloss, i) : 0.0;
  }
  const AsDouble<T> Wd(W, V * D);
  std::vector<RowForward> stats;
  if (backward) {
    res.dX.resize(size_t(N * D));
    stats.resize(size_t(N));
  }
  phase1(p, X, Wd.ptr, y, rows.data(), N, coeff.data(), res.lse.data(), res.loss_rows.data(),
         backward ? res.dX.data() : nullptr, backward ? stats.data() : nullptr, nt);

  double total = 0.0;
  for (int64_t i = 0; i < N; ++i) total += res.loss_rows[size_t(i)];
  res.loss = p.reduction == Reduction::mean ? (res.n_valid > 0 ? total / double(res.n_valid) : 0.0) : total;
  if (!backward) return res;

  // Phase 2: dW, parallel over vocabulary ranges of vb rows of W.
  const Opts o = make_opts(p);
  const AsDouble<T> Xd(X, N * D);
  res.dW.assign(size_t(V * D), 0.0);
  const int64_t vb = std::clamp<int64_t>(chunks(V, 4 * int64_t(nt)), 4, 64);
  constexpr int64_t rb = 64;
  std::vector<std::vector<double>> zbuf(static_cast<size_t>(nt));
  parallel_for(chunks(V, vb), nt, [&](int64_t task, int w) {
    const int64_t j0 = task * vb, nv = std::min(vb, V - j0);
    auto& Zt = zbuf[size_t(w)];
    Zt.resize(size_t(rb * vb));
    double* dWr = res.dW.data() + j0 * D;  // (nv, D)
    for (int64_t r0 = 0; r0 < N; r0 += rb) {
      const int64_t R = std::min(rb, N - r0);
      bool any = false;  // a block of zero coefficients adds exact zeros: skip it
      for (int64_t r = 0; r < R; ++r) any |= coeff[size_t(r0 + r)] != 0.0;
      if (!any) continue;
      const double* Xb = Xd.ptr + r0 * D;                            // (R, D)
      gemm_abt(R, nv, D, Xb, D, Wd.ptr + j0 * D, D, Zt.data(), nv);  // (R, nv)
      for (int64_t r = 0; r < R; ++r) {
        double* z = Zt.data() + r * nv;
        apply_softcap(z, nv, o.cap);
        row_grad(z, j0, nv, y[r0 + r], stats[size_t(r0 + r)], coeff[size_t(r0 + r)], o);
      }
      gemm_ab_acc(nv, D, R, Zt.data(), 1, nv, Xb, D, dWr, D);  // dW_r += G^T X_b
    }
  });
  return res;
}

template <class T>
FlceResult flce_reference_rows(const FlceProblem& p, const T* X, const T* W, const int64_t* y,
                               const std::type_identity_t<T>* dloss, const std::vector<int64_t>& rows,
                               bool with_dx, int threads) {
  check_args<T>(p, X, W, y, dloss, with_dx && p.reduction == Reduction::none);
  const int64_t n = int64_t(rows.size());
  for (int64_t k = 0; k < n; ++k)
    if (rows[size_t(k)] < 0 || rows[size_t(k)] >= p.N)
      throw invalid_argument("rows[" + std::to_string(k) + "]: " + std::to_string(rows[size_t(k)]) +
                             " is outside [0, N=" + std::to_string(p.N) + ")");
  FlceResult res;
  res.n_valid = count_valid(p, y);
  res.loss_rows.resize(size_t(n));
  res.lse.resize(size_t(n));
  std::vector<double> coeff(size_t(n), 0.0);
  if (with_dx)
    for (int64_t k = 0; k < n; ++k) coeff[size_t(k)] = row_coeff(p, res.n_valid, y, dloss, rows[size_t(k)]);
  const AsDouble<T> Wd(W, p.V * p.D);
  if (with_dx) res.dX.resize(size_t(n * p.D));
  phase1(p, X, Wd.ptr, y, rows.data(), n, coeff.data(), res.lse.data(), res.loss_rows.data(),
         with_dx ? res.dX.data() : nullptr, nullptr, threads);
  for (double l : res.loss_rows) res.loss += l;
  return res;
}

FlceResult flce_reference(const FlceProblem& p, const FlceInputs& in, bool backward, int threads) {
  if (int64_t(in.X.size()) != p.N * p.D || int64_t(in.W.size()) != p.V * p.D || int64_t(in.y.size()) != p.N ||
      int64_t(in.dloss.size()) != p.N)
    throw invalid_argument("FlceInputs: sizes do not match problem " + p.shape());
  return flce_reference<float>(p, in.X.data(), in.W.data(), in.y.data(), in.dloss.data(), backward, threads);
}

FlceResult flce_reference_rows(const FlceProblem& p, const FlceInputs& in, const std::vector<int64_t>& rows,
                               bool with_dx, int threads) {
  if (int64_t(in.X.size()) != p.N * p.D || int64_t(in.W.size()) != p.V * p.D || int64_t(in.y.size()) != p.N ||
      int64_t(in.dloss.size()) != p.N)
    throw invalid_argument("FlceInputs: sizes do not match problem " + p.shape());
  return flce_reference_rows<float>(p, in.X.data(), in.W.data(), in.y.data(), in.dloss.data(), rows, with_dx,
                                    threads);
}

template FlceResult flce_reference<float>(const FlceProblem&, const float*, const float*, const int64_t*,
                                          const float*, bool, int);
template FlceResult flce_reference<double>(const FlceProblem&, const double*, const double*, const int64_t*,
                                           const double*, bool, int);
template FlceResult flce_reference_rows<float>(const FlceProblem&, const float*, const float*, const int64_t*,
                                               const float*, const std::vector<int64_t>&, bool, int);
template FlceResult flce_reference_rows<double>(const FlceProblem&, const double*, const double*,
                                                const int64_t*, const double*, const std::vector<int64_t>&, bool,
                                                int);

}  // namespace detfuse::reference
