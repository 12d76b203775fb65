// GPU tests, one suite instance per registered FLCE variant (named by its
// canonical name), against the float64 reference on the same rounded inputs:
// N = 1, prime V, D not a multiple of any tile, ignored rows, an all-ignored
// batch, large-magnitude logits, every option, every mode, several chunks.
// Determinism: dX, loss and LSE must repeat bitwise for every variant; dW for
// every variant that promises it; the distinct dW digests of `atomic` variants
// are reported, not hidden.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/flce/device_case.h"
#include "kernels/flce/flce.h"
#include "kernels/registry.h"
#include "reference/compare.h"
#include "reference/flce_ref.h"
#include "reference/inputs.h"
#include "tests/flce_shape.h"
#include "tests/gpu_test.h"

namespace detfuse {
namespace {

using reference::FlceInputOptions;
using reference::FlceInputs;
using reference::FlceResult;

struct Case {
  std::string name;
  FlceProblem p;
  FlceInputOptions opts;
  uint64_t seed = 1;
  std::vector<int64_t> targets;  // when set: y[i] = targets[i] for the first rows (the rest as drawn)
};

// The cases every variant runs (dtype set per variant).
std::vector<Case> cases() {
  std::vector<Case> cs;
  {
    Case c{"single_row_prime_V", flce_shape(1, 64, 1009), {}, 11};
    c.opts.ignore_fraction = 0.0;
    cs.push_back(c);
  }
  {
    Case c{"all_options_mean", flce_shape(301, 200, 4099), {}, 12};  // D=200: no tile multiple
    c.p.label_smoothing = 0.1;
    c.p.lse_square_scale = 1e-3;
    c.p.softcap = 15.0;
    c.p.grad_output = 0.7;
    c.opts.ignore_fraction = 0.2;
    cs.push_back(c);
  }
  {
    Case c{"reduction_none", flce_shape(130, 136, 2053), {}, 13};
    c.p.reduction = Reduction::none;
    c.p.ignore_index = -1;
    cs.push_back(c);
  }
  {
    Case c{"reduction_sum_all_ignored", flce_shape(77, 64, 1031), {}, 14};
    c.p.reduction = Reduction::sum;
    c.opts.ignore_fraction = 1.0;
    cs.push_back(c);
  }
  {
    Case c{"mean_all_ignored", flce_shape(64, 64, 512), {}, 15};
    c.opts.ignore_fraction = 1.0;
    cs.push_back(c);
  }
  {
    // Logits spread over about +-1e3: large magnitudes, well conditioned.
    Case c{"wide_logits", flce_shape(96, 128, 3001), {}, 18};
    c.opts.logit_std = 300.0;
    cs.push_back(c);
  }
  {
    // Logits near +-1e4 through a common offset (x_i0 = +-1, w_j0 = 1e4).
    Case c{"large_logits", flce_shape(96, 128, 3001), {}, 16};
    c.opts.logit_offset = 1e4;
    cs.push_back(c);
  }
  {
    // V*4 bytes per row = 800 KB: every chunk budget (512..1920 MiB) gives
    // several chunks over 2600 rows, so chunk order and the last partial
    // chunk are exercised.
    Case c{"several_chunks", flce_shape(2600, 64, 200003), {}, 17};
    c.p.label_smoothing = 0.05;
    cs.push_back(c);
  }
  {
    // Every option but softcap, reduction sum, targets placed at the edges of
    // 8-column groups and of 128- and 256-column tiles, and three in the last
    // group, which V (2051 = 8 * 256 + 3) cuts short: the ex16 row pass forms
    // these groups apart from the common ones (kernels/flce/README.md, session 11).
    Case c{"zloss_smoothing_sum_edge_targets", flce_shape(40, 96, 2051), {}, 19};
    c.p.reduction = Reduction::sum;
    c.p.label_smoothing = 0.1;
    c.p.lse_square_scale = 1e-3;
    c.p.grad_output = 0.7;
    c.opts.ignore_fraction = 0.1;
    c.targets = {0, 7, 8, 127, 128, 255, 256, 1023, 1024, 2040, 2047, 2048, 2049, 2050, c.p.ignore_index, 2050, 5};
    cs.push_back(c);
  }
  return cs;
}

// Reference results, computed once per (case, dtype) and shared by variants.
struct Expected {
  FlceInputs in;
  FlceResult ref;
};
const Expected& expected(const Case& c) {
  static std::map<std::string, std::unique_ptr<Expected>> cache;
  std::string key = c.name + ":" + c.p.key();
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  auto e = std::make_unique<Expected>();
  e->in = reference::make_flce_inputs(c.p, c.seed, c.opts);
  for (size_t i = 0; i < c.targets.size() && i < e->in.y.size(); ++i) e->in.y[i] = c.targets[i];
  e->ref = reference::flce_reference(c.p, e->in, /*backward=*/true);
  return *cache.emplace(key, std::move(e)).first->second;
}

struct Tol {
  double grad, loss;
};
Tol tolerance(const Case& c) {
  // The family's bounds: relative norm error <= 1e-5 (fp32), 1e-2 (bf16; loss 1e-4).
  Tol t = c.p.dtype == DType::f32 ? Tol{1e-5, 1e-5} : Tol{1e-2, 1e-4};
  // With a common logit offset of size |z|, fp32 logits carry an absolute
  // error of order eps_fp32 * |z| (inputs are exact; the accumulation is not),
  // which every softmax-derived output inherits: 1e4 * 2^-24 = 6e-4. No fp32
  // kernel can do better than a small multiple of that; 8x is allowed.
  const double cond = 8.0 * std::ldexp(1.0, -24) * c.opts.logit_offset;
  t.grad = std::max(t.grad, cond);
  t.loss = std::max(t.loss, cond);
  return t;
}

// dX without column 0. With the common offset, W's column 0 is the constant
// 1e4, and the exact dX_i0 = 1e4 * sum_j G_ij = 0 (each gradient row sums to
// zero); a rounded G (bf16, or fp32) cannot cancel exactly, so column 0 holds
// rounding noise times 1e4. It is checked to be finite, not compared.
template <class T>
std::vector<T> without_column0(const std::vector<T>& m, int64_t cols) {
  std::vector<T> out;
  out.reserve(m.size());
  for (size_t i = 0; i < m.size(); ++i)
    if (int64_t(i) % cols != 0) out.push_back(m[i]);
  return out;
}

void expect_all_finite(const std::vector<float>& v, const char* what) {
  size_t bad = 0;
  for (float x : v) bad += !std::isfinite(x);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " non-finite values (unwritten or NaN)";
}

double loss_error(const std::vector<float>& got, const FlceResult& ref, const FlceProblem& p) {
  if (p.reduction == Reduction::none) return reference::rel_norm_error(got, ref.loss_rows);
  return reference::rel_norm_error(got, std::vector<double>{ref.loss});
}

class FlceVariantTest : public ::testing::TestWithParam<std::string> {
 protected:
  const FlceVariant& variant() const { return *builtin_registry().find_flce(GetParam()); }
  DeviceInfo device() const { return query_device(0); }
};

TEST_P(FlceVariantTest, MatchesReferenceInEveryMode) {
  DETFUSE_REQUIRE_GPU();
  const FlceVariant& v = variant();
  const DeviceInfo dev = device();
  int ran = 0;
  for (Case c : cases()) {
    c.p.dtype = v.desc.dtype;
    std::vector<DType> grad_types = {DType::f32};
    if (v.desc.dtype == DType::bf16 && c.name == "all_options_mean") grad_types.push_back(DType::bf16);
    for (DType gt : grad_types) {
      c.p.grad_dtype = gt;
      SCOPED_TRACE(c.name + " " + c.p.key());
      if (auto why = v.can_run(c.p, FlceMode::forward_backward, dev)) {
        std::printf("  [%s] skipped by can_run: %s\n", c.name.c_str(), why->c_str());
        continue;
      }
      const Expected& e = expected(c);
      const Tol tol = tolerance(c);
      // bf16 gradients are rounded once more on output.
      const double gtol = gt == DType::bf16 ? std::max(tol.grad, 1e-2) : tol.grad;
      flce::DeviceCase dc(c.p, e.in.X, e.in.W, e.in.y, e.in.dloss);

      // forward_backward
      dc.poison();
      flce::run(v, c.p, FlceMode::forward_backward, dc.args(FlceMode::forward_backward));
      DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
      auto loss = dc.loss(), lse = dc.lse(), dX = dc.dX(), dW = dc.dW();
      expect_all_finite(loss, "loss");
      expect_all_finite(lse, "lse");
      expect_all_finite(dX, "dX");
      expect_all_finite(dW, "dW");
      double el = loss_error(loss, e.ref, c.p), es = reference::rel_norm_error(lse, e.ref.lse),
             ex = c.opts.logit_offset != 0
                      ? reference::rel_norm_error(without_column0(dX, c.p.D), without_column0(e.ref.dX, c.p.D))
                      : reference::rel_norm_error(dX, e.ref.dX),
             ew = reference::rel_norm_error(dW, e.ref.dW);
      std::printf("  [%s grad=%s] rel errors: loss %.2e lse %.2e dX %.2e dW %.2e\n", c.name.c_str(),
                  to_string(gt), el, es, ex, ew);
      EXPECT_LE(el, tol.loss);
      EXPECT_LE(es, tol.loss);
      EXPECT_LE(ex, gtol);
      EXPECT_LE(ew, gtol);
      if (e.ref.n_valid == 0) {
        EXPECT_EQ(loss[0], 0.f);
        for (float x : dX) ASSERT_EQ(x, 0.f);
        for (float x : dW) ASSERT_EQ(x, 0.f);
      }

      // forward only: same loss and LSE bits as forward_backward.
      auto fb_digests = dc.digests(FlceMode::forward_backward);
      dc.poison();
      flce::run(v, c.p, FlceMode::forward, dc.args(FlceMode::forward));
      DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
      auto fwd_digests = dc.digests(FlceMode::forward);
      EXPECT_EQ(fwd_digests.loss, fb_digests.loss) << "forward loss differs from forward_backward";
      EXPECT_EQ(fwd_digests.lse, fb_digests.lse) << "forward LSE differs from forward_backward";

      // backward from the saved LSE: same gradient bits as forward_backward.
      auto saved = dc.lse();
      dc.poison();
      dc.set_lse(saved);
      flce::run(v, c.p, FlceMode::backward, dc.args(FlceMode::backward));
      DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
      auto bwd_digests = dc.digests(FlceMode::backward);
      EXPECT_EQ(bwd_digests.dX, fb_digests.dX) << "backward dX differs from forward_backward";
      if (v.desc.deterministic) EXPECT_EQ(bwd_digests.dW, fb_digests.dW) << "backward dW differs";
      else EXPECT_LE(reference::rel_norm_error(dc.dW(), e.ref.dW), gtol);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << "the variant could run none of the cases";
}

TEST_P(FlceVariantTest, RepeatsBitwise) {
  DETFUSE_REQUIRE_GPU();
  const FlceVariant& v = variant();
  Case c{"determinism", flce_shape(1500, 256, 32003), {}, 21};
  c.p.dtype = v.desc.dtype;
  ASSERT_FALSE(v.can_run(c.p, FlceMode::forward_backward, device()).has_value());
  auto in = reference::make_flce_inputs(c.p, c.seed, c.opts);
  flce::DeviceCase dc(c.p, in.X, in.W, in.y, in.dloss);
  const int K = 5;
  std::set<Digest> loss, lse, dX, dW;
  for (int k = 0; k < K; ++k) {
    dc.poison();
    flce::run(v, c.p, FlceMode::forward_backward, dc.args(FlceMode::forward_backward));
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    auto d = dc.digests(FlceMode::forward_backward);
    loss.insert(d.loss);
    lse.insert(d.lse);
    dX.insert(d.dX);
    dW.insert(d.dW);
  }
  std::printf("  %d repeats: distinct digests loss %zu lse %zu dX %zu dW %zu (%s)\n", K, loss.size(), lse.size(),
              dX.size(), dW.size(), v.desc.deterministic ? "deterministic by design" : "atomic");
  RecordProperty("distinct_dW_digests", int(dW.size()));
  EXPECT_EQ(loss.size(), 1u);
  EXPECT_EQ(lse.size(), 1u);
  EXPECT_EQ(dX.size(), 1u) << "dX is owned by rows and must be bitwise deterministic";
  if (v.desc.deterministic) EXPECT_EQ(dW.size(), 1u);
}

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const auto& v : builtin_registry().flce()) names.push_back(v.desc.name);
  return names;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Registry, FlceVariantTest, ::testing::ValuesIn(variant_names()), test_name);

// The ex16 row pass (row_kernel_exp16) of the default hybrid variant at a size
// compute-sanitizer runs in seconds (memcheck, racecheck, synccheck:
// experiments/device/s11-flcerow.sh): softcap off (the common groups, the
// target's group, the tail group of V = 1031) and on (the per-column path),
// against the float64 reference.
TEST(FlceEx16RowPass, SanitizerSized) {
  DETFUSE_REQUIRE_GPU();
  const FlceVariant* v = builtin_registry().find_flce(flce::kHybridDefault);
  if (!v) GTEST_SKIP() << "built without the wgmma engine";
  for (double cap : {0.0, 20.0}) {
    Case c{cap > 0 ? "ex16_sanitizer_sized_softcap" : "ex16_sanitizer_sized", flce_shape(24, 64, 1031), {}, 23};
    c.p.label_smoothing = 0.1;
    c.p.lse_square_scale = 1e-3;
    c.p.softcap = cap;
    c.targets = {0, 1023, 1024, 1030, c.p.ignore_index, 127, 128, 7, 8};
    if (auto why = v->can_run(c.p, FlceMode::forward_backward, query_device(0))) GTEST_SKIP() << *why;
    SCOPED_TRACE(c.name);
    const Expected& e = expected(c);
    const Tol tol = tolerance(c);
    flce::DeviceCase dc(c.p, e.in.X, e.in.W, e.in.y, e.in.dloss);
    dc.poison();
    flce::run(*v, c.p, FlceMode::forward_backward, dc.args(FlceMode::forward_backward));
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto dX = dc.dX(), dW = dc.dW();
    expect_all_finite(dX, "dX");
    expect_all_finite(dW, "dW");
    EXPECT_LE(loss_error(dc.loss(), e.ref, c.p), tol.loss);
    EXPECT_LE(reference::rel_norm_error(dX, e.ref.dX), tol.grad);
    EXPECT_LE(reference::rel_norm_error(dW, e.ref.dW), tol.grad);
  }
}

// ----------------------------------------------------------------- bad input
class FlceBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device available (" << why << ")";
    p = flce_shape(40, 64, 97);
    in = reference::make_flce_inputs(p, 5);
  }
  FlceProblem p;
  FlceInputs in;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << e.what();
    return e.what();
  }
  return "";
}

