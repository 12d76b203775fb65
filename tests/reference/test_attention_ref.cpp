// Tests of the float64 attention reference: finite differences (causal,
// non-causal, Sq != Sk both ways, GQA/MQA, softcap, sliding window), fully
// masked rows, an independent naive implementation (a per-element mask
// predicate, softcap by its definition), determinism across thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "tests/reference/finite_diff.h"
#include "reference/attention_ref.h"
#include "reference/compare.h"
#include "reference/inputs.h"

namespace detfuse::reference {
namespace {

struct Case {
  AttentionProblem p;
  std::vector<double> Q, K, V, dO;
};

Case make_case(const AttentionProblem& p, uint64_t seed) {
  const AttentionInputs in = make_attention_inputs(p, seed);
  return Case{p, {in.Q.begin(), in.Q.end()}, {in.K.begin(), in.K.end()}, {in.V.begin(), in.V.end()},
              {in.dO.begin(), in.dO.end()}};
}

AttentionResult run(const Case& c, bool backward, int threads = 1) {
  return attention_reference<double>(c.p, c.Q.data(), c.K.data(), c.V.data(), backward ? c.dO.data() : nullptr,
                                     threads);
}

double objective(const Case& c) {  // sum(dO * O): its gradients are dQ, dK, dV
  const AttentionResult r = run(c, false);
  double s = 0.0;
  for (size_t k = 0; k < r.O.size(); ++k) s += c.dO[k] * r.O[k];
  return s;
}

std::vector<double> finite_diff(Case& c, std::vector<double>& v) {
  return testing::finite_diff([&] { return objective(c); }, v);
}

struct FdParam {
  std::string name;
  int64_t B, H, Hkv, Sq, Sk, d;
  bool causal;
  double scale = 0.0;
  double softcap = 0.0;
  int64_t window = 0;
};

class AttentionFiniteDiff : public ::testing::TestWithParam<FdParam> {};

TEST_P(AttentionFiniteDiff, GradientsMatch) {
  const FdParam& q = GetParam();
  AttentionProblem p;
  p.B = q.B, p.H = q.H, p.Hkv = q.Hkv, p.Sq = q.Sq, p.Sk = q.Sk, p.d = q.d, p.causal = q.causal,
  p.scale = q.scale, p.softcap = q.softcap, p.window = q.window, p.dtype = DType::f32;
  Case c = make_case(p, 99);
  const AttentionResult r = run(c, true);
  const std::vector<double> gq = finite_diff(c, c.Q), gk = finite_diff(c, c.K), gv = finite_diff(c, c.V);
  EXPECT_LT(rel_norm_error(r.dQ, gq), 1e-6) << "dQ";
  EXPECT_LT(rel_norm_error(r.dK, gk), 1e-6) << "dK";
  EXPECT_LT(rel_norm_error(r.dV, gv), 1e-6) << "dV";
  for (const auto* v : {&r.O, &r.dQ, &r.dK, &r.dV})
    for (double x : *v) ASSERT_FALSE(std::isnan(x));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionFiniteDiff,
                         ::testing::Values(FdParam{"noncausal", 1, 2, 2, 6, 6, 4, false},
                                           FdParam{"causal", 1, 2, 2, 6, 6, 4, true},
                                           FdParam{"noncausal_sq_lt_sk", 1, 1, 1, 4, 9, 5, false},
                                           FdParam{"noncausal_sq_gt_sk", 1, 1, 1, 9, 4, 5, false},
                                           FdParam{"causal_sq_lt_sk", 2, 1, 1, 5, 8, 3, true},
                                           FdParam{"causal_sq_gt_sk", 1, 2, 1, 8, 5, 3, true, 0.8},
                                           FdParam{"gqa_causal", 2, 4, 2, 5, 7, 4, true},
                                           FdParam{"mqa_noncausal", 1, 3, 1, 5, 6, 4, false, 1.3},
                                           // softcap small enough to bend the scores (scale 1.5: |s| ~ 2-6)
                                           FdParam{"softcap", 1, 2, 2, 6, 7, 4, false, 1.5, 2.0},
                                           FdParam{"softcap_causal_gqa", 2, 4, 2, 5, 7, 4, true, 1.5, 1.0},
                                           FdParam{"window_noncausal", 1, 2, 2, 7, 7, 4, false, 0.0, 0.0, 3},
                                           FdParam{"window_causal", 1, 2, 1, 8, 8, 4, true, 0.0, 0.0, 2},
                                           FdParam{"window_causal_sq_lt_sk", 1, 1, 1, 4, 9, 5, true, 0.0, 0.0, 3},
                                           FdParam{"window_causal_sq_gt_sk", 1, 2, 1, 8, 5, 3, true, 0.0, 0.0, 2},
                                           FdParam{"window_noncausal_sq_gt_sk", 1, 1, 1, 9, 4, 5, false, 0.0, 0.0,
                                                   2},
                                           FdParam{"window_noncausal_sq_lt_sk", 1, 1, 1, 4, 11, 5, false, 0.0, 0.0,
                                                   3},
                                           FdParam{"softcap_window_gqa", 2, 4, 2, 6, 9, 4, true, 1.5, 3.0, 4}),
                         [](const auto& info) { return info.param.name; });

TEST(AttentionHand, SingleKeyCopiesValue) {
  // One key: p = 1 whatever q, so O = v, LSE = scale q.k; dV = dO, dQ = dK = 0.
  AttentionProblem p;
  p.B = p.H = p.Hkv = p.Sq = p.Sk = 1, p.d = 2, p.dtype = DType::f32;
  const std::vector<double> Q = {1.0, 2.0}, K = {3.0, -1.0}, V = {0.5, -4.0}, dO = {2.0, 1.0};
  const AttentionResult r = attention_reference<double>(p, Q.data(), K.data(), V.data(), dO.data(), 1);
  EXPECT_DOUBLE_EQ(r.lse[0], (3.0 - 2.0) / std::sqrt(2.0));
  EXPECT_EQ(r.O, V);
  EXPECT_EQ(r.dV, dO);
  for (double v : r.dQ) EXPECT_EQ(v, 0.0);
  for (double v : r.dK) EXPECT_EQ(v, 0.0);
}

TEST(AttentionHand, TwoEqualKeysAverageValues) {
  // Identical keys: p = (1/2, 1/2), O = (v0 + v1) / 2, LSE = scale q.k + log 2.
  AttentionProblem p;
  p.B = p.H = p.Hkv = p.Sq = 1, p.Sk = 2, p.d = 1, p.scale = 1.0, p.dtype = DType::f32;
  const std::vector<double> Q = {0.7}, K = {2.0, 2.0}, V = {1.0, 3.0};
  const AttentionResult r = attention_reference<double>(p, Q.data(), K.data(), V.data(), nullptr, 1);
  EXPECT_DOUBLE_EQ(r.O[0], 2.0);
  EXPECT_DOUBLE_EQ(r.lse[0], 1.4 + std::log(2.0));
  EXPECT_TRUE(r.dQ.empty());
}

TEST(AttentionExtreme, FullyMaskedRows) {
  // causal with Sq = 7 > Sk = 3: query i sees keys j <= i - 4, so rows 0..3 see none.
  AttentionProblem p;
  p.B = 2, p.H = 2, p.Hkv = 1, p.Sq = 7, p.Sk = 3, p.d = 8, p.causal = true;
  const AttentionInputs in = make_attention_inputs(p, 8);
  const AttentionResult r = attention_reference(p, in, true, 2);
  for (int64_t bh = 0; bh < p.B * p.H; ++bh)
    for (int64_t i = 0; i < p.Sq; ++i) {
      const double lse = r.lse[size_t(bh * p.Sq + i)];
      for (int64_t k = 0; k < p.d; ++k) {
        const size_t at = size_t((bh * p.Sq + i) * p.d + k);
        ASSERT_TRUE(std::isfinite(r.O[at]));
        ASSERT_TRUE(std::isfinite(r.dQ[at]));
        if (i < 4) {
          EXPECT_EQ(r.O[at], 0.0);
          EXPECT_EQ(r.dQ[at], 0.0);
        }
      }
      if (i < 4) {
        EXPECT_EQ(lse, -std::numeric_limits<double>::infinity());
      } else {
        EXPECT_TRUE(std::isfinite(lse));
      }
    }
  for (double v : r.dK) ASSERT_TRUE(std::isfinite(v));
  for (double v : r.dV) ASSERT_TRUE(std::isfinite(v));
  // Key 2 is seen only by row 6 (j <= i - 4), so every dK/dV row is non-zero.
  EXPECT_NE(r.dV[size_t(2 * p.d)], 0.0);

  // A window does not hide more rows (a row sees its diagonal key), but it
  // narrows what the others see: window 1 keeps only the diagonal key.
  p.window = 1;
  const AttentionResult rw = attention_reference(p, in, true, 2);
  for (int64_t bh = 0; bh < p.B * p.H; ++bh)
    for (int64_t i = 0; i < p.Sq; ++i) {
      const double lse = rw.lse[size_t(bh * p.Sq + i)];
      if (i < 4) {
        EXPECT_EQ(lse, -std::numeric_limits<double>::infinity());
      } else {  // one key: O = V[i - 4]
        for (int64_t k = 0; k < p.d; ++k)
          EXPECT_DOUBLE_EQ(rw.O[size_t((bh * p.Sq + i) * p.d + k)],
                           double(in.V[size_t(((bh / 2) * p.Sk + i - 4) * p.d + k)]));
      }
    }
  p.window = 0;

  // A whole problem with no visible key at all: Sq = 9, Sk = 1, causal; rows 0..7 masked.
  p.B = 1, p.H = 1, p.Sq = 9, p.Sk = 1;
  const AttentionInputs in2 = make_attention_inputs(p, 9);
  const AttentionResult r2 = attention_reference(p, in2, true, 1);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(r2.lse[size_t(i)], -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isfinite(r2.lse[8]));
}

TEST(AttentionExtreme, LargeScoresStayFinite) {
  AttentionProblem p;
  p.B = 1, p.H = 2, p.Hkv = 2, p.Sq = 20, p.Sk = 30, p.d = 16, p.causal = true, p.scale = 500.0;
  const AttentionInputs in = make_attention_inputs(p, 10);
  const AttentionResult r = attention_reference(p, in, true, 2);
  for (const auto* v : {&r.O, &r.lse, &r.dQ, &r.dK, &r.dV})
    for (double x : *v) ASSERT_TRUE(std::isfinite(x));
}

// ---- an independent, naive implementation

// Query i sees key j (problem.h, written independently of the reference's ranges).
bool sees(const AttentionProblem& p, int64_t i, int64_t j) {
  const int64_t diag = i + p.Sk - p.Sq;
  if (p.causal && j > diag) return false;
  if (p.window > 0 && j <= diag - p.window) return false;
  return true;
}

AttentionResult naive(const AttentionProblem& p, const AttentionInputs& in) {
  const int64_t G = p.H / p.Hkv, d = p.d;
  const double scale = p.softmax_scale();
  AttentionResult r;
  r.O.assign(in.Q.size(), 0.0);
  r.dQ.assign(in.Q.size(), 0.0);
  r.dK.assign(in.K.size(), 0.0);
  r.dV.assign(in.K.size(), 0.0);
  r.lse.assign(size_t(p.B * p.H * p.Sq), 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const size_t qo = size_t((b * p.H + h) * p.Sq * d), ko = size_t((b * p.Hkv + h / G) * p.Sk * d);
      for (int64_t i = 0; i < p.Sq; ++i) {
        std::vector<int64_t> keys;  // the keys row i sees, ascending
        for (int64_t j = 0; j < p.Sk; ++j)
          if (sees(p, i, j)) keys.push_back(j);
        const size_t qi = qo + size_t(i * d);
        if (keys.empty()) {
          r.lse[size_t((b * p.H + h) * p.Sq + i)] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const size_t nv = keys.size();
        std::vector<double> s(nv), pr(nv), dcap(nv, 1.0);
        double m = -1e300;
        for (size_t jj = 0; jj < nv; ++jj) {
          const int64_t j = keys[jj];
          double t = 0;
          for (int64_t k = 0; k < d; ++k) t += double(in.Q[qi + size_t(k)]) * in.K[ko + size_t(j * d + k)];
          s[jj] = scale * t;
          if (p.softcap > 0) {
            s[jj] = p.softcap * std::tanh(s[jj] / p.softcap);
            dcap[jj] = 1.0 - (s[jj] / p.softcap) * (s[jj] / p.softcap);
          }
          m = std::max(m, s[jj]);
        }
        double z = 0;
        for (double v : s) z += std::exp(v - m);
        const double lse = m + std::log(z);
        r.lse[size_t((b * p.H + h) * p.Sq + i)] = lse;
        for (size_t jj = 0; jj < nv; ++jj) {
          const int64_t j = keys[jj];
          pr[jj] = std::exp(s[jj] - lse);
          for (int64_t k = 0; k < d; ++k) r.O[qi + size_t(k)] += pr[jj] * in.V[ko + size_t(j * d + k)];
        }
        double Di = 0;
        for (int64_t k = 0; k < d; ++k) Di += double(in.dO[qi + size_t(k)]) * r.O[qi + size_t(k)];
        for (size_t jj = 0; jj < nv; ++jj) {
          const int64_t j = keys[jj];
          double dp = 0;
          for (int64_t k = 0; k < d; ++k) dp += double(in.dO[qi + size_t(k)]) * in.V[ko + size_t(j * d + k)];
          const double ds = pr[jj] * (dp - Di) * dcap[jj];
          for (int64_t k = 0; k < d; ++k) {
            r.dQ[qi + size_t(k)] += scale * ds * in.K[ko + size_t(j * d + k)];
            r.dK[ko + size_t(j * d + k)] += scale * ds * in.Q[qi + size_t(k)];
            r.dV[ko + size_t(j * d + k)] += pr[jj] * in.dO[qi + size_t(k)];
          }
        }
      }
    }
  return r;
}

void expect_matches_naive(const AttentionProblem& p, uint64_t seed, const std::string& what) {
  const AttentionInputs in = make_attention_inputs(p, seed);
  const AttentionResult r = attention_reference(p, in, true, 2), n = naive(p, in);
  EXPECT_LT(rel_norm_error(r.O, n.O), 1e-13) << what;
  EXPECT_LT(max_abs_error(r.lse, n.lse), 1e-12) << what;
  EXPECT_LT(rel_norm_error(r.dQ, n.dQ), 1e-12) << what;
  EXPECT_LT(rel_norm_error(r.dK, n.dK), 1e-12) << what;
  EXPECT_LT(rel_norm_error(r.dV, n.dV), 1e-12) << what;
}

TEST(AttentionReference, MatchesNaiveImplementation) {
  for (bool causal : {false, true})
    for (int64_t sq : {67, 150}) {
      AttentionProblem p;
      p.B = 2, p.H = 4, p.Hkv = 2, p.Sq = sq, p.Sk = 131, p.d = 13, p.causal = causal;
      expect_matches_naive(p, 40 + uint64_t(sq), std::string(causal ? "causal" : "noncausal") + " Sq=" +
                                                      std::to_string(sq));
    }
}

// Softcap and sliding windows over several 64-row blocks of the reference
// (windows narrower and wider than a block, Sq != Sk both ways, causal or not).
TEST(AttentionReference, SoftcapAndWindowMatchNaiveImplementation) {
  struct W {
    int64_t Sq, Sk;
    bool causal;
    double cap;
    int64_t window;
  };
  for (const W& w : {W{150, 131, false, 3.0, 0}, W{150, 131, true, 3.0, 0}, W{150, 131, true, 0.0, 20},
                     W{150, 131, false, 0.0, 20}, W{67, 200, true, 0.0, 90}, W{67, 200, false, 0.0, 140},
                     W{200, 67, true, 0.0, 5}, W{200, 67, false, 0.0, 30}, W{130, 130, true, 2.0, 64},
                     W{130, 130, true, 0.0, 1}, W{99, 140, false, 0.5, 7}, W{40, 40, true, 0.0, 100000}}) {
    AttentionProblem p;
    p.B = 2, p.H = 4, p.Hkv = 2, p.Sq = w.Sq, p.Sk = w.Sk, p.d = 13, p.causal = w.causal, p.scale = 1.0;
    p.softcap = w.cap, p.window = w.window;
    expect_matches_naive(p, 70 + uint64_t(w.window), p.key());
  }
}

// The window's edges by hand: Sq = 4, Sk = 6 (diagonal offset 2), window 2:
// query i sees keys i + 1 and i + 2 with causal, keys > i (all up to 5) without.
TEST(AttentionReference, WindowEdgesByHand) {
  AttentionProblem p;
  p.B = p.H = p.Hkv = 1, p.Sq = 4, p.Sk = 6, p.d = 1, p.scale = 1.0, p.window = 2, p.dtype = DType::f32;
  const std::vector<double> Q = {0.0, 0.0, 0.0, 0.0}, K = {0, 0, 0, 0, 0, 0}, V = {1, 2, 4, 8, 16, 32};
  for (bool causal : {true, false}) {
    p.causal = causal;
    // Equal scores: O is the mean of the visible values, LSE = log(count).
    const AttentionResult r = attention_reference<double>(p, Q.data(), K.data(), V.data(), nullptr, 1);
    for (int64_t i = 0; i < 4; ++i) {
      double sum = 0;
      int n = 0;
      for (int64_t j = i + 1; j < (causal ? i + 3 : 6); ++j, ++n) sum += V[size_t(j)];
      EXPECT_DOUBLE_EQ(r.O[size_t(i)], sum / n) << "row " << i << (causal ? " causal" : "");
      EXPECT_DOUBLE_EQ(r.lse[size_t(i)], std::log(double(n))) << "row " << i;
    }
  }
}

// Softcap by hand: one query, two keys with scores 3 and -1 (scale 1, cap 2):
// capped 2 tanh(1.5), 2 tanh(-0.5).
TEST(AttentionReference, SoftcapByHand) {
  AttentionProblem p;
  p.B = p.H = p.Hkv = p.Sq = 1, p.Sk = 2, p.d = 1, p.scale = 1.0, p.softcap = 2.0, p.dtype = DType::f32;
  const std::vector<double> Q = {1.0}, K = {3.0, -1.0}, V = {1.0, 0.0};
  const AttentionResult r = attention_reference<double>(p, Q.data(), K.data(), V.data(), nullptr, 1);
  const double a = 2 * std::tanh(1.5), b = 2 * std::tanh(-0.5);
  EXPECT_NEAR(r.lse[0], std::log(std::exp(a) + std::exp(b)), 1e-15);
  EXPECT_NEAR(r.O[0], std::exp(a) / (std::exp(a) + std::exp(b)), 1e-15);
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(AttentionReference, BitwiseIdenticalAcrossThreadCounts) {
  AttentionProblem p;
  p.B = 2, p.H = 4, p.Hkv = 2, p.Sq = 70, p.Sk = 130, p.d = 20, p.causal = true;
  p.softcap = 4.0, p.window = 50;
  const AttentionInputs in = make_attention_inputs(p, 12);
  const AttentionResult a = attention_reference(p, in, true, 1), b = attention_reference(p, in, true, 3);
  EXPECT_TRUE(same_bits(a.O, b.O));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  EXPECT_TRUE(same_bits(a.dQ, b.dQ));
  EXPECT_TRUE(same_bits(a.dK, b.dK));
  EXPECT_TRUE(same_bits(a.dV, b.dV));
  const AttentionResult f = attention_reference(p, in, false, 3);
  EXPECT_TRUE(same_bits(a.O, f.O));
  EXPECT_TRUE(f.dK.empty());
}

TEST(AttentionReference, BadArgumentsThrow) {
  AttentionProblem p;
  p.B = 1, p.H = 3, p.Hkv = 2, p.Sq = 4, p.Sk = 4, p.d = 8;  // Hkv does not divide H
  const std::vector<float> x(96, 0.0f);
  EXPECT_THROW(attention_reference<float>(p, x.data(), x.data(), x.data(), nullptr, 1), Error);
  p.Hkv = 1;
  EXPECT_THROW(attention_reference<float>(p, x.data(), nullptr, x.data(), nullptr, 1), Error);
}

}  // namespace
}  // namespace detfuse::reference
