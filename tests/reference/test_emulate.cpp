// CPU tests of the exact emulation of the fp32 `fma` engines
// (reference/emulate.h) and of the portable math it shares with the kernels
// (kernels/common/portable_math.h): accuracy of exp/log/tanh against the host
// libm in double, which variants are emulated, the emulation against the
// float64 reference at odd shapes with every option (the tolerances of the GPU
// tests: 1e-5 relative norm for fp32, 2e-2 for bf16 attention, LSE 1e-4), and
// refusals. The GPU's bits against the emulation: tests/reference/test_emulate_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/common/error.h"
#include "kernels/common/host_bf16.h"
#include "kernels/common/portable_math.h"
#include "kernels/flce/rowwise_portable.h"
#include "reference/attention_ref.h"
#include "reference/compare.h"
#include "reference/emulate.h"
#include "reference/emulate_detail.h"
#include "reference/flce_ref.h"
#include "reference/inputs.h"
#include "tests/flce_shape.h"

namespace detfuse {
namespace {

using reference::EmulatedOutput;

// |got - want| in units of the fp32 spacing at want.
// A result that rounds past FLT_MAX must be inf.
double ulps(float got, double want) {
  if (std::isinf(float(want))) return (std::isinf(got) && (got > 0) == (want > 0)) ? 0.0 : 1e30;
  if (std::isinf(got)) return 1e30;
  const double a = std::fabs(want);
  const double spacing =
      a < std::numeric_limits<float>::min() ? std::ldexp(1.0, -149) : std::ldexp(1.0, std::ilogb(a) - 23);
  return std::fabs(double(got) - want) / spacing;
}

TEST(PortableMath, ExpWithinTwoUlps) {
  double worst = 0;
  float at = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float x = float(-104.0 + 193.0 * i / 400000.0);
    const double u = ulps(pm::exp(x), std::exp(double(x)));
    if (u > worst) worst = u, at = x;
  }
  std::printf("  exp: worst %.3f ulp at x = %.9g\n", worst, at);
  EXPECT_LE(worst, 2.0) << "at x = " << at;
  EXPECT_EQ(pm::exp(0.f), 1.f);
  EXPECT_EQ(pm::exp(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_TRUE(std::isinf(pm::exp(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isinf(pm::exp(89.f)));
  EXPECT_EQ(pm::exp(-200.f), 0.f);
  EXPECT_TRUE(std::isnan(pm::exp(std::nanf(""))));
}

TEST(PortableMath, LogWithinTwoUlps) {
  double worst = 0;
  float at = 0;
  for (int i = 0; i <= 400000; ++i) {
    // normal range, log-spaced, plus the neighbourhood of 1
    const float x = float(std::exp(-87.0 + 175.0 * i / 400000.0));
    const float y = float(0.5 + 1.5 * i / 400000.0);
    for (float v : {x, y}) {
      const double u = ulps(pm::log(v), std::log(double(v)));
      if (u > worst) worst = u, at = v;
    }
  }
  for (float v : {1e-40f, 1.4e-45f, 3e-39f}) {  // subnormals
    const double u = ulps(pm::log(v), std::log(double(v)));
    if (u > worst) worst = u, at = v;
  }
  std::printf("  log: worst %.3f ulp at x = %.9g\n", worst, at);
  EXPECT_LE(worst, 2.0) << "at x = " << at;
  EXPECT_EQ(pm::log(1.f), 0.f);
  EXPECT_TRUE(std::isinf(pm::log(0.f)) && pm::log(0.f) < 0);
  EXPECT_TRUE(std::isnan(pm::log(-1.f)));
  EXPECT_TRUE(std::isinf(pm::log(std::numeric_limits<float>::infinity())));
}

TEST(PortableMath, TanhWithinThreeUlps) {
  double worst = 0;
  float at = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float x = float(-12.0 + 24.0 * i / 400000.0);
    const double u = ulps(pm::tanh(x), std::tanh(double(x)));
    if (u > worst) worst = u, at = x;
  }
  for (float x : {1e-30f, -3e-8f, 1e-3f}) {
    const double u = ulps(pm::tanh(x), std::tanh(double(x)));
    if (u > worst) worst = u, at = x;
  }
  std::printf("  tanh: worst %.3f ulp at x = %.9g\n", worst, at);
  EXPECT_LE(worst, 3.0) << "at x = " << at;
  EXPECT_EQ(pm::tanh(0.f), 0.f);
  EXPECT_EQ(pm::tanh(std::numeric_limits<float>::infinity()), 1.f);
  EXPECT_EQ(pm::tanh(-std::numeric_limits<float>::infinity()), -1.f);
}

TEST(PortableMath, MaxIsSymmetricToTheBit) {
  const float pz = 0.f, nz = -0.f;
  uint32_t a, b;
  const float x = pm::max(pz, nz), y = pm::max(nz, pz);
  std::memcpy(&a, &x, 4);
  std::memcpy(&b, &y, 4);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(pm::max(-1.f, 2.f), 2.f);
  EXPECT_EQ(pm::max(2.f, -1.f), 2.f);
}

// The emulation's translation units must not contract a*b+c: this product
// and sum differ from their fma (a*b = 1 - 2^-46 exactly, which rounds to 1).
TEST(PortableMath, SeparateMulAddIsNotAnFma) {
  volatile float a = 1.f + std::ldexp(1.f, -23), b = 1.f - std::ldexp(1.f, -23), c = -1.f;
  EXPECT_EQ(reference::emu::mul_add_probe(a, b, c), 0.f) << "emulate.cpp contracted mul + add into an fma";
  EXPECT_EQ(pm::fma(a, b, c), -std::ldexp(1.f, -46));
}

TEST(Emulate, WhichVariants) {
  using reference::has_emulation;
  EXPECT_TRUE(has_emulation("flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb1024"));
  EXPECT_TRUE(has_emulation("flce.fp32.fma.partials.bm64_bn64_bk8_tm4_tn8_mb1024_sk4_vs8192"));
  EXPECT_TRUE(has_emulation("flce.fp32.fma.partials.bm64_bn64_bk8_tm4_tn8_mb1024_sk0_vs0"));
  EXPECT_FALSE(has_emulation("flce.fp32.fma.atomic.bm128_bn128_bk8_tm8_tn8_mb1024_sk4"));
  EXPECT_FALSE(has_emulation("flce.bf16.mma.owning.bm128_bn128_bk32_wm2_wn4_st4_mb1024"));
  EXPECT_FALSE(has_emulation("flce.bf16.cublaslt.owning.mb1024"));
  EXPECT_TRUE(has_emulation("attention.fp32.fma.owning.br64_bc32_w4_d64"));
  EXPECT_TRUE(has_emulation("attention.fp32.fma.partials.br64_bc64_w8_d128_mb256"));
  EXPECT_TRUE(has_emulation("attention.bf16.fma.owning.br32_bc32_w4_d128"));
  EXPECT_FALSE(has_emulation("attention.fp32.fma.atomic.br64_bc32_w4_d64"));
  EXPECT_FALSE(has_emulation("attention.bf16.wgmma.owning.br128_bc128_d128"));
  for (const char* bad :
       {"", "flce", "flce.fp32.fma.owning", "flce.fp32.fma.owning.bm128_bn128",
        "flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mbx", "flce.fp32.fma.ordered.bm1_bn1_bk8_tm4_tn4_mb1",
        "attention.fp32.fma.owning.br0_bc32_w4_d64", "attention.fp32.fma.owning.br64_bc32_w4_d64_x1"})
    EXPECT_FALSE(has_emulation(bad)) << bad;
}

std::vector<float> as_floats(const EmulatedOutput& o) {
  std::vector<float> v(o.bytes.size() / 4);
  std::memcpy(v.data(), o.bytes.data(), o.bytes.size());
  return v;
}
std::vector<float> as_bf16(const EmulatedOutput& o) {
  std::vector<uint16_t> b(o.bytes.size() / 2);
  std::memcpy(b.data(), o.bytes.data(), o.bytes.size());
  return from_bf16_bits(b);
}

struct FlceCase {
  std::string name;
  FlceProblem p;
  reference::FlceInputOptions opts;
  uint64_t seed;
};

std::vector<FlceCase> flce_cases() {
  std::vector<FlceCase> cs;
  {
    FlceCase c{"all_options_mean", flce_shape(197, 61, 1031, DType::f32), {}, 12};  // mb1: chunks of 192 + 5
    c.p.label_smoothing = 0.1;
    c.p.lse_square_scale = 1e-3;
    c.p.softcap = 15.0;
    c.p.grad_output = 0.7;
    c.opts.ignore_fraction = 0.2;
    cs.push_back(c);
  }
  {
    FlceCase c{"reduction_none", flce_shape(130, 37, 2053, DType::f32), {}, 13};
    c.p.reduction = Reduction::none;
    c.p.ignore_index = -1;
    cs.push_back(c);
  }
  {
    FlceCase c{"reduction_sum_all_ignored", flce_shape(45, 19, 509, DType::f32), {}, 14};
    c.p.reduction = Reduction::sum;
    c.opts.ignore_fraction = 1.0;
    cs.push_back(c);
  }
  {
    FlceCase c{"wide_logits_sum", flce_shape(50, 44, 3001, DType::f32), {}, 18};
    c.p.reduction = Reduction::sum;
    c.opts.logit_std = 300.0;
    cs.push_back(c);
  }
  return cs;
}

void expect_flce_close(const std::vector<EmulatedOutput>& out, const FlceCase& c, const reference::FlceResult& ref) {
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].name, "loss");
  EXPECT_EQ(out[1].name, "lse");
  EXPECT_EQ(out[2].name, "dX");
  EXPECT_EQ(out[3].name, "dW");
  const auto loss = as_floats(out[0]), lse = as_floats(out[1]), dX = as_floats(out[2]), dW = as_floats(out[3]);
  ASSERT_EQ(lse.size(), size_t(c.p.N));
  ASSERT_EQ(dX.size(), size_t(c.p.N * c.p.D));
  ASSERT_EQ(dW.size(), size_t(c.p.V * c.p.D));
  const double el = c.p.reduction == Reduction::none ? reference::rel_norm_error(loss, ref.loss_rows)
                                                     : reference::rel_norm_error(loss, std::vector<double>{ref.loss});
  const double es = reference::rel_norm_error(lse, ref.lse), ex = reference::rel_norm_error(dX, ref.dX),
               ew = reference::rel_norm_error(dW, ref.dW);
  std::printf("  [%s] rel errors: loss %.2e lse %.2e dX %.2e dW %.2e\n", c.name.c_str(), el, es, ex, ew);
  EXPECT_LE(el, 1e-5);
  EXPECT_LE(es, 1e-5);
  EXPECT_LE(ex, 1e-5);
  EXPECT_LE(ew, 1e-5);
  if (ref.n_valid == 0) {
    EXPECT_EQ(loss[0], 0.f);
    for (float x : dX) ASSERT_EQ(x, 0.f);
    for (float x : dW) ASSERT_EQ(x, 0.f);
  }
}

// Registered names, and names with a 1 MiB chunk budget (not registered; the
// emulation takes any well-formed name) so that a small problem runs in
// several chunks: chunk order, the last short chunk, dX split K, partials of
// several row splits, sk0.
const std::vector<std::string>& flce_names() {
  static const std::vector<std::string> n = {
      "flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb1024",
      "flce.fp32.fma.partials.bm128_bn64_bk8_tm8_tn4_mb1024_sk4_vs8192",
      "flce.fp32.fma.owning.bm64_bn64_bk8_tm4_tn8_mb1",
      "flce.fp32.fma.partials.bm64_bn64_bk8_tm4_tn8_mb1_sk3_vs8",
      "flce.fp32.fma.partials.bm64_bn64_bk8_tm4_tn8_mb1_sk0_vs0",
  };
  return n;
}

TEST(EmulateFlce, MatchesFloat64ReferenceAtOddShapesAndEveryOption) {
  for (const auto& c : flce_cases()) {
    const auto in = reference::make_flce_inputs(c.p, c.seed, c.opts);
    const auto ref = reference::flce_reference(c.p, in, /*backward=*/true);
    for (const auto& name : flce_names()) {
      SCOPED_TRACE(c.name + " " + name);
      const auto out = reference::emulate_flce(name, c.p, in);
      expect_flce_close(out, c, ref);
    }
  }
}

TEST(EmulateFlce, SmallBudgetRunsSeveralChunks) {
  const auto n = reference::emu::emulated("flce.fp32.fma.owning.bm64_bn64_bk8_tm4_tn8_mb1");
  ASSERT_TRUE(n.has_value());
  FlceProblem p = flce_shape(130, 37, 2053, DType::f32);  // Vp 2056: 127 rows fit, 64 per chunk
  const auto ch = reference::emu::flce_chunking(p, *n);
  EXPECT_EQ(ch.chunk_rows, 64);
  EXPECT_GT(ch.dx_splits, 1);
}

// Rows own the LSE and the loss: every chunking and dW strategy gives their
// same bits (a config-invariance the GPU variants share).
TEST(EmulateFlce, LossAndLseBitsDoNotDependOnChunkingOrStrategy) {
  const auto c = flce_cases()[0];
  const auto in = reference::make_flce_inputs(c.p, c.seed, c.opts);
  const auto first = reference::emulate_flce(flce_names()[0], c.p, in);
  for (const auto& name : flce_names()) {
    const auto out = reference::emulate_flce(name, c.p, in);
    EXPECT_EQ(out[0].bytes, first[0].bytes) << name;
    EXPECT_EQ(out[1].bytes, first[1].bytes) << name;
  }
}

// A second, naive transcription of the fp32 path (scalar std::fma loops, the
// row pass through rowwise_portable.h) for one chunk, 3 dX splits (V = 600:
// k in [0, 200), [200, 400), [400, 600)) and owning dW: the emulation's
// vectorised loops must give its bits exactly.
TEST(EmulateFlce, EqualsANaiveTranscriptionBitForBit) {
  FlceProblem p = flce_shape(7, 13, 600, DType::f32);
  p.label_smoothing = 0.1;
  p.softcap = 20.0;
  reference::FlceInputOptions opts;
  opts.ignore_fraction = 0.3;
  const auto in = reference::make_flce_inputs(p, 9, opts);
  const std::string name = "flce.fp32.fma.owning.bm64_bn64_bk8_tm4_tn8_mb1024";
  const auto n = reference::emu::emulated(name);
  ASSERT_EQ(reference::emu::flce_chunking(p, *n).dx_splits, 3);
  const int64_t N = p.N, D = p.D, V = p.V;
  namespace pp = flce::portable;
  const pp::RowOptions o{0.1f, 0.f, 20.f, 1.f, float(V)};
  int64_t n_valid = 0;
  for (auto t : in.y) n_valid += t >= 0 && t < V;
  std::vector<float> G(static_cast<size_t>(N * V)), lse(static_cast<size_t>(N)), dX(static_cast<size_t>(N * D)),
      dW(static_cast<size_t>(V * D));
  for (int64_t i = 0; i < N; ++i) {
    std::vector<float> z(static_cast<size_t>(V));
    for (int64_t j = 0; j < V; ++j) {
      float acc = 0.f;
      for (int64_t k = 0; k < D; ++k)
        acc = std::fma(in.X[static_cast<size_t>(i * D + k)], in.W[static_cast<size_t>(j * D + k)], acc);
      acc = acc + 0.f;  // D = 13: the zero-padded slice
      z[static_cast<size_t>(j)] = pm::mul(20.f, pm::tanh(pm::div(acc, 20.f)));
    }
    std::vector<pp::RowStat> st(pp::kRowThreads, pp::row_init());
    for (int64_t j = 0; j < V; ++j)
      pp::row_push(st[static_cast<size_t>((j / 4) % pp::kRowThreads)], z[static_cast<size_t>(j)]);
    for (int stride = pp::kRowThreads / 2; stride > 0; stride /= 2)
      for (int t = 0; t < stride; ++t)
        st[static_cast<size_t>(t)] = pp::row_combine(st[static_cast<size_t>(t)], st[static_cast<size_t>(t + stride)]);
    lse[static_cast<size_t>(i)] = pp::row_lse(st[0]);
    const int64_t t = in.y[static_cast<size_t>(i)];
    const float coef = pp::row_coef(o, t >= 0 && t < V, 0, n_valid, 0.f);
    for (int64_t j = 0; j < V; ++j)
      G[static_cast<size_t>(i * V + j)] =
          coef != 0.f ? pp::row_grad(o, z[static_cast<size_t>(j)], j == t, lse[static_cast<size_t>(i)], coef) : 0.f;
  }
  for (int64_t i = 0; i < N; ++i)
    for (int64_t d = 0; d < D; ++d) {
      float out = 0.f;
      for (int64_t s = 0; s < 3; ++s) {
        float acc = 0.f;
        for (int64_t k = 200 * s; k < 200 * (s + 1); ++k)
          acc = std::fma(G[static_cast<size_t>(i * V + k)], in.W[static_cast<size_t>(k * D + d)], acc);
        out = out + acc;
      }
      dX[static_cast<size_t>(i * D + d)] = out;
    }
  for (int64_t v = 0; v < V; ++v)
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.f;
      for (int64_t i = 0; i < N; ++i)
        acc = std::fma(G[static_cast<size_t>(i * V + v)], in.X[static_cast<size_t>(i * D + d)], acc);
      dW[static_cast<size_t>(v * D + d)] = acc + 0.f;  // N = 7 rows: the zero-padded slice
    }
  const auto out = reference::emulate_flce(name, p, in);
  auto bits_equal = [](const EmulatedOutput& e, const std::vector<float>& want) {
    if (e.bytes.size() != want.size() * 4) return false;
    return std::memcmp(e.bytes.data(), want.data(), e.bytes.size()) == 0;
  };
  EXPECT_TRUE(bits_equal(out[1], lse)) << "lse";
  EXPECT_TRUE(bits_equal(out[2], dX)) << "dX";
  EXPECT_TRUE(bits_equal(out[3], dW)) << "dW";
}

TEST(EmulateFlce, RefusesWhatTheVariantRefuses) {
  FlceProblem p = flce_shape(20, 16, 100, DType::f32);
  const auto in = reference::make_flce_inputs(p, 3);
  auto kind_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << e.what();
      return e.what();
    }
    return "";
  };
  EXPECT_NE(kind_of([&] {
              reference::emulate_flce("flce.fp32.fma.atomic.bm128_bn128_bk8_tm8_tn8_mb1024_sk4", p, in);
            }).find("no CPU emulation"),
            std::string::npos);
  FlceProblem b = p;
  b.dtype = DType::bf16;
  EXPECT_NE(kind_of([&] { reference::emulate_flce(flce_names()[0], b, in); }).find("fp32"), std::string::npos);
  auto bad = in;
  bad.y[3] = 100;
  EXPECT_NE(kind_of([&] { reference::emulate_flce(flce_names()[0], p, bad); }).find("row 3"), std::string::npos);
  EXPECT_NE(kind_of([&] {
              reference::emulate_attention("flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb1024", AttentionProblem{},
                                           reference::AttentionInputs{});
            }).find("no CPU emulation"),
            std::string::npos);
}