// The error every entry point gives for y with row 7 = `value` at V = 97.
std::string bad_target_message(const FlceProblem& p, int64_t value) {
  return "y: 1 target(s) outside [0, " + std::to_string(p.V) + ") that are not ignore_index=" +
         std::to_string(p.ignore_index) + "; first at row 7 (value " + std::to_string(value) + ")";
}

// validate_call launches nothing else: outputs untouched. run() (and the
// heuristic entry points) defer the check to after the launches (issue 17):
// the same error, outputs unspecified (not checked here).
TEST_F(FlceBadInput, OutOfRangeTargetIsNamed) {
  auto y = in.y;
  y[7] = p.V;  // one past the end, not ignore_index
  flce::DeviceCase dc(p, in.X, in.W, y, in.dloss);
  dc.poison();
  auto before = dc.digests(FlceMode::forward_backward);
  EXPECT_EQ(error_of([&] { flce::validate_call(p, FlceMode::forward_backward, dc.args(FlceMode::forward_backward)); }),
            bad_target_message(p, p.V));
  auto after = dc.digests(FlceMode::forward_backward);
  EXPECT_EQ(before.dW, after.dW);
  EXPECT_EQ(before.dX, after.dX);
  EXPECT_EQ(before.loss, after.loss);
  EXPECT_EQ(error_of([&] { flce::forward_backward(p, dc.args(FlceMode::forward_backward)); }),
            bad_target_message(p, p.V));
  y[7] = -5;  // negative but not ignore_index (-100)
  flce::DeviceCase dc2(p, in.X, in.W, y, in.dloss);
  EXPECT_EQ(error_of([&] { flce::forward(p, dc2.args(FlceMode::forward)); }), bad_target_message(p, -5));
  EXPECT_EQ(flce::count_bad_targets(p, dc2.args(FlceMode::forward).y), 1);
}

