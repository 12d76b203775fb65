// Float64 attention reference (see attention_ref.h).
//
// Per (b, h), per block of up to 64 queries (rows i0 .. i0+R-1), with keys
// [c0, c0 + ncols) = those some row of the block can see (the first row's
// window start to the last row's causal end):
//   S (R, ncols) = scale Q_blk K^T; masked entries and their P are 0
//   softcap c > 0: S = c tanh(S / c) (before the mask)
//   P = exp(S - max) / sum (= exp(S - lse)), O_blk = P V
//   dP = dO_blk V^T, D_i = dO_i . O_i, dS = P (dP - D), times 1 - (S / c)^2
//   with the softcap
//   dQ_blk = scale dS K, dK_h += dS^T Q_blk, dV_h += P^T dO_blk
// dK_h is multiplied by scale after the last block, then the per-head partials
// are summed over each GQA group in head order.
#include "reference/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common/error.h"
#include "reference/gemm.h"
#include "reference/parallel.h"

namespace detfuse::reference {
namespace {

using detail::gemm_ab_acc;
using detail::gemm_abt;
using detail::parallel_for;

template <class T>
const double* as_double(const T* src, int64_t n, std::vector<double>& copy) {
  if constexpr (std::is_same_v<T, double>) {
    return src;
  } else {
    copy.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) copy[size_t(i)] = double(src[i]);
    return copy.data();
  }
}

// Keys query i may see: [first_visible(i), visible(i)) (empty when first >= end).
int64_t visible(const AttentionProblem& p, int64_t i) {
  return p.causal ? std::clamp<int64_t>(i + 1 + p.Sk - p.Sq, 0, p.Sk) : p.Sk;
}
int64_t first_visible(const AttentionProblem& p, int64_t i) {
  return p.window > 0 ? std::clamp<int64_t>(i + 1 + p.Sk - p.Sq - p.window, 0, p.Sk) : 0;
}

}  // namespace

