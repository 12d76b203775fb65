// GPU tests of the run-to-run spread (schema v4): device_spread on arrays with
// known answers (fp32, bf16, NaN), and the measurer's spread of real variants:
// zero for a deterministic one, nonzero exactly when an atomic variant's dW
// digests differ, zero always for the row-owned outputs. Label gpu; they skip
// with the reason where there is no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstdint>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/registry.h"
#include "tests/gpu_test.h"
#include "tests/tuner/fakes.h"
#include "tuner/flce_measurer.h"
#include "tuner/spread.h"

namespace detfuse::tuner {
namespace {

template <class T>
DeviceBytes upload(const std::vector<T>& h) {
  DeviceBytes d(h.size() * sizeof(T));
  DETFUSE_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}

TEST(SpreadGpu, KnownArraysFp32AndBf16) {
  DETFUSE_REQUIRE_GPU();
  {
    const std::vector<float> b = {1, -2, 3, 0.5f, 4};
    const std::vector<float> a = {1, -2, 3.25f, 0.5f, 1};  // differences 0.25 and -3
    DeviceBytes da = upload(a), db = upload(b);
    const SpreadSums s = device_spread(da.get(), db.get(), a.size(), DType::f32);
    EXPECT_EQ(s.max_abs_diff, 3.0);
    EXPECT_EQ(s.diff_sq, 0.0625 + 9.0);
    EXPECT_EQ(s.ref_sq, 1 + 4 + 9 + 0.25 + 16);
  }
  {
    // bf16 bit patterns: 1.0 = 0x3F80, 2.0 = 0x4000, 0.5 = 0x3F00, -3.0 = 0xC040.
    const std::vector<uint16_t> b = {0x3F80, 0x4000, 0x3F00};
    const std::vector<uint16_t> a = {0x3F80, 0xC040, 0x3F80};  // differences -5 and 0.5
    DeviceBytes da = upload(a), db = upload(b);
    const SpreadSums s = device_spread(da.get(), db.get(), a.size(), DType::bf16);
    EXPECT_EQ(s.max_abs_diff, 5.0);
    EXPECT_EQ(s.diff_sq, 25.25);
    EXPECT_EQ(s.ref_sq, 1 + 4 + 0.25);
  }
  {
    // A NaN anywhere makes the spread NaN (never hidden by the max).
    std::vector<float> b(100000, 1.0f), a(100000, 1.0f);
    a[77777] = std::nanf("");
    a[5] = 9.0f;
    DeviceBytes da = upload(a), db = upload(b);
    const SpreadSums s = device_spread(da.get(), db.get(), a.size(), DType::f32);
    EXPECT_TRUE(std::isnan(s.max_abs_diff));
    EXPECT_EQ(s.ref_sq, 100000.0);
  }
  {
    // Equal infinities (attention's LSE of rows that see no key) differ by 0;
    // the reference norm counts the finite values.
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> b = {-inf, 2, -inf}, a = {-inf, 2.5f, -inf};
    DeviceBytes da = upload(a), db = upload(b);
    const SpreadSums s = device_spread(da.get(), db.get(), a.size(), DType::f32);
    EXPECT_EQ(s.max_abs_diff, 0.5);
    EXPECT_EQ(s.diff_sq, 0.25);
    EXPECT_EQ(s.ref_sq, 4.0);
  }
  {
    // Identical arrays: exactly zero.
    std::vector<float> b(1 << 20);
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 97) - 48.0f;
    DeviceBytes da = upload(b), db = upload(b);
    const SpreadSums s = device_spread(da.get(), db.get(), b.size(), DType::f32);
    EXPECT_EQ(s.max_abs_diff, 0.0);
    EXPECT_EQ(s.diff_sq, 0.0);
    EXPECT_GT(s.ref_sq, 0.0);
  }
}

const FlceVariant* first_variant(const std::string& strategy) {
  for (const auto& v : builtin_registry().flce())
    if (v.desc.dtype == DType::bf16 && v.desc.strategy == strategy) return &v;
  return nullptr;
}

TEST(SpreadGpu, MeasurerSpreadAgreesWithTheDigests) {
  DETFUSE_REQUIRE_GPU();
  DETFUSE_CUDA_CHECK(cudaSetDevice(0));
  const DeviceInfo dev = query_device(0);
  FlceGpuMeasurer m(dev);
  // Many row blocks per dW tile: atomic adds in a varying order.
  m.prepare(testing::problem(16384, 256, 4099), FlceMode::forward_backward, 0);
  MeasureControl ctl;
  ctl.repeats = 6;
  for (const char* strategy : {"owning", "partials", "atomic"}) {
    const FlceVariant* v = first_variant(strategy);
    ASSERT_NE(v, nullptr) << strategy;
    const VariantOutcome o = m.measure(*v, ctl);
    ASSERT_EQ(o.status, db::kResultOk) << v->desc.name << ": " << o.reason;
    const auto& d = *o.determinism;
    for (const char* out : {"loss", "lse", "dX", "dW"}) {
      ASSERT_EQ(d.spread.count(out), 1u) << v->desc.name << " " << out;
      const db::Spread& s = d.spread.at(out);
      EXPECT_GT(s.norm, 0) << v->desc.name << " " << out;
      // Bits differ between repeats exactly when the spread is not zero (a
      // +0/-0 flip alone would break this; fp32 atomics on random data do not
      // produce one in practice).
      EXPECT_EQ(d.distinct.at(out) > 1, s.max_abs_diff > 0) << v->desc.name << " " << out;
      EXPECT_EQ(s.max_abs_diff > 0, s.diff_norm > 0) << v->desc.name << " " << out;
      EXPECT_LE(s.max_abs_diff, s.diff_norm);
      // Run-to-run noise is far below the bf16 tolerance of the check.
      EXPECT_LT(s.diff_norm / s.norm, 1e-2) << v->desc.name << " " << out;
      if (std::string(out) != "dW" || std::string(strategy) != "atomic") EXPECT_EQ(s.max_abs_diff, 0) << out;
    }
    std::cout << v->desc.name << ": dW distinct " << d.distinct.at("dW") << "/" << d.repeats << ", spread L2 "
              << d.spread.at("dW").diff_norm / d.spread.at("dW").norm << ", max "
              << d.spread.at("dW").max_abs_diff / d.spread.at("dW").norm << ", error vs float64 "
              << o.correctness->errors.at("dW") << "\n";
  }
}

}  // namespace
}  // namespace detfuse::tuner