// One variant of every code path a target meets (dtype, engine, strategy and
// the epilogue / row-pass switches ex, lg, ot, pp; sizes aside).
std::vector<const FlceVariant*> one_per_path() {
  std::map<std::string, const FlceVariant*> by;
  for (const auto& v : builtin_registry().flce()) {
    std::string key = std::string(to_string(v.desc.dtype)) + "." + v.desc.engine + "." + v.desc.strategy;
    for (const auto& [k, val] : v.desc.params)
      key += "." + k + (k == "ex" || k == "lg" || k == "ot" || k == "pp" ? std::to_string(val) : "");
    by.emplace(key, &v);
  }
  std::vector<const FlceVariant*> out;
  for (const auto& [k, v] : by) out.push_back(v);
  return out;
}

// The deferred target check (issue 17) at a size compute-sanitizer runs in
// seconds (memcheck: experiments/device/s12-flcehost.sh): every code path runs
// the whole computation over targets far outside [0, V) (V, 2^40, INT64_MAX,
// -5, INT64_MIN; the first and the last row among them) in every mode, and
// must throw the same error as validate_call, touch nothing out of bounds
// (the sanitizer's part) and leave the thread's next call exact: a good call
// after the bad ones gives the bits it gave before them. Outputs of the bad
// calls are not checked (unspecified).
TEST(FlceBadTargets, DeferredCheckEveryPathSanitizerSized) {
  DETFUSE_REQUIRE_GPU();
  const DeviceInfo dev = query_device(0);
  int ran = 0;
  for (const FlceVariant* v : one_per_path()) {
    FlceProblem p = flce_shape(40, 64, 97);
    p.dtype = v->desc.dtype;
    p.label_smoothing = 0.1;
    if (v->can_run(p, FlceMode::forward_backward, dev)) continue;
    SCOPED_TRACE(v->desc.name);
    const auto in = reference::make_flce_inputs(p, 7);
    auto y = in.y;
    y[0] = int64_t(1) << 40;
    y[7] = p.V;
    y[20] = INT64_MAX;
    y[30] = -5;
    y[39] = INT64_MIN;
    flce::DeviceCase good(p, in.X, in.W, in.y, in.dloss), bad(p, in.X, in.W, y, in.dloss);
    good.poison();
    flce::run(*v, p, FlceMode::forward_backward, good.args(FlceMode::forward_backward));
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ref = good.digests(FlceMode::forward_backward);
    const std::string want = "y: 5 target(s) outside [0, 97) that are not ignore_index=" +
                             std::to_string(p.ignore_index) + "; first at row 0 (value " +
                             std::to_string(int64_t(1) << 40) + ")";
    const FlceArgs bad_fb = bad.args(FlceMode::forward_backward);
    EXPECT_EQ(error_of([&] { flce::validate_call(p, FlceMode::forward_backward, bad_fb); }), want);
    bad.set_lse(std::vector<float>(size_t(p.N), 4.f));
    for (FlceMode m : {FlceMode::forward_backward, FlceMode::forward, FlceMode::backward}) {
      EXPECT_EQ(error_of([&] { flce::run(*v, p, m, bad.args(m)); }), want) << to_string(m);
      DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    }
    good.poison();
    flce::run(*v, p, FlceMode::forward_backward, good.args(FlceMode::forward_backward));
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto again = good.digests(FlceMode::forward_backward);
    EXPECT_EQ(again.loss, ref.loss);
    EXPECT_EQ(again.lse, ref.lse);
    EXPECT_EQ(again.dX, ref.dX);
    if (v->desc.deterministic) EXPECT_EQ(again.dW, ref.dW);
    ++ran;
  }
  std::printf("  deferred target check: %d code paths\n", ran);
  EXPECT_GT(ran, 0);
}