template <class T>
AttentionResult attention_reference(const AttentionProblem& p, const T* Qt, const T* Kt, const T* Vt,
                                    const std::type_identity_t<T>* dOt, int threads) {
  p.validate();
  if (!Qt) throw invalid_argument("Q: null pointer");
  if (!Kt) throw invalid_argument("K: null pointer");
  if (!Vt) throw invalid_argument("V: null pointer");
  const bool backward = dOt != nullptr;
  const int64_t B = p.B, H = p.H, Hkv = p.Hkv, Sq = p.Sq, Sk = p.Sk, d = p.d, G = H / Hkv;
  const double scale = p.softmax_scale();
  const double cap = p.softcap;
  const int64_t nq = B * H * Sq * d, nk = B * Hkv * Sk * d;
  std::vector<double> cq, ck, cv, cdo;
  const double* Q = as_double(Qt, nq, cq);
  const double* K = as_double(Kt, nk, ck);
  const double* Vv = as_double(Vt, nk, cv);
  const double* dO = backward ? as_double(dOt, nq, cdo) : nullptr;

  AttentionResult res;
  res.O.assign(size_t(nq), 0.0);
  res.lse.assign(size_t(B * H * Sq), 0.0);
  std::vector<double> dKh, dVh;  // per query head: [B, H, Sk, d]
  if (backward) {
    res.dQ.assign(size_t(nq), 0.0);
    dKh.assign(size_t(B * H * Sk * d), 0.0);
    dVh.assign(size_t(B * H * Sk * d), 0.0);
  }

  constexpr int64_t kQB = 64;
  const int nt = detail::resolve_threads(threads);
  // Per worker: S / P, dP / dS, and with the softcap 1 - tanh^2 of each score.
  std::vector<std::vector<double>> sbuf(static_cast<size_t>(nt)), dpbuf(static_cast<size_t>(nt)),
      tbuf(static_cast<size_t>(nt));
  const double kNegInf = -std::numeric_limits<double>::infinity();

  parallel_for(B * H, nt, [&](int64_t bh, int w) {
    const int64_t b = bh / H, h = bh % H, hk = h / G;
    const double* Qh = Q + bh * Sq * d;                  // (Sq, d)
    const double* Kh = K + (b * Hkv + hk) * Sk * d;      // (Sk, d)
    const double* Vh = Vv + (b * Hkv + hk) * Sk * d;     // (Sk, d)
    double* Oh = res.O.data() + bh * Sq * d;             // (Sq, d)
    double* Lh = res.lse.data() + bh * Sq;               // (Sq)
    auto& S = sbuf[size_t(w)];
    auto& dP = dpbuf[size_t(w)];
    auto& dT = tbuf[size_t(w)];
    S.resize(size_t(kQB * Sk));
    if (backward) dP.resize(size_t(kQB * Sk));
    if (backward && cap > 0) dT.resize(size_t(kQB * Sk));
    for (int64_t i0 = 0; i0 < Sq; i0 += kQB) {
      const int64_t R = std::min(kQB, Sq - i0);
      // Keys [c0, c0 + ncols): the first row's window start (it grows with
      // the row) to the last row's end; ncols <= 0: no row sees a key.
      const int64_t c0 = first_visible(p, i0), ncols = visible(p, i0 + R - 1) - c0;
      if (ncols <= 0) {  // no row of the block sees a key: O = 0, LSE = -inf, no gradient
        std::fill(Lh + i0, Lh + i0 + R, kNegInf);
        continue;
      }
      const double* Kc = Kh + c0 * d;                                 // (ncols, d)
      const double* Vc = Vh + c0 * d;                                 // (ncols, d)
      gemm_abt(R, ncols, d, Qh + i0 * d, d, Kc, d, S.data(), ncols);  // S (R, ncols)
      for (int64_t r = 0; r < R; ++r) {
        double* s = S.data() + r * ncols;
        // This row's keys, as columns of the block: [lo, hi).
        const int64_t lo = first_visible(p, i0 + r) - c0, hi = visible(p, i0 + r) - c0;
        if (hi <= lo) {
          Lh[i0 + r] = kNegInf;
          std::fill(s, s + ncols, 0.0);
          continue;
        }
        double m = kNegInf;
        for (int64_t j = lo; j < hi; ++j) {
          s[j] *= scale;
          if (cap > 0) {
            const double t = std::tanh(s[j] / cap);
            s[j] = cap * t;
            if (backward) dT[size_t(r * ncols + j)] = 1.0 - t * t;
          }
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = lo; j < hi; ++j) sum += std::exp(s[j] - m);
        Lh[i0 + r] = m + std::log(sum);
        for (int64_t j = lo; j < hi; ++j) s[j] = std::exp(s[j] - m) / sum;  // P
        std::fill(s, s + lo, 0.0);
        std::fill(s + hi, s + ncols, 0.0);
      }
      double* Ob = Oh + i0 * d;                                     // (R, d)
      gemm_ab_acc(R, d, ncols, S.data(), ncols, 1, Vc, d, Ob, d);  // O = P V
      if (!backward) continue;

      const double* dOb = dO + bh * Sq * d + i0 * d;                // (R, d)
      gemm_abt(R, ncols, d, dOb, d, Vc, d, dP.data(), ncols);        // dP = dO V^T
      for (int64_t r = 0; r < R; ++r) {
        double Di = 0.0;
        for (int64_t k = 0; k < d; ++k) Di += dOb[r * d + k] * Ob[r * d + k];
        const double* pr = S.data() + r * ncols;
        double* ds = dP.data() + r * ncols;
        for (int64_t j = 0; j < ncols; ++j) ds[j] = pr[j] * (ds[j] - Di);  // 0 where masked
        if (cap > 0) {  // through the cap: d(c tanh(s / c))/ds = 1 - tanh^2
          const double* dt = dT.data() + r * ncols;
          for (int64_t j = 0; j < ncols; ++j)
            if (pr[j] != 0.0) ds[j] *= dt[j];
        }
      }
      double* dQb = res.dQ.data() + bh * Sq * d + i0 * d;             // (R, d)
      gemm_ab_acc(R, d, ncols, dP.data(), ncols, 1, Kc, d, dQb, d);  // dS K
      for (int64_t k = 0; k < R * d; ++k) dQb[k] *= scale;
      double* dKp = dKh.data() + (bh * Sk + c0) * d;                     // (ncols, d)
      double* dVp = dVh.data() + (bh * Sk + c0) * d;                     // (ncols, d)
      gemm_ab_acc(ncols, d, R, dP.data(), 1, ncols, Qh + i0 * d, d, dKp, d);  // += dS^T Q
      gemm_ab_acc(ncols, d, R, S.data(), 1, ncols, dOb, d, dVp, d);          // += P^T dO
    }
    if (backward) {
      double* dKp = dKh.data() + bh * Sk * d;
      for (int64_t k = 0; k < Sk * d; ++k) dKp[k] *= scale;
    }
  });

  if (backward) {  // sum the per-head partials over each GQA group, in head order
    res.dK.assign(size_t(nk), 0.0);
    res.dV.assign(size_t(nk), 0.0);
    parallel_for(B * Hkv, nt, [&](int64_t bk, int) {
      const int64_t b = bk / Hkv, hk = bk % Hkv;
      double* dK = res.dK.data() + bk * Sk * d;
      double* dV = res.dV.data() + bk * Sk * d;
      for (int64_t g = 0; g < G; ++g) {
        const int64_t bh = b * H + hk * G + g;
        const double* kp = dKh.data() + bh * Sk * d;
        const double* vp = dVh.data() + bh * Sk * d;
        for (int64_t k = 0; k < Sk * d; ++k) {
          dK[k] += kp[k];
          dV[k] += vp[k];
        }
      }
    });
  }
  return res;
}

AttentionResult attention_reference(const AttentionProblem& p, const AttentionInputs& in, bool backward,
                                    int threads) {
  const int64_t nq = p.B * p.H * p.Sq * p.d, nk = p.B * p.Hkv * p.Sk * p.d;
  if (int64_t(in.Q.size()) != nq || int64_t(in.K.size()) != nk || int64_t(in.V.size()) != nk ||
      (backward && int64_t(in.dO.size()) != nq))
    throw invalid_argument("AttentionInputs: sizes do not match problem " + p.key());
  return attention_reference<float>(p, in.Q.data(), in.K.data(), in.V.data(), backward ? in.dO.data() : nullptr,
                                    threads);
}

template AttentionResult attention_reference<float>(const AttentionProblem&, const float*, const float*,
                                                    const float*, const float*, int);
template AttentionResult attention_reference<double>(const AttentionProblem&, const double*, const double*,
                                                     const double*, const double*, int);

}  // namespace detfuse::reference
