// Tests of the float64 FLCE reference: finite differences for every option,
// hand-computed tiny cases, extreme inputs, an independent naive
// implementation, and determinism across thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "tests/reference/finite_diff.h"
#include "reference/compare.h"
#include "reference/flce_ref.h"
#include "reference/inputs.h"

namespace detfuse::reference {
namespace {

struct Case {
  FlceProblem p;
  std::vector<double> X, W, dloss;
  std::vector<int64_t> y;
};

Case make_case(const FlceProblem& p, uint64_t seed, const FlceInputOptions& o = {}) {
  const FlceInputs in = make_flce_inputs(p, seed, o);
  Case c;
  c.p = p;
  c.X.assign(in.X.begin(), in.X.end());
  c.W.assign(in.W.begin(), in.W.end());
  c.dloss.assign(in.dloss.begin(), in.dloss.end());
  c.y = in.y;
  return c;
}

FlceResult run(const Case& c, bool backward, int threads = 1) {
  return flce_reference<double>(c.p, c.X.data(), c.W.data(), c.y.data(), c.dloss.data(), backward, threads);
}

// The scalar whose gradient the backward pass returns:
// grad_output * L (mean/sum), grad_output * sum_i dloss_i loss_i (none).
double objective(const Case& c) {
  const FlceResult r = run(c, false);
  if (c.p.reduction != Reduction::none) return c.p.grad_output * r.loss;
  double s = 0.0;
  for (int64_t i = 0; i < c.p.N; ++i) s += c.dloss[size_t(i)] * r.loss_rows[size_t(i)];
  return c.p.grad_output * s;
}

std::vector<double> finite_diff(Case& c, std::vector<double>& v) {
  return testing::finite_diff([&] { return objective(c); }, v);
}

struct FdParam {
  std::string name;
  Reduction red = Reduction::mean;
  int64_t n_ignored = 1;
  double ls = 0.0, z = 0.0, cap = 0.0, go = 1.0;
  int64_t ignore_index = -100;
};

class FlceFiniteDiff : public ::testing::TestWithParam<FdParam> {};

TEST_P(FlceFiniteDiff, GradientsMatch) {
  const FdParam& q = GetParam();
  FlceProblem p;
  p.N = 6, p.D = 5, p.V = 7;
  p.dtype = DType::f32;
  p.reduction = q.red;
  p.label_smoothing = q.ls;
  p.lse_square_scale = q.z;
  p.softcap = q.cap;
  p.grad_output = q.go;
  p.ignore_index = q.ignore_index;
  FlceInputOptions o;
  o.ignore_fraction = 0.0;
  Case c = make_case(p, 1234, o);
  for (int64_t i = 0; i < q.n_ignored; ++i) c.y[size_t(1 + 2 * i)] = p.ignore_index;

  const FlceResult r = run(c, true);
  ASSERT_EQ(r.n_valid, p.N - q.n_ignored);
  const std::vector<double> gx = finite_diff(c, c.X), gw = finite_diff(c, c.W);
  const double ex = rel_norm_error(r.dX, gx), ew = rel_norm_error(r.dW, gw);
  EXPECT_LT(ex, 1e-6) << "dX vs finite differences";
  EXPECT_LT(ew, 1e-6) << "dW vs finite differences";
  for (int64_t i = 0; i < q.n_ignored; ++i) {
    const int64_t row = 1 + 2 * i;
    EXPECT_EQ(r.loss_rows[size_t(row)], 0.0);
    EXPECT_TRUE(std::isfinite(r.lse[size_t(row)]));
    for (int64_t k = 0; k < p.D; ++k) EXPECT_EQ(r.dX[size_t(row * p.D + k)], 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Options, FlceFiniteDiff,
    ::testing::Values(FdParam{"mean", Reduction::mean, 1}, FdParam{"sum", Reduction::sum, 1},
                      FdParam{"none", Reduction::none, 1}, FdParam{"no_ignored", Reduction::mean, 0},
                      FdParam{"ignore_three", Reduction::mean, 3},
                      FdParam{"ignore_index_above_V", Reduction::sum, 2, 0, 0, 0, 1, 9},
                      FdParam{"label_smoothing", Reduction::mean, 1, 0.15},
                      FdParam{"zloss", Reduction::mean, 1, 0.0, 0.1},
                      FdParam{"softcap", Reduction::mean, 1, 0.0, 0.0, 2.5},
                      FdParam{"grad_output", Reduction::mean, 1, 0.0, 0.0, 0.0, -2.75},
                      FdParam{"all_mean", Reduction::mean, 2, 0.1, 0.05, 3.0, 1.7},
                      FdParam{"all_sum", Reduction::sum, 1, 0.2, 0.02, 4.0, 0.6},
                      FdParam{"all_none", Reduction::none, 2, 0.1, 0.05, 3.0, -1.3}),
    [](const auto& info) { return info.param.name; });

// ---- hand-computed tiny cases: N = 1, D = 1, V = 2, x = 1, w = (1, -1), so
// z = (1, -1), y = 0. lse = log(e + 1/e) = 1 + log(1 + e^-2) = 1.12692801104297;
// p = (1, e^-2) / (1 + e^-2) = (0.880797077977882, 0.119202922022118).

struct Tiny {
  FlceProblem p;
  std::vector<double> X{1.0}, W{1.0, -1.0};
  std::vector<int64_t> y{0};
  Tiny() { p.N = 1, p.D = 1, p.V = 2, p.dtype = DType::f32; }
  FlceResult run() const { return flce_reference<double>(p, X.data(), W.data(), y.data(), nullptr, true, 1); }
};

TEST(FlceHand, Plain) {
  // loss = lse - z0 = log(1 + e^-2) = 0.126928011042973
  // dz = p - onehot(0) = (-0.119202922022118, 0.119202922022118)
  // dX = dz0 * 1 + dz1 * (-1) = -0.238405844044235;  dW = dz * x.
  const FlceResult r = Tiny().run();
  EXPECT_NEAR(r.lse[0], 1.1269280110429725, 1e-15);
  EXPECT_NEAR(r.loss, 0.1269280110429726, 1e-15);
  EXPECT_EQ(r.n_valid, 1);
  EXPECT_NEAR(r.dX[0], -0.23840584404423537, 1e-15);
  EXPECT_NEAR(r.dW[0], -0.11920292202211769, 1e-15);
  EXPECT_NEAR(r.dW[1], 0.11920292202211769, 1e-15);
}

TEST(FlceHand, LabelSmoothing) {
  // eps = 0.2: loss = lse - 0.8 z0 - 0.1 (z0 + z1) = 1.12692801104297 - 0.8 = 0.326928011042972
  // dz = p - 0.8 onehot - 0.1 = (-0.0192029220221177, 0.0192029220221177)
  Tiny t;
  t.p.label_smoothing = 0.2;
  const FlceResult r = t.run();
  EXPECT_NEAR(r.loss, 0.3269280110429724, 1e-15);
  EXPECT_NEAR(r.dW[0], -0.019202922022117708, 1e-15);
  EXPECT_NEAR(r.dW[1], 0.01920292202211768, 1e-15);
  EXPECT_NEAR(r.dX[0], -0.03840584404423539, 1e-15);
}

TEST(FlceHand, ZLoss) {
  // s = 0.5: loss = 0.126928011042973 + 0.5 lse^2 = 0.761911382079608
  // dz = (1 + 2 s lse) p - onehot = 2.12692801104297 p - onehot
  //    = (0.873391977195959, 0.253536033847013)
  Tiny t;
  t.p.lse_square_scale = 0.5;
  const FlceResult r = t.run();
  EXPECT_NEAR(r.loss, 0.7619113820796075, 1e-15);
  EXPECT_NEAR(r.dW[0], 0.8733919771959591, 1e-15);
  EXPECT_NEAR(r.dW[1], 0.2535360338470133, 1e-15);
}

TEST(FlceHand, Softcap) {
  // cap = 1: z = (tanh 1, -tanh 1) = (t, -t), t = 0.761594155955765;
  // lse = log(e^t + e^-t) = 0.958817195190980, loss = lse - t = 0.197223039235215;
  // dz = (p - onehot) (1 - t^2) = (-0.0751722590187262, 0.0751722590187261)
  Tiny t;
  t.p.softcap = 1.0;
  const FlceResult r = t.run();
  EXPECT_NEAR(r.lse[0], 0.9588171951909797, 1e-15);
  EXPECT_NEAR(r.loss, 0.1972230392352149, 1e-15);
  EXPECT_NEAR(r.dW[0], -0.07517225901872615, 1e-15);
  EXPECT_NEAR(r.dW[1], 0.07517225901872614, 1e-15);
}

TEST(FlceHand, MeanOverValidRowsAndGradOutput) {
  // Two copies of the plain row, the second ignored: mean = the first row's loss,
  // gradients of the first row scaled by grad_output / n_valid = 3 / 1.
  Tiny t;
  t.p.N = 2;
  t.p.grad_output = 3.0;
  t.X = {1.0, 1.0};
  t.y = {0, -100};
  const FlceResult r = t.run();
  EXPECT_EQ(r.n_valid, 1);
  EXPECT_NEAR(r.loss, 0.1269280110429726, 1e-15);
  EXPECT_EQ(r.loss_rows[1], 0.0);
  EXPECT_NEAR(r.lse[1], 1.1269280110429725, 1e-15);  // computed for the ignored row too
  EXPECT_NEAR(r.dX[0], 3 * -0.23840584404423537, 1e-14);
  EXPECT_EQ(r.dX[1], 0.0);
  EXPECT_NEAR(r.dW[1], 3 * 0.11920292202211769, 1e-14);
}

TEST(FlceHand, UniformLogitsGiveLogV) {
  // W = 0: every logit is 0, p = 1/V, loss_i = log V for every valid row;
  // dX = G W = 0; dW_j = sum_i (1/V - [j == y_i]) x_i / n_valid.
  FlceProblem p;
  p.N = 3, p.D = 4, p.V = 10, p.dtype = DType::f32;
  const std::vector<double> X = {1, 2, 3, 4, -1, 0.5, 0, 2, 7, 7, 7, 7};
  const std::vector<double> W(40, 0.0);
  const std::vector<int64_t> y = {3, -100, 9};
  const FlceResult r = flce_reference<double>(p, X.data(), W.data(), y.data(), nullptr, true, 1);
  EXPECT_NEAR(r.loss, std::log(10.0), 1e-15);
  EXPECT_NEAR(r.loss_rows[0], std::log(10.0), 1e-15);
  EXPECT_NEAR(r.lse[1], std::log(10.0), 1e-15);
  for (double v : r.dX) EXPECT_EQ(v, 0.0);
  for (int64_t j = 0; j < p.V; ++j)
    for (int64_t k = 0; k < p.D; ++k) {
      const double want = ((0.1 - (j == 3)) * X[size_t(k)] + (0.1 - (j == 9)) * X[size_t(8 + k)]) / 2;
      EXPECT_NEAR(r.dW[size_t(j * p.D + k)], want, 1e-15);
    }
}

// ---- extreme inputs

TEST(FlceExtreme, LogitsNear1e4AreFiniteAndCorrect) {
  // z = x (1e4, 1e4 - 1). x = 1, y = 1: loss = lse - z1 = 1 + log(1 + e^-1) = 1.31326168751822,
  // dz = (p0, p1 - 1), p0 = 1 / (1 + e^-1) = 0.731058578630005.
  // x = -1, y = 0: z = (-1e4, -9999): loss = log(1 + e) = 1.31326168751822,
  // softmax = (p1, p0) with p1 = 1 - p0 = 0.268941421369995, so dz = (p1 - 1, p0).
  // dX_i = dz_i . w: dX_0 = p0 1e4 + (p1 - 1) 9999 = p0; dX_1 = (p1 - 1) 1e4 + p0 9999 = -p0.
  // dW_j = sum_i dz_ij x_i: dW_0 = p0 - (p1 - 1), dW_1 = (p1 - 1) - p0.
  // Exact to ~1e-12 only if p is not computed as exp(z - lse) (lse carries ulp(1e4)).
  FlceProblem p;
  p.N = 2, p.D = 1, p.V = 2, p.dtype = DType::f32, p.reduction = Reduction::sum;
  const std::vector<double> X = {1.0, -1.0}, W = {1e4, 1e4 - 1};
  const std::vector<int64_t> y = {1, 0};
  const FlceResult r = flce_reference<double>(p, X.data(), W.data(), y.data(), nullptr, true, 1);
  EXPECT_NEAR(r.loss_rows[0], 1.3132616875182228, 1e-15);  // no cancellation of 1e4's
  EXPECT_NEAR(r.loss_rows[1], 1.3132616875182228, 1e-15);
  EXPECT_NEAR(r.lse[0], 1e4 + 0.3132616875182228, 1e-11);
  EXPECT_NEAR(r.lse[1], -9999 + 0.3132616875182228, 1e-11);
  const double p0 = 0.7310585786300049, p1 = 1 - p0;
  EXPECT_NEAR(r.dX[0], p0, 1e-11);
  EXPECT_NEAR(r.dX[1], -p0, 1e-11);
  EXPECT_NEAR(r.dW[0], p0 * 1 + (p1 - 1) * -1, 1e-12);
  EXPECT_NEAR(r.dW[1], (p1 - 1) * 1 + p0 * -1, 1e-12);
}

TEST(FlceExtreme, CommonOffsetLeavesLossAndGradientsUnchanged) {
  // With logit_offset = 1e4 every row's logits share a +-1e4 component (column 0).
  // The loss (with label smoothing) is shift invariant, so the problem without
  // column 0 gives the same loss and the same gradients elsewhere; dX[:, 0] = 0.
  FlceProblem p;
  p.N = 40, p.D = 17, p.V = 50, p.dtype = DType::bf16, p.label_smoothing = 0.1;
  FlceInputOptions o;
  o.logit_offset = 1e4;
  const FlceInputs in = make_flce_inputs(p, 77, o);
  const FlceResult r = flce_reference(p, in, true, 2);
  FlceProblem q = p;
  q.D = p.D - 1;
  std::vector<float> X2, W2;
  for (int64_t i = 0; i < p.N; ++i) X2.insert(X2.end(), in.X.begin() + i * p.D + 1, in.X.begin() + (i + 1) * p.D);
  for (int64_t j = 0; j < p.V; ++j) W2.insert(W2.end(), in.W.begin() + j * p.D + 1, in.W.begin() + (j + 1) * p.D);
  const FlceResult s = flce_reference<float>(q, X2.data(), W2.data(), in.y.data(), nullptr, true, 2);
  ASSERT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, s.loss, 1e-10);
  std::vector<double> dx, dw, dx0;
  for (int64_t i = 0; i < p.N; ++i) {
    EXPECT_GT(std::fabs(r.lse[size_t(i)]), 9000.0);
    EXPECT_NEAR(r.loss_rows[size_t(i)], s.loss_rows[size_t(i)], 1e-10);
    dx.insert(dx.end(), r.dX.begin() + i * p.D + 1, r.dX.begin() + (i + 1) * p.D);
    EXPECT_NEAR(r.dX[size_t(i * p.D)], 0.0, 1e-9);
  }
  for (int64_t j = 0; j < p.V; ++j) dw.insert(dw.end(), r.dW.begin() + j * p.D + 1, r.dW.begin() + (j + 1) * p.D);
  EXPECT_LT(rel_norm_error(dx, s.dX), 1e-9);
  EXPECT_LT(rel_norm_error(dw, s.dW), 1e-9);
}

TEST(FlceExtreme, ExtremeLogitsWithEveryOption) {
  for (Reduction red : {Reduction::mean, Reduction::none}) {
    FlceProblem p;
    p.N = 33, p.D = 9, p.V = 70, p.reduction = red, p.label_smoothing = 0.1, p.lse_square_scale = 1e-4;
    FlceInputOptions o;
    o.logit_offset = 1e4;
    o.logit_std = 30.0;
    const FlceInputs in = make_flce_inputs(p, 5, o);
    const FlceResult r = flce_reference(p, in, true, 2);
    EXPECT_TRUE(std::isfinite(r.loss));
    for (const auto* v : {&r.loss_rows, &r.lse, &r.dX, &r.dW})
      for (double x : *v) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST(FlceExtreme, AllRowsIgnored) {
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    FlceProblem p;
    p.N = 70, p.D = 12, p.V = 30, p.reduction = red;
    FlceInputOptions o;
    o.ignore_fraction = 1.0;
    const FlceInputs in = make_flce_inputs(p, 3, o);
    const FlceResult r = flce_reference(p, in, true, 2);
    EXPECT_EQ(r.n_valid, 0);
    EXPECT_EQ(r.loss, 0.0) << to_string(red);
    for (double v : r.loss_rows) ASSERT_EQ(v, 0.0);
    for (double v : r.lse) ASSERT_TRUE(std::isfinite(v));
    for (double v : r.dX) ASSERT_EQ(v, 0.0);
    for (double v : r.dW) ASSERT_EQ(v, 0.0);
    ASSERT_EQ(r.dW.size(), size_t(p.V * p.D));
  }
}

// ---- an independent, naive implementation of problem.h's formulas

FlceResult naive(const FlceProblem& p, const FlceInputs& in) {
  const int64_t N = p.N, D = p.D, V = p.V;
  FlceResult r;
  r.loss_rows.assign(size_t(N), 0.0);
  r.lse.assign(size_t(N), 0.0);
  r.dX.assign(size_t(N * D), 0.0);
  r.dW.assign(size_t(V * D), 0.0);
  for (int64_t t : in.y) r.n_valid += t != p.ignore_index;
  const double eps = p.label_smoothing;
  for (int64_t i = 0; i < N; ++i) {
    std::vector<double> z(static_cast<size_t>(V));
    for (int64_t j = 0; j < V; ++j) {
      long double s = 0;
      for (int64_t k = 0; k < D; ++k) s += (long double)in.X[size_t(i * D + k)] * in.W[size_t(j * D + k)];
      z[size_t(j)] = p.softcap > 0 ? p.softcap * std::tanh(double(s) / p.softcap) : double(s);
    }
    const double m = *std::max_element(z.begin(), z.end());
    double se = 0, zs = 0;
    for (double v : z) se += std::exp(v - m), zs += v;
    const double lse = m + std::log(se);
    r.lse[size_t(i)] = lse;
    const int64_t yi = in.y[size_t(i)];
    if (yi == p.ignore_index) continue;
    r.loss_rows[size_t(i)] = lse - (1 - eps) * z[size_t(yi)] - eps / V * zs + p.lse_square_scale * lse * lse;
    double c = p.grad_output;
    if (p.reduction == Reduction::mean) c /= double(r.n_valid);
    if (p.reduction == Reduction::none) c *= in.dloss[size_t(i)];
    for (int64_t j = 0; j < V; ++j) {
      const double zc = z[size_t(j)];
      double g = (1 + 2 * p.lse_square_scale * lse) * std::exp(zc - lse) - (1 - eps) * (j == yi) - eps / V;
      if (p.softcap > 0) g *= 1 - (zc / p.softcap) * (zc / p.softcap);
      g *= c;
      for (int64_t k = 0; k < D; ++k) {
        r.dX[size_t(i * D + k)] += g * in.W[size_t(j * D + k)];
        r.dW[size_t(j * D + k)] += g * in.X[size_t(i * D + k)];
      }
    }
  }
  for (double v : r.loss_rows) r.loss += v;
  if (p.reduction == Reduction::mean) r.loss /= double(r.n_valid);
  return r;
}

TEST(FlceReference, MatchesNaiveImplementation) {
  // Odd sizes so that every tile remainder of the blocked kernels runs.
  for (int variant = 0; variant < 3; ++variant) {
    FlceProblem p;
    p.N = 71, p.D = 37 + variant, p.V = 133 + 2 * variant;
    if (variant == 1) p.reduction = Reduction::sum, p.softcap = 5.0, p.label_smoothing = 0.05;
    if (variant == 2)
      p.reduction = Reduction::none, p.lse_square_scale = 0.01, p.grad_output = 0.3, p.softcap = 10.0;
    const FlceInputs in = make_flce_inputs(p, 100 + uint64_t(variant));
    const FlceResult r = flce_reference(p, in, true, 2), n = naive(p, in);
    EXPECT_NEAR(r.loss, n.loss, 1e-12 * std::fabs(n.loss)) << variant;
    EXPECT_EQ(r.n_valid, n.n_valid);
    EXPECT_LT(rel_norm_error(r.loss_rows, n.loss_rows), 1e-13) << variant;
    EXPECT_LT(rel_norm_error(r.lse, n.lse), 1e-13) << variant;
    EXPECT_LT(rel_norm_error(r.dX, n.dX), 1e-12) << variant;
    EXPECT_LT(rel_norm_error(r.dW, n.dW), 1e-12) << variant;
  }
}

// ---- determinism and consistency of the variants

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

FlceProblem busy_problem() {
  FlceProblem p;
  p.N = 150, p.D = 75, p.V = 301, p.reduction = Reduction::none;
  p.label_smoothing = 0.1, p.lse_square_scale = 1e-3, p.softcap = 15.0, p.grad_output = 0.7;
  return p;
}

TEST(FlceReference, BitwiseIdenticalAcrossThreadCounts) {
  const FlceProblem p = busy_problem();
  const FlceInputs in = make_flce_inputs(p, 31);
  const FlceResult a = flce_reference(p, in, true, 1), b = flce_reference(p, in, true, 3);
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0);
  EXPECT_TRUE(same_bits(a.loss_rows, b.loss_rows));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  EXPECT_TRUE(same_bits(a.dX, b.dX));
  EXPECT_TRUE(same_bits(a.dW, b.dW));
  const FlceResult c = flce_reference(p, in, true, 7);
  EXPECT_TRUE(same_bits(a.dW, c.dW));
  EXPECT_TRUE(same_bits(a.dX, c.dX));
}

TEST(FlceReference, RowsVariantMatchesFullBitwise) {
  FlceProblem p = busy_problem();
  p.reduction = Reduction::mean;
  const FlceInputs in = make_flce_inputs(p, 32);
  const FlceResult full = flce_reference(p, in, true, 2);
  const std::vector<int64_t> rows = {5, 0, 149, 5, 77, 100, 101, 3};
  const FlceResult r = flce_reference_rows(p, in, rows, true, 3);
  ASSERT_EQ(r.dX.size(), rows.size() * size_t(p.D));
  EXPECT_EQ(r.n_valid, full.n_valid);
  EXPECT_TRUE(r.dW.empty());
  double sum = 0.0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const size_t i = size_t(rows[k]);
    EXPECT_EQ(r.loss_rows[k], full.loss_rows[i]);
    EXPECT_EQ(r.lse[k], full.lse[i]);
    EXPECT_EQ(0, std::memcmp(&r.dX[k * size_t(p.D)], &full.dX[i * size_t(p.D)], size_t(p.D) * sizeof(double)));
    sum += r.loss_rows[k];
  }
  EXPECT_EQ(r.loss, sum);
  const FlceResult f = flce_reference_rows(p, in, rows, false, 1);
  EXPECT_TRUE(f.dX.empty());
  EXPECT_TRUE(same_bits(f.lse, r.lse));
}

TEST(FlceReference, FloatAndDoubleInputsAgreeBitwise) {
  const FlceProblem p = busy_problem();
  const FlceInputs in = make_flce_inputs(p, 33);
  const Case c = make_case(p, 33);
  const FlceResult a = flce_reference(p, in, true, 2), b = run(c, true, 2);
  EXPECT_TRUE(same_bits(a.dX, b.dX));
  EXPECT_TRUE(same_bits(a.dW, b.dW));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
}

TEST(FlceReference, ForwardOnlyMatchesForwardOfBackward) {
  const FlceProblem p = busy_problem();
  const FlceInputs in = make_flce_inputs(p, 34);
  const FlceResult a = flce_reference(p, in, false, 2), b = flce_reference(p, in, true, 2);
  EXPECT_TRUE(a.dX.empty());
  EXPECT_TRUE(a.dW.empty());
  EXPECT_TRUE(same_bits(a.loss_rows, b.loss_rows));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  EXPECT_EQ(a.loss, b.loss);
}

TEST(FlceReference, BadArgumentsThrow) {
  FlceProblem p;
  p.N = 2, p.D = 3, p.V = 4;
  FlceInputs in = make_flce_inputs(p, 1);
  in.y[1] = 4;  // not a class, not ignore_index
  EXPECT_THROW(flce_reference(p, in, false, 1), Error);
  in.y[1] = 2;
  p.reduction = Reduction::none;
  EXPECT_THROW(
      flce_reference<float>(p, in.X.data(), in.W.data(), in.y.data(), nullptr, true, 1), Error);
  EXPECT_NO_THROW(flce_reference<float>(p, in.X.data(), in.W.data(), in.y.data(), nullptr, false, 1));
  EXPECT_THROW(flce_reference_rows(p, in, {0, 2}, false, 1), Error);
  p.N = 0;
  EXPECT_THROW(flce_reference(p, in, false, 1), Error);
}

}  // namespace
}  // namespace detfuse::reference
