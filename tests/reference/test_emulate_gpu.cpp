// GPU test of the `portable` level: for every registered variant with a CPU
// emulation (reference/emulate.h: the fp32 `fma` FLCE variants and the `fma`
// attention variants, owning and partials), the bytes the GPU writes equal the
// emulation's bit for bit, at odd shapes (N, D, V, Sq, Sk not multiples of any
// tile) with every option; FLCE at a shape that runs in several chunks for the
// 512 and 1024 MiB budgets. On a mismatch: the output, how many elements
// differ, the first differing index and both values. Skips without a GPU.
// Each passing (variant, case) prints one "[portable] ... bit-identical" line
// (experiments/device/s6-portable.sh counts them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/host_bf16.h"
#include "kernels/flce/device_case.h"
#include "kernels/flce/flce.h"
#include "kernels/registry.h"
#include "reference/emulate.h"
#include "reference/inputs.h"
#include "tests/flce_shape.h"
#include "tests/gpu_test.h"

namespace detfuse {
namespace {

using reference::EmulatedOutput;

// Compares one output's bytes; elem 4 (fp32) or 2 (bf16). Returns true when equal.
bool same_bits(const std::string& what, const std::vector<std::byte>& gpu, const EmulatedOutput& emu, size_t elem) {
  EXPECT_EQ(gpu.size(), emu.bytes.size()) << what << " " << emu.name << ": byte counts differ";
  if (gpu.size() != emu.bytes.size()) return false;
  if (std::memcmp(gpu.data(), emu.bytes.data(), gpu.size()) == 0) return true;
  size_t differ = 0, first = 0;
  int64_t max_ulps = 0;  // largest distance in units in the last place (ordered bit patterns)
  auto ordered = [elem](const std::vector<std::byte>& b, size_t i) -> int64_t {
    if (elem == 4) {
      int32_t v;
      std::memcpy(&v, b.data() + i * 4, 4);
      return v < 0 ? int64_t(INT32_MIN) - v : v;
    }
    int16_t v;
    std::memcpy(&v, b.data() + i * 2, 2);
    return v < 0 ? int64_t(INT16_MIN) - v : v;
  };
  for (size_t i = 0; i < gpu.size() / elem; ++i)
    if (std::memcmp(gpu.data() + i * elem, emu.bytes.data() + i * elem, elem) != 0) {
      if (!differ) first = i;
      ++differ;
      max_ulps = std::max<int64_t>(max_ulps, std::llabs(ordered(gpu, i) - ordered(emu.bytes, i)));
    }
  auto value = [elem](const std::vector<std::byte>& b, size_t i) {
    uint32_t u = 0;
    float f;
    if (elem == 4) {
      std::memcpy(&u, b.data() + i * 4, 4);
      std::memcpy(&f, &u, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + i * 2, 2);
      u = h;
      f = bf16_bits_to_float(h);
    }
    char s[64];
    std::snprintf(s, sizeof s, "%.9g (0x%0*x)", double(f), int(elem * 2), u);
    return std::string(s);
  };
  ADD_FAILURE() << what << " " << emu.name << ": " << differ << " of " << gpu.size() / elem
                << " elements differ; first at index " << first << ": GPU " << value(gpu, first) << ", emulation "
                << value(emu.bytes, first) << "; largest difference " << max_ulps << " ulp";
  return false;
}

std::vector<std::byte> bytes_of(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ---------------------------------------------------------------- FLCE
struct FlceCase {
  std::string name;
  FlceProblem p;
  reference::FlceInputOptions opts;
  uint64_t seed;
};

std::vector<FlceCase> flce_cases() {
  std::vector<FlceCase> cs;
  {
    FlceCase c{"all_options_mean", flce_shape(301, 203, 4099, DType::f32), {}, 12};
    c.p.label_smoothing = 0.1;
    c.p.lse_square_scale = 1e-3;
    c.p.softcap = 15.0;
    c.p.grad_output = 0.7;
    c.opts.ignore_fraction = 0.2;
    cs.push_back(c);
  }
  {
    FlceCase c{"reduction_none_ii", flce_shape(130, 77, 2053, DType::f32), {}, 13};
    c.p.reduction = Reduction::none;
    c.p.ignore_index = -1;
    cs.push_back(c);
  }
  {
    FlceCase c{"wide_logits_sum", flce_shape(97, 131, 3001, DType::f32), {}, 18};
    c.p.reduction = Reduction::sum;
    c.opts.logit_std = 300.0;
    cs.push_back(c);
  }
  {
    // 240 KB a row: mb512 runs 3 chunks (2176, 2176, 348 rows), mb1024 2, mb1920 1.
    FlceCase c{"several_chunks", flce_shape(4700, 21, 60013, DType::f32), {}, 17};
    c.p.label_smoothing = 0.05;
    cs.push_back(c);
  }
  return cs;
}

class PortableFlce : public ::testing::TestWithParam<std::string> {};

TEST_P(PortableFlce, GpuBitsEqualEmulation) {
  DETFUSE_REQUIRE_GPU();
  const FlceVariant& v = *builtin_registry().find_flce(GetParam());
  const DeviceInfo dev = query_device(0);
  int ran = 0;
  for (const auto& c : flce_cases()) {
    if (auto why = v.can_run(c.p, FlceMode::forward_backward, dev)) {
      std::printf("  [%s] skipped by can_run: %s\n", c.name.c_str(), why->c_str());
      continue;
    }
    SCOPED_TRACE(c.name + " " + c.p.key());
    const auto in = reference::make_flce_inputs(c.p, c.seed, c.opts);
    const auto emu = reference::emulate_flce(v.desc.name, c.p, in);
    flce::DeviceCase dc(c.p, in.X, in.W, in.y, in.dloss);
    dc.poison();
    flce::run(v, c.p, FlceMode::forward_backward, dc.args(FlceMode::forward_backward));
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<std::vector<std::byte>> gpu = {bytes_of(dc.loss()), bytes_of(dc.lse()), bytes_of(dc.dX()),
                                                     bytes_of(dc.dW())};
    ASSERT_EQ(emu.size(), gpu.size());
    bool all = true;
    for (size_t i = 0; i < gpu.size(); ++i) all = same_bits(c.name, gpu[i], emu[i], 4) && all;
    if (all) std::printf("[portable] %s %s: loss lse dX dW bit-identical\n", v.desc.name.c_str(), c.name.c_str());
    ++ran;
  }
  EXPECT_GE(ran, 3) << "fewer than 3 shapes ran";
}

// ----------------------------------------------------------- attention
struct AttnCase {
  std::string name;
  int64_t B, H, Hkv, Sq, Sk;
  bool causal;
  double scale_factor;
  double softcap;
  int64_t window;
  uint64_t seed;
};

const std::vector<AttnCase>& attn_cases() {
  static const std::vector<AttnCase> cs = {
      {"causal_gqa_sq_lt_sk", 2, 4, 2, 45, 131, true, 1.0, 0.0, 0, 23},
      {"causal_sq_gt_sk_empty_rows", 1, 2, 1, 100, 37, true, 1.0, 0.0, 0, 22},
      {"large_scores_sq_gt_sk", 1, 6, 2, 130, 67, false, 4.0, 0.0, 0, 24},
      {"softcap_window_causal_gqa", 1, 4, 2, 133, 133, true, 2.0, 3.0, 33, 30},
      {"window_sq_lt_sk", 1, 4, 2, 70, 200, false, 1.0, 0.0, 50, 27},
  };
  return cs;
}

int64_t param(const VariantDesc& d, const std::string& k) {
  for (const auto& [n, v] : d.params)
    if (n == k) return v;
  return -1;
}

class PortableAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(PortableAttention, GpuBitsEqualEmulation) {
  DETFUSE_REQUIRE_GPU();
  const AttentionVariant& v = *builtin_registry().find_attention(GetParam());
  const DeviceInfo dev = query_device(0);
  const size_t es = dtype_bytes(v.desc.dtype);
  int ran = 0;
  for (const auto& c : attn_cases()) {
    AttentionProblem p;
    p.B = c.B, p.H = c.H, p.Hkv = c.Hkv, p.Sq = c.Sq, p.Sk = c.Sk, p.d = param(v.desc, "d");
    p.causal = c.causal;
    p.scale = c.scale_factor / std::sqrt(double(p.d));
    p.dtype = v.desc.dtype;
    p.softcap = c.softcap;
    p.window = c.window;
    if (auto why = v.can_run(p, AttentionMode::backward, dev)) {
      std::printf("  [%s] skipped by can_run: %s\n", c.name.c_str(), why->c_str());
      continue;
    }
    SCOPED_TRACE(c.name + " " + p.key());
    const auto in = reference::make_attention_inputs(p, c.seed);
    const auto emu = reference::emulate_attention(v.desc.name, p, in);
    auto upload = [&](const std::vector<float>& x) {
      DeviceBytes b(x.size() * es);
      if (es == 4) {
        DETFUSE_CUDA_CHECK(cudaMemcpy(b.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
      } else {
        const auto h = to_bf16_bits(x);
        DETFUSE_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
      }
      return b;
    };
    auto poisoned = [](size_t bytes) {
      DeviceBytes b(bytes);
      DETFUSE_CUDA_CHECK(cudaMemset(b.get(), 0xFF, bytes));
      return b;
    };
    const size_t nq = in.Q.size(), nk = in.K.size(), nrows = size_t(p.B * p.H * p.Sq);
    DeviceBytes Q = upload(in.Q), K = upload(in.K), V = upload(in.V), dO = upload(in.dO);
    DeviceBytes O = poisoned(nq * es), lse = poisoned(nrows * 4), dQ = poisoned(nq * es), dK = poisoned(nk * es),
                dV = poisoned(nk * es);
    AttentionArgs a;
    a.Q = Q.get(), a.K = K.get(), a.V = V.get(), a.O = O.get(), a.lse = static_cast<float*>(lse.get());
    attention::run(v, p, AttentionMode::forward, a);
    AttentionArgs b;
    b.Q = Q.get(), b.K = K.get(), b.V = V.get(), b.dO = dO.get(), b.O_in = O.get();
    b.lse_in = static_cast<const float*>(lse.get());
    b.dQ = dQ.get(), b.dK = dK.get(), b.dV = dV.get();
    attention::run(v, p, AttentionMode::backward, b);
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    auto down = [](const DeviceBytes& x, size_t bytes) {
      std::vector<std::byte> h(bytes);
      DETFUSE_CUDA_CHECK(cudaMemcpy(h.data(), x.get(), bytes, cudaMemcpyDeviceToHost));
      return h;
    };
    const std::vector<std::vector<std::byte>> gpu = {down(O, nq * es), down(lse, nrows * 4), down(dQ, nq * es),
                                                     down(dK, nk * es), down(dV, nk * es)};
    ASSERT_EQ(emu.size(), gpu.size());
    bool all = true;
    for (size_t i = 0; i < gpu.size(); ++i) all = same_bits(c.name, gpu[i], emu[i], i == 1 ? 4 : es) && all;
    if (all) std::printf("[portable] %s %s: O lse dQ dK dV bit-identical\n", v.desc.name.c_str(), c.name.c_str());
    ++ran;
  }
  EXPECT_GE(ran, 3) << "fewer than 3 shapes ran";
}

std::vector<std::string> flce_names() {
  std::vector<std::string> n;
  for (const auto& v : builtin_registry().flce())
    if (reference::has_emulation(v.desc.name)) n.push_back(v.desc.name);
  return n;
}
std::vector<std::string> attention_names() {
  std::vector<std::string> n;
  for (const auto& v : builtin_registry().attention())
    if (reference::has_emulation(v.desc.name)) n.push_back(v.desc.name);
  return n;
}
std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Registry, PortableFlce, ::testing::ValuesIn(flce_names()), test_name);
INSTANTIATE_TEST_SUITE_P(Registry, PortableAttention, ::testing::ValuesIn(attention_names()), test_name);

}  // namespace
}  // namespace detfuse