// A bad target keeps its precedence over a variant's refusal (it was checked
// first when the check synchronised): D = 63 is refused by the tensor-core
// variants, the error still names y.
TEST_F(FlceBadInput, BadTargetBeforeRefusal) {
  FlceProblem odd = p;
  odd.D = 63;
  auto in2 = reference::make_flce_inputs(odd, 6);
  in2.y[7] = odd.V;
  flce::DeviceCase dc(odd, in2.X, in2.W, in2.y, in2.dloss);
  const FlceVariant* refusing = nullptr;
  for (const auto& v : builtin_registry().flce())
    if (!refusing && v.desc.dtype == DType::bf16 && v.can_run(odd, FlceMode::forward, query_device(0))) refusing = &v;
  ASSERT_NE(refusing, nullptr) << "no bf16 variant refuses D = 63";
  EXPECT_EQ(error_of([&] { flce::run(*refusing, odd, FlceMode::forward, dc.args(FlceMode::forward)); }),
            bad_target_message(odd, odd.V));
}

TEST_F(FlceBadInput, NullPointersAndBadProblemsAreNamed) {
  flce::DeviceCase dc(p, in.X, in.W, in.y, in.dloss);
  FlceArgs a = dc.args(FlceMode::forward_backward);
  a.dW = nullptr;
  EXPECT_EQ(error_of([&] { flce::forward_backward(p, a); }).rfind("dW: null pointer", 0), 0u);
  a = dc.args(FlceMode::backward);
  a.lse_in = nullptr;
  EXPECT_EQ(error_of([&] { flce::backward(p, a); }).rfind("lse_in: null pointer", 0), 0u);
  FlceProblem bad = p;
  bad.label_smoothing = 2;
  EXPECT_EQ(error_of([&] { flce::forward(bad, dc.args(FlceMode::forward)); }).rfind("label_smoothing", 0), 0u);
  FlceProblem none = p;
  none.reduction = Reduction::none;
  flce::DeviceCase dn(none, in.X, in.W, in.y, in.dloss);
  a = dn.args(FlceMode::forward_backward);
  a.dloss = nullptr;
  EXPECT_EQ(error_of([&] { flce::forward_backward(none, a); }).rfind("dloss: null pointer", 0), 0u);
}

TEST_F(FlceBadInput, VariantRefusalIsAnError) {
  FlceProblem odd = p;
  odd.D = 63;  // not a multiple of 8: bf16 tensor-core variants refuse
  auto in2 = reference::make_flce_inputs(odd, 6);
  flce::DeviceCase dc(odd, in2.X, in2.W, in2.y, in2.dloss);
  for (const auto& v : builtin_registry().flce()) {
    if (v.desc.dtype != DType::bf16) continue;
    std::string msg = error_of([&] { flce::run(v, odd, FlceMode::forward, dc.args(FlceMode::forward)); });
    EXPECT_NE(msg.find("D must be a multiple of 8"), std::string::npos) << msg;
    break;
  }
}

}  // namespace
}  // namespace detfuse
