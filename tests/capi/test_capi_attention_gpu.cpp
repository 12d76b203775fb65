// GPU test of the C ABI's attention entry points: forward and backward through
// libdetfuse_c.so give the same bits as attention::run on the same variant
// (heuristic and named selections, caller workspace or none), the heuristic
// choice per mode is attention::heuristic_variant's, and a variant whose
// can_run refuses a mode (the forward-only wgmma variants for the backward, a
// head dim the variant is not built for) is refused with that reason. Skips
// without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "capi/detfuse_c.h"
#include "kernels/attention/attention.h"
#include "kernels/common/buffer.h"
#include "kernels/common/device_info.h"
#include "kernels/common/digest.h"
#include "kernels/common/host_bf16.h"
#include "kernels/registry.h"
#include "tests/gpu_test.h"

namespace detfuse {
namespace {

// GQA (H/Hkv = 2), causal, odd lengths with Sq < Sk (bottom-right mask), d 64.
constexpr int64_t kB = 2, kH = 4, kHkv = 2, kSq = 77, kSk = 100, kD = 64;

struct Inputs {
  DeviceBuffer<uint16_t> Q, K, V, dO;
  Inputs() {
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.f, 1.f);
    auto fill = [&](DeviceBuffer<uint16_t>& b, int64_t n) {
      std::vector<float> h(static_cast<size_t>(n));
      for (auto& v : h) v = g(rng);
      b.upload(to_bf16_bits(h));
    };
    fill(Q, kB * kH * kSq * kD);
    fill(K, kB * kHkv * kSk * kD);
    fill(V, kB * kHkv * kSk * kD);
    fill(dO, kB * kH * kSq * kD);
  }
};

struct Forward {
  DeviceBuffer<uint16_t> O{size_t(kB * kH * kSq * kD)};
  DeviceBuffer<float> lse{size_t(kB * kH * kSq)};
  Forward() {
    O.fill_bytes(0xff);
    lse.fill_bytes(0xff);
  }
  std::string digest() const {
    Digester d;
    d.add_device(O.data(), O.bytes());
    d.add_device(lse.data(), lse.bytes());
    return d.finish().hex();
  }
};

struct Grads {
  DeviceBuffer<uint16_t> dQ{size_t(kB * kH * kSq * kD)}, dK{size_t(kB * kHkv * kSk * kD)},
      dV{size_t(kB * kHkv * kSk * kD)};
  Grads() {
    dQ.fill_bytes(0xff);
    dK.fill_bytes(0xff);
    dV.fill_bytes(0xff);
  }
  std::string digest() const {
    Digester d;
    d.add_device(dQ.data(), dQ.bytes());
    d.add_device(dK.data(), dK.bytes());
    d.add_device(dV.data(), dV.bytes());
    return d.finish().hex();
  }
};

detfuse_attention_problem c_problem() {
  detfuse_attention_problem p;
  EXPECT_EQ(detfuse_attention_problem_init(&p), DETFUSE_OK);
  p.B = kB;
  p.H = kH;
  p.Hkv = kHkv;
  p.Sq = kSq;
  p.Sk = kSk;
  p.d = kD;
  p.dtype = DETFUSE_DTYPE_BF16;
  p.causal = 1;
  return p;
}

AttentionProblem cxx_problem() {
  AttentionProblem p;
  p.B = kB;
  p.H = kH;
  p.Hkv = kHkv;
  p.Sq = kSq;
  p.Sk = kSk;
  p.d = kD;
  p.dtype = DType::bf16;
  p.causal = true;
  return p;
}

detfuse_attention_args fwd_args(const Inputs& in, Forward& f) {
  detfuse_attention_args a{};
  a.Q = in.Q.data();
  a.K = in.K.data();
  a.V = in.V.data();
  a.O = f.O.data();
  a.lse = f.lse.data();
  return a;
}

detfuse_attention_args bwd_args(const Inputs& in, const Forward& f, Grads& g) {
  detfuse_attention_args a{};
  a.Q = in.Q.data();
  a.K = in.K.data();
  a.V = in.V.data();
  a.dO = in.dO.data();
  a.O_in = f.O.data();
  a.lse_in = f.lse.data();
  a.dQ = g.dQ.data();
  a.dK = g.dK.data();
  a.dV = g.dV.data();
  return a;
}

AttentionArgs to_cxx(const detfuse_attention_args& c) {
  AttentionArgs a;
  a.Q = c.Q;
  a.K = c.K;
  a.V = c.V;
  a.dO = c.dO;
  a.O_in = c.O_in;
  a.lse_in = c.lse_in;
  a.O = c.O;
  a.lse = c.lse;
  a.dQ = c.dQ;
  a.dK = c.dK;
  a.dV = c.dV;
  return a;
}

const DeviceInfo& device() {
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  return cached_device(dev);
}

TEST(CApiAttentionGpu, HeuristicForwardBackwardMatchAttentionRunBitwise) {
  DETFUSE_REQUIRE_GPU();
  const Inputs in;
  const detfuse_attention_problem cp = c_problem();
  const AttentionProblem p = cxx_problem();
  const detfuse_selection heur{DETFUSE_SELECT_HEURISTIC, 0, nullptr, nullptr};

  // The heuristic's choice per mode is attention::heuristic_variant's.
  detfuse_choice cf, cb;
  ASSERT_EQ(detfuse_attention_choose(&cp, DETFUSE_ATTENTION_FORWARD, &heur, &cf), DETFUSE_OK) << detfuse_last_error();
  ASSERT_EQ(detfuse_attention_choose(&cp, DETFUSE_ATTENTION_BACKWARD, &heur, &cb), DETFUSE_OK) << detfuse_last_error();
  const AttentionVariant& vf = attention::heuristic_variant(p, AttentionMode::forward, device());
  const AttentionVariant& vb = attention::heuristic_variant(p, AttentionMode::backward, device());
  EXPECT_EQ(std::string(cf.name), vf.desc.name);
  EXPECT_EQ(std::string(cb.name), vb.desc.name);
  EXPECT_EQ(cf.source, DETFUSE_SOURCE_HEURISTIC);
  EXPECT_EQ(cb.deterministic, 1);

  // Forward: ABI (heuristic, then by name) against attention::run.
  Forward f_abi, f_named, f_run;
  detfuse_attention_args a = fwd_args(in, f_abi);
  detfuse_choice c;
  ASSERT_EQ(detfuse_attention_forward(&cp, &a, &heur, nullptr, &c), DETFUSE_OK) << detfuse_last_error();
  EXPECT_STREQ(c.name, cf.name);
  const detfuse_selection named_f{DETFUSE_SELECT_NAME, 0, cf.name, nullptr};
  a = fwd_args(in, f_named);
  ASSERT_EQ(detfuse_attention_run(&cp, DETFUSE_ATTENTION_FORWARD, &a, &named_f, nullptr, nullptr), DETFUSE_OK)
      << detfuse_last_error();
  a = fwd_args(in, f_run);
  attention::run(vf, p, AttentionMode::forward, to_cxx(a));
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("forward %s: ABI %s, by name %s, attention::run %s\n", cf.name, f_abi.digest().c_str(),
              f_named.digest().c_str(), f_run.digest().c_str());
  EXPECT_EQ(f_abi.digest(), f_run.digest());
  EXPECT_EQ(f_named.digest(), f_run.digest());

  // Backward from the same O and LSE: ABI heuristic (library workspace), ABI by
  // name with the caller's workspace of the queried size, attention::run.
  Grads g_abi, g_named, g_run;
  a = bwd_args(in, f_run, g_abi);
  ASSERT_EQ(detfuse_attention_backward(&cp, &a, &heur, nullptr, &c), DETFUSE_OK) << detfuse_last_error();
  EXPECT_STREQ(c.name, cb.name);
  const detfuse_selection named_b{DETFUSE_SELECT_NAME, 0, cb.name, nullptr};
  size_t ws_bytes = 0;
  ASSERT_EQ(detfuse_attention_workspace_size(&cp, DETFUSE_ATTENTION_BACKWARD, &named_b, &ws_bytes), DETFUSE_OK)
      << detfuse_last_error();
  EXPECT_EQ(ws_bytes, vb.workspace_bytes(p, AttentionMode::backward));
  DeviceBytes ws(ws_bytes);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  a = bwd_args(in, f_run, g_named);
  a.workspace = ws.get();
  a.workspace_size = ws_bytes;
  ASSERT_EQ(detfuse_attention_backward(&cp, &a, &named_b, stream, nullptr), DETFUSE_OK) << detfuse_last_error();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  a = bwd_args(in, f_run, g_run);
  attention::run(vb, p, AttentionMode::backward, to_cxx(a));
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("backward %s: ABI %s, by name + workspace %s, attention::run %s\n", cb.name, g_abi.digest().c_str(),
              g_named.digest().c_str(), g_run.digest().c_str());
  EXPECT_EQ(g_abi.digest(), g_run.digest());
  EXPECT_EQ(g_named.digest(), g_run.digest());

  // A workspace smaller than the variant needs is refused by attention::run.
  if (ws_bytes > 256) {
    a = bwd_args(in, f_run, g_named);
    a.workspace = ws.get();
    a.workspace_size = 256;
    EXPECT_EQ(detfuse_attention_backward(&cp, &a, &named_b, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(detfuse_last_error()).find("workspace_size: 256 bytes given"), std::string::npos)
        << detfuse_last_error();
  }
}

// Tuned selection without a store: the lookup says so and falls back to the
// per-pass heuristic (the same names as HEURISTIC), and the run gives its bits.
TEST(CApiAttentionGpu, TunedWithoutStoreFallsBackToTheHeuristicPerPass) {
  DETFUSE_REQUIRE_GPU();
  const Inputs in;
  const detfuse_attention_problem cp = c_problem();
  const detfuse_selection heur{DETFUSE_SELECT_HEURISTIC, 0, nullptr, nullptr};
  const detfuse_selection tuned{DETFUSE_SELECT_TUNED, 0, nullptr, "/nonexistent/detfuse-capi-test.db"};
  for (int32_t mode : {DETFUSE_ATTENTION_FORWARD, DETFUSE_ATTENTION_BACKWARD}) {
    detfuse_choice ch, ct;
    ASSERT_EQ(detfuse_attention_choose(&cp, mode, &heur, &ch), DETFUSE_OK) << detfuse_last_error();
    ASSERT_EQ(detfuse_attention_choose(&cp, mode, &tuned, &ct), DETFUSE_OK) << detfuse_last_error();
    EXPECT_STREQ(ct.name, ch.name) << "mode " << mode;
    EXPECT_EQ(ct.source, DETFUSE_SOURCE_HEURISTIC);
    EXPECT_NE(std::string(ct.note).find("no tuning database at /nonexistent/detfuse-capi-test.db"),
              std::string::npos) << ct.note;
    EXPECT_EQ(std::string(ct.tuned_problem_key), "");
  }
  Forward f_h, f_t;
  detfuse_attention_args a = fwd_args(in, f_h);
  ASSERT_EQ(detfuse_attention_forward(&cp, &a, &heur, nullptr, nullptr), DETFUSE_OK) << detfuse_last_error();
  a = fwd_args(in, f_t);
  detfuse_choice c;
  ASSERT_EQ(detfuse_attention_forward(&cp, &a, &tuned, nullptr, &c), DETFUSE_OK) << detfuse_last_error();
  EXPECT_EQ(c.source, DETFUSE_SOURCE_HEURISTIC);
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(f_t.digest(), f_h.digest());
}

// Every registered bf16 d=64 variant by name: where can_run accepts a mode the
// ABI's bits equal attention::run's; where it refuses, the ABI refuses with the
// same reason (forward-only variants in the backward).
TEST(CApiAttentionGpu, EveryVariantByNameMatchesOrIsRefusedWithItsReason) {
  DETFUSE_REQUIRE_GPU();
  const Inputs in;
  const detfuse_attention_problem cp = c_problem();
  const AttentionProblem p = cxx_problem();
  Forward f_ref;
  {
    detfuse_attention_args a = fwd_args(in, f_ref);
    attention::forward(p, to_cxx(a));
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  int checked = 0, refused = 0;
  for (const AttentionVariant& v : builtin_registry().attention()) {
    if (v.desc.dtype != DType::bf16) continue;
    SCOPED_TRACE(v.desc.name);
    const detfuse_selection s{DETFUSE_SELECT_NAME, 0, v.desc.name.c_str(), nullptr};
    for (AttentionMode m : {AttentionMode::forward, AttentionMode::backward}) {
      const int32_t cm = m == AttentionMode::forward ? DETFUSE_ATTENTION_FORWARD : DETFUSE_ATTENTION_BACKWARD;
      const auto why = v.can_run(p, m, device());
      detfuse_choice c;
      const int32_t st = detfuse_attention_choose(&cp, cm, &s, &c);
      if (why) {
        EXPECT_EQ(st, DETFUSE_ERR_INVALID_ARGUMENT);
        const std::string msg = detfuse_last_error();
        EXPECT_NE(msg.find("cannot run the " + std::string(attention::to_string(m))), std::string::npos) << msg;
        EXPECT_NE(msg.find(*why), std::string::npos) << msg;
        // The run entry refuses it the same way, before any launch.
        Forward f;
        Grads g;
        detfuse_attention_args a = m == AttentionMode::forward ? fwd_args(in, f) : bwd_args(in, f_ref, g);
        EXPECT_EQ(detfuse_attention_run(&cp, cm, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(detfuse_last_error()).find(*why), std::string::npos) << detfuse_last_error();
        ++refused;
        continue;
      }
      ASSERT_EQ(st, DETFUSE_OK) << detfuse_last_error();
      if (m == AttentionMode::forward) {
        Forward f_abi, f_run;
        detfuse_attention_args a = fwd_args(in, f_abi);
        ASSERT_EQ(detfuse_attention_forward(&cp, &a, &s, nullptr, nullptr), DETFUSE_OK) << detfuse_last_error();
        a = fwd_args(in, f_run);
        attention::run(v, p, m, to_cxx(a));
        DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(f_abi.digest(), f_run.digest());
      } else {
        Grads g_abi, g_run;
        detfuse_attention_args a = bwd_args(in, f_ref, g_abi);
        ASSERT_EQ(detfuse_attention_backward(&cp, &a, &s, nullptr, nullptr), DETFUSE_OK) << detfuse_last_error();
        a = bwd_args(in, f_ref, g_run);
        attention::run(v, p, m, to_cxx(a));
        DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
        // atomic dQ may differ run to run; dK and dV are owned in every strategy.
        if (v.desc.deterministic) {
          EXPECT_EQ(g_abi.digest(), g_run.digest());
        } else {
          EXPECT_EQ(digest_device(g_abi.dK.data(), g_abi.dK.bytes()).hex(),
                    digest_device(g_run.dK.data(), g_run.dK.bytes()).hex());
          EXPECT_EQ(digest_device(g_abi.dV.data(), g_abi.dV.bytes()).hex(),
                    digest_device(g_run.dV.data(), g_run.dV.bytes()).hex());
        }
      }
      ++checked;
    }
  }
  std::printf("checked %d (variant, mode) pairs bitwise, %d refused with their can_run reason\n", checked, refused);
  EXPECT_GT(checked, 0);
  EXPECT_GT(refused, 0);  // at least the d=128 variants for this d=64 problem
}

}  // namespace
}  // namespace detfuse