struct AttnCase {
  std::string name;
  int64_t B, H, Hkv, Sq, Sk;
  bool causal;
  double softcap;
  int64_t window;
  uint64_t seed;
};

AttentionProblem attn_problem(const AttnCase& c, int64_t d, DType t) {
  AttentionProblem p;
  p.B = c.B;
  p.H = c.H;
  p.Hkv = c.Hkv;
  p.Sq = c.Sq;
  p.Sk = c.Sk;
  p.d = d;
  p.causal = c.causal;
  p.dtype = t;
  p.softcap = c.softcap;
  p.window = c.window;
  return p;
}

TEST(EmulateAttention, MatchesFloat64ReferenceAtOddShapesAndEveryOption) {
  const std::vector<AttnCase> cases = {
      {"square_odd", 1, 2, 2, 77, 77, false, 0.0, 0, 21},
      {"causal_sq_gt_sk_empty_rows", 1, 2, 1, 100, 37, true, 0.0, 0, 22},
      {"causal_gqa_sq_lt_sk", 2, 4, 2, 45, 131, true, 0.0, 0, 23},
      {"softcap", 1, 2, 2, 77, 90, false, 5.0, 0, 26},
      {"window_sq_lt_sk", 1, 4, 2, 70, 200, false, 0.0, 50, 27},
      {"softcap_window_causal_gqa", 1, 4, 2, 99, 99, true, 3.0, 33, 30},
  };
  const std::vector<std::string> names = {
      "attention.fp32.fma.owning.br64_bc32_w4_d64",  "attention.fp32.fma.partials.br32_bc32_w4_d64_mb256",
      "attention.fp32.fma.owning.br64_bc64_w8_d128", "attention.fp32.fma.partials.br64_bc64_w8_d128_mb1",
      "attention.bf16.fma.owning.br32_bc32_w4_d64",  "attention.bf16.fma.partials.br64_bc32_w4_d128_mb256"};
  for (const auto& c : cases) {
    for (const auto& name : names) {
      const auto n = reference::emu::emulated(name);
      ASSERT_TRUE(n.has_value()) << name;
      const DType t = n->dtype == "bf16" ? DType::bf16 : DType::f32;
      const AttentionProblem p = attn_problem(c, n->params.at("d"), t);
      SCOPED_TRACE(c.name + " " + name);
      const auto in = reference::make_attention_inputs(p, c.seed);
      const auto ref = reference::attention_reference(p, in, /*backward=*/true);
      const auto out = reference::emulate_attention(name, p, in);
      ASSERT_EQ(out.size(), 5u);
      const char* want[] = {"O", "lse", "dQ", "dK", "dV"};
      for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i].name, want[i]);
      auto get = [&](int i) { return i == 1 || t == DType::f32 ? as_floats(out[i]) : as_bf16(out[i]); };
      const double tol = t == DType::f32 ? 1e-5 : 2e-2;
      const auto O = get(0), lse = get(1), dQ = get(2), dK = get(3), dV = get(4);
      ASSERT_EQ(O.size(), ref.O.size());
      ASSERT_EQ(lse.size(), ref.lse.size());
      ASSERT_EQ(dK.size(), ref.dK.size());
      const double eo = reference::rel_norm_error(O, ref.O), el = reference::rel_norm_error(lse, ref.lse),
                   eq = reference::rel_norm_error(dQ, ref.dQ), ek = reference::rel_norm_error(dK, ref.dK),
                   ev = reference::rel_norm_error(dV, ref.dV);
      std::printf("  [%s %s] rel errors: O %.2e lse %.2e dQ %.2e dK %.2e dV %.2e\n", c.name.c_str(), name.c_str(), eo,
                  el, eq, ek, ev);
      EXPECT_LE(eo, tol);
      EXPECT_LE(el, 1e-4);
      EXPECT_LE(eq, tol);
      EXPECT_LE(ek, tol);
      EXPECT_LE(ev, tol);
      for (size_t row = 0; row < lse.size(); ++row)
        if (std::isinf(ref.lse[row])) {
          EXPECT_TRUE(std::isinf(lse[row]) && lse[row] < 0) << "row " << row;
          for (int64_t k = 0; k < p.d; ++k) ASSERT_EQ(O[row * p.d + k], 0.f);
        }
    }
  }
}

