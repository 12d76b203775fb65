#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "kernels/common/host_bf16.h"
#include "reference/inputs.h"
#include "tests/flce_shape.h"

namespace detfuse::reference {
namespace {

template <class T>
uint64_t fnv1a(const std::vector<T>& v, uint64_t h = 1469598103934665603ull) {
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

uint64_t digest(const FlceInputs& in) { return fnv1a(in.dloss, fnv1a(in.y, fnv1a(in.W, fnv1a(in.X)))); }

TEST(Inputs, SameSeedSameBytes) {
  const FlceProblem p = flce_shape(300, 40, 70);
  const FlceInputs a = make_flce_inputs(p, 7), b = make_flce_inputs(p, 7);
  ASSERT_EQ(a.X.size(), size_t(300 * 40));
  EXPECT_EQ(0, std::memcmp(a.X.data(), b.X.data(), a.X.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.W.data(), b.W.data(), a.W.size() * 4));
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(0, std::memcmp(a.dloss.data(), b.dloss.data(), a.dloss.size() * 4));

  AttentionProblem q;
  q.B = 2, q.H = 4, q.Hkv = 2, q.Sq = 9, q.Sk = 13, q.d = 16;
  const AttentionInputs c = make_attention_inputs(q, 3), d = make_attention_inputs(q, 3);
  EXPECT_EQ(c.Q, d.Q);
  EXPECT_EQ(c.K, d.K);
  EXPECT_EQ(c.V, d.V);
  EXPECT_EQ(c.dO, d.dO);
  EXPECT_EQ(c.Q.size(), size_t(2 * 4 * 9 * 16));
  EXPECT_EQ(c.K.size(), size_t(2 * 2 * 13 * 16));
}

TEST(Inputs, DifferentSeedsDiffer) {
  const FlceProblem p = flce_shape(200, 32, 50, DType::f32);
  const FlceInputs a = make_flce_inputs(p, 1), b = make_flce_inputs(p, 2);
  size_t same = 0;
  for (size_t i = 0; i < a.X.size(); ++i) same += a.X[i] == b.X[i];
  EXPECT_LT(same, a.X.size() / 100);
  EXPECT_NE(a.W, b.W);
  EXPECT_NE(a.y, b.y);
  EXPECT_NE(a.dloss, b.dloss);
  // Tensors of one seed are independent streams: X and W do not coincide.
  EXPECT_NE(std::vector<float>(a.X.begin(), a.X.begin() + 100), std::vector<float>(a.W.begin(), a.W.begin() + 100));
}

TEST(Inputs, TensorsDoNotDependOnOtherShapes) {  // W is the same whatever N is
  const FlceInputs a = make_flce_inputs(flce_shape(10, 16, 30), 5), b = make_flce_inputs(flce_shape(20, 16, 30), 5);
  EXPECT_EQ(a.W, b.W);
  EXPECT_EQ(std::vector<float>(b.X.begin(), b.X.begin() + 160), a.X);
}

TEST(Inputs, Bf16ValuesAreExactlyRepresentable) {
  const FlceInputs a = make_flce_inputs(flce_shape(64, 48, 100), 11);
  for (float v : a.X) ASSERT_EQ(v, round_to_bf16(v));
  for (float v : a.W) ASSERT_EQ(v, round_to_bf16(v));
  AttentionProblem q;
  q.B = 1, q.H = 2, q.Hkv = 1, q.Sq = 8, q.Sk = 8, q.d = 32;
  const AttentionInputs c = make_attention_inputs(q, 1);
  for (const auto* t : {&c.Q, &c.K, &c.V, &c.dO})
    for (float v : *t) ASSERT_EQ(v, round_to_bf16(v));
  // fp32 problems keep the full float values.
  const FlceInputs f = make_flce_inputs(flce_shape(64, 48, 100, DType::f32), 11);
  size_t exact = 0;
  for (float v : f.X) exact += v == round_to_bf16(v);
  EXPECT_LT(exact, f.X.size() / 50);
}

TEST(Inputs, TargetsIgnoreFractionAndDloss) {
  FlceProblem p = flce_shape(4000, 8, 37);
  p.ignore_index = -100;
  FlceInputOptions o;
  o.ignore_fraction = 0.1;
  const FlceInputs a = make_flce_inputs(p, 9, o);
  int64_t ignored = 0;
  std::vector<int64_t> hist(size_t(p.V), 0);
  for (int64_t t : a.y) {
    if (t == p.ignore_index) {
      ++ignored;
      continue;
    }
    ASSERT_GE(t, 0);
    ASSERT_LT(t, p.V);
    ++hist[size_t(t)];
  }
  EXPECT_GT(ignored, 300);
  EXPECT_LT(ignored, 500);
  for (int64_t h : hist) EXPECT_GT(h, 40);  // ~97 expected per class
  for (float v : a.dloss) {
    ASSERT_GE(v, 0.5f);
    ASSERT_LE(v, 1.5f);
  }
  o.ignore_fraction = 0.0;
  for (int64_t t : make_flce_inputs(p, 9, o).y) ASSERT_NE(t, p.ignore_index);
}

TEST(Inputs, LogitStandardDeviation) {
  for (double want : {0.5, 2.0, 6.0}) {
    const FlceProblem p = flce_shape(128, 256, 128);
    FlceInputOptions o;
    o.logit_std = want;
    const FlceInputs a = make_flce_inputs(p, 21, o);
    double s2 = 0.0;
    for (int64_t i = 0; i < p.N; ++i)
      for (int64_t j = 0; j < p.V; ++j) {
        double z = 0.0;
        for (int64_t k = 0; k < p.D; ++k) z += double(a.X[size_t(i * p.D + k)]) * double(a.W[size_t(j * p.D + k)]);
        s2 += z * z;
      }
    const double sd = std::sqrt(s2 / double(p.N * p.V));
    EXPECT_NEAR(sd, want, 0.1 * want) << "logit_std " << want;
  }
}

TEST(Inputs, LogitOffsetGivesLargeLogits) {
  const FlceProblem p = flce_shape(16, 32, 20);
  FlceInputOptions o;
  o.logit_offset = 1e4;
  const FlceInputs a = make_flce_inputs(p, 4, o);
  int pos = 0, neg = 0;
  for (int64_t i = 0; i < p.N; ++i) {
    double z = 0.0;
    for (int64_t k = 0; k < p.D; ++k) z += double(a.X[size_t(i * p.D + k)]) * double(a.W[size_t(k)]);
    EXPECT_GT(std::fabs(z), 9900.0);
    EXPECT_LT(std::fabs(z), 10100.0);
    (z > 0 ? pos : neg)++;
  }
  EXPECT_GT(pos, 0);
  EXPECT_GT(neg, 0);
}

TEST(Inputs, NormalGeneratorMatchesLibmBoxMuller) {
  // The hand-written log/cos agree with libm to ~1e-15: the distribution is right.
  const uint64_t key = stream_key(123, 1);
  double sum = 0.0, sum2 = 0.0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    const double u1 = double((splitmix64_at(key, 2 * uint64_t(i)) >> 11) + 1) * 0x1p-53;
    const double u2 = double(splitmix64_at(key, 2 * uint64_t(i) + 1) >> 11) * 0x1p-53;
    const double want = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    const double got = normal_at(key, uint64_t(i));
    ASSERT_NEAR(got, want, 1e-13 * (1.0 + std::fabs(want))) << i;
    sum += got;
    sum2 += got * got;
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.01);
  EXPECT_NEAR(sum2 / kN, 1.0, 0.01);
}

TEST(Inputs, GoldenBytes) {
  // Pinned on x86-64 / glibc / GCC; the generator uses only correctly rounded
  // operations, so every machine must produce these bytes.
  const FlceInputs a = make_flce_inputs(flce_shape(5, 6, 7), 42);
  const FlceInputs b = make_flce_inputs(flce_shape(5, 6, 7, DType::f32), 42);
  EXPECT_EQ(digest(a), 0x18c4932d498682eaull) << std::hex << digest(a);
  EXPECT_EQ(digest(b), 0x83183b18711c9ec5ull) << std::hex << digest(b);
}

}  // namespace
}  // namespace detfuse::reference