// owning and partials differ only in how dQ is summed: O, LSE, dK, dV agree to the bit.
TEST(EmulateAttention, OwningAndPartialsShareEverythingButDq) {
  AttentionProblem p = attn_problem({"x", 1, 4, 2, 70, 90, true, 0.0, 0, 5}, 64, DType::f32);
  const auto in = reference::make_attention_inputs(p, 5);
  const auto a = reference::emulate_attention("attention.fp32.fma.owning.br64_bc32_w4_d64", p, in);
  const auto b = reference::emulate_attention("attention.fp32.fma.partials.br64_bc32_w4_d64_mb256", p, in);
  for (int i : {0, 1, 3, 4}) EXPECT_EQ(a[i].bytes, b[i].bytes) << a[i].name;
}

TEST(EmulateAttention, RefusesWhatTheVariantRefuses) {
  AttentionProblem p = attn_problem({"x", 1, 2, 2, 10, 10, false, 0.0, 0, 5}, 64, DType::f32);
  const auto in = reference::make_attention_inputs(p, 5);
  EXPECT_THROW(reference::emulate_attention("attention.fp32.fma.owning.br64_bc32_w4_d128", p, in), Error);
  EXPECT_THROW(reference::emulate_attention("attention.bf16.fma.owning.br64_bc32_w4_d64", p, in), Error);
  EXPECT_THROW(reference::emulate_attention("attention.fp32.fma.atomic.br64_bc32_w4_d64", p, in), Error);
  AttentionProblem big = attn_problem({"x", 1, 8, 1, 5000, 10, false, 0.0, 0, 5}, 64, DType::f32);  // 10 MB partial
  EXPECT_THROW(reference::emulate_attention("attention.fp32.fma.partials.br64_bc32_w4_d64_mb1", big,
                                            reference::AttentionInputs{}),
               Error);
}

}  // namespace
}  // namespace detfuse
