// GPU test of the C ABI: forward_backward through libdetfuse_c.so on a small
// problem gives the same bits as flce::run on the same variant (loss, LSE, dX,
// dW), and repeated ABI calls agree bit for bit. Skips without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <cstring>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "capi/detfuse_c.h"
#include "kernels/common/buffer.h"
#include "kernels/common/digest.h"
#include "kernels/common/host_bf16.h"
#include "kernels/flce/flce.h"
#include "tests/gpu_test.h"

namespace detfuse {
namespace {

struct Outputs {
  DeviceBuffer<float> loss, lse;
  DeviceBuffer<uint16_t> dX, dW;
  Outputs(int64_t N, int64_t D, int64_t V) : loss(1), lse(N), dX(N * D), dW(V * D) {
    loss.fill_bytes(0xff);
    lse.fill_bytes(0xff);
    dX.fill_bytes(0xff);
    dW.fill_bytes(0xff);
  }
  std::string digest() const {
    Digester d;
    d.add_device(loss.data(), 4);
    d.add_device(lse.data(), lse.size() * 4);
    d.add_device(dX.data(), dX.size() * 2);
    d.add_device(dW.data(), dW.size() * 2);
    return d.finish().hex();
  }
};

// Random bf16 X [N, D] and W [V, D] on the device, targets y (every 7th row
// from row 3 ignored) and the C problem (bf16 inputs and gradients).
struct AbiCase {
  int64_t N, D, V;
  std::vector<int64_t> y;
  DeviceBuffer<uint16_t> X, W;
  DeviceBuffer<int64_t> Y;
  detfuse_flce_problem cp;
  AbiCase(int64_t N_, int64_t D_, int64_t V_, unsigned seed)
      : N(N_), D(D_), V(V_), y(size_t(N_)), X(N_ * D_), W(V_ * D_), Y(N_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.f, 0.5f);
    std::vector<float> x(N * D), w(V * D);
    for (auto& v : x) v = g(rng);
    for (auto& v : w) v = g(rng) * 0.1f;
    std::uniform_int_distribution<int64_t> cls(0, V - 1);
    for (int64_t i = 0; i < N; ++i) y[i] = (i % 7 == 3) ? -100 : cls(rng);
    X.upload(to_bf16_bits(x));
    W.upload(to_bf16_bits(w));
    Y.upload(y);
    EXPECT_EQ(detfuse_flce_problem_init(&cp), DETFUSE_OK);
    cp.N = N;
    cp.D = D;
    cp.V = V;
    cp.dtype = DETFUSE_DTYPE_BF16;
    cp.grad_dtype = DETFUSE_DTYPE_BF16;
  }
};

TEST(CApiGpu, ForwardBackwardMatchesFlceRunBitwise) {
  DETFUSE_REQUIRE_GPU();
  const int64_t N = 200, D = 256, V = 1000;  // odd sizes: partial tiles
  AbiCase ac(N, D, V, 11);
  auto &X = ac.X, &W = ac.W;
  auto& Y = ac.Y;
  detfuse_flce_problem& cp = ac.cp;
  cp.label_smoothing = 0.1;
  cp.z_loss = 1e-4;
  cp.softcap = 30;

  detfuse_selection sel{DETFUSE_SELECT_HEURISTIC, 0, nullptr, nullptr};
  detfuse_choice choice;
  ASSERT_EQ(detfuse_flce_choose(&cp, DETFUSE_MODE_FORWARD_BACKWARD, &sel, &choice), DETFUSE_OK) << detfuse_last_error();
  EXPECT_EQ(choice.source, DETFUSE_SOURCE_HEURISTIC);
  const FlceVariant* v = builtin_registry().find_flce(choice.name);
  ASSERT_NE(v, nullptr) << choice.name;

  auto via_abi = [&](const detfuse_selection& s) {
    Outputs o(N, D, V);
    detfuse_flce_args a{};
    a.X = X.data();
    a.W = W.data();
    a.y = Y.data();
    a.loss = o.loss.data();
    a.lse = o.lse.data();
    a.dX = o.dX.data();
    a.dW = o.dW.data();
    detfuse_choice c;
    EXPECT_EQ(detfuse_flce_forward_backward(&cp, &a, &s, nullptr, &c), DETFUSE_OK) << detfuse_last_error();
    EXPECT_STREQ(c.name, choice.name);
    return o.digest();
  };
  const std::string abi1 = via_abi(sel);
  const detfuse_selection named{DETFUSE_SELECT_NAME, 0, choice.name, nullptr};
  const std::string abi2 = via_abi(named);

  FlceProblem p;
  p.N = N;
  p.D = D;
  p.V = V;
  p.dtype = DType::bf16;
  p.grad_dtype = DType::bf16;
  p.label_smoothing = 0.1;
  p.lse_square_scale = 1e-4;
  p.softcap = 30;
  Outputs o(N, D, V);
  FlceArgs a;
  a.X = X.data();
  a.W = W.data();
  a.y = Y.data();
  a.loss = o.loss.data();
  a.lse = o.lse.data();
  a.dX = o.dX.data();
  a.dW = o.dW.data();
  flce::run(*v, p, FlceMode::forward_backward, a);
  const std::string direct = o.digest();
  std::printf("variant %s: ABI %s, ABI by name %s, flce::run %s\n", choice.name, abi1.c_str(), abi2.c_str(),
              direct.c_str());
  EXPECT_EQ(abi1, direct);
  EXPECT_EQ(abi2, direct);

  // The ABI's device digest of one buffer equals the C++ one.
  char hex[33];
  ASSERT_EQ(detfuse_digest_device(o.dW.data(), o.dW.size() * 2, nullptr, hex, sizeof hex), DETFUSE_OK)
      << detfuse_last_error();
  EXPECT_EQ(std::string(hex), digest_device(o.dW.data(), o.dW.size() * 2).hex());
}

// A target outside [0, V) through the ABI (issue 17: flce::run checks the
// targets after the launches, no synchronisation before them): the same
// status and message as before, by the heuristic and by name with the
// caller's workspace (the Python package's way); outputs unspecified, not
// checked. A good call after them gives the bits it gave before.
TEST(CApiGpu, BadTargetAfterTheLaunchesIsInvalidArgument) {
  DETFUSE_REQUIRE_GPU();
  const int64_t N = 64, D = 128, V = 300;
  AbiCase ac(N, D, V, 5);
  auto y = ac.y;
  y[9] = V + 5;  // not an ignored row (3, 10, 17, ...)
  y[40] = -7;
  DeviceBuffer<int64_t> Ybad(N);
  Ybad.upload(y);
  auto &X = ac.X, &W = ac.W;
  auto& Y = ac.Y;
  detfuse_flce_problem& cp = ac.cp;
  const detfuse_selection heur{DETFUSE_SELECT_HEURISTIC, 0, nullptr, nullptr};
  detfuse_choice choice;
  ASSERT_EQ(detfuse_flce_choose(&cp, DETFUSE_MODE_FORWARD_BACKWARD, &heur, &choice), DETFUSE_OK)
      << detfuse_last_error();
  const detfuse_selection named{DETFUSE_SELECT_NAME, 0, choice.name, nullptr};
  size_t ws_bytes = 0;
  ASSERT_EQ(detfuse_flce_workspace_size(&cp, DETFUSE_MODE_FORWARD_BACKWARD, &named, &ws_bytes), DETFUSE_OK)
      << detfuse_last_error();
  DeviceBytes ws(ws_bytes);

  auto call = [&](const int64_t* targets, const detfuse_selection& s, bool own_ws, Outputs& o) {
    detfuse_flce_args a{};
    a.X = X.data();
    a.W = W.data();
    a.y = targets;
    a.loss = o.loss.data();
    a.lse = o.lse.data();
    a.dX = o.dX.data();
    a.dW = o.dW.data();
    if (own_ws) {
      a.workspace = ws.get();
      a.workspace_size = ws_bytes;
    }
    return detfuse_flce_forward_backward(&cp, &a, &s, nullptr, nullptr);
  };
  Outputs good(N, D, V);
  ASSERT_EQ(call(Y.data(), named, true, good), DETFUSE_OK) << detfuse_last_error();
  const std::string before = good.digest();
  const std::string want = "detfuse_flce_forward_backward: y: 2 target(s) outside [0, 300) that are not "
                           "ignore_index=-100; first at row 9 (value 305)";
  for (const detfuse_selection* s : {&heur, &named}) {
    for (bool own_ws : {false, true}) {
      Outputs o(N, D, V);
      EXPECT_EQ(call(Ybad.data(), *s, own_ws, o), DETFUSE_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(std::string(detfuse_last_error()), want);
    }
  }
  Outputs again(N, D, V);
  ASSERT_EQ(call(Y.data(), named, true, again), DETFUSE_OK) << detfuse_last_error();
  EXPECT_EQ(again.digest(), before);
}

// detfuse_scale_unless_one: g = 1 leaves every bit (NaN payloads, -0, values
// that would round) unread and unwritten; g = 0.75 gives the fp32 product,
// rounded to nearest even for bf16, element by element; g read on the device.
TEST(CApiGpu, ScaleUnlessOneScalesOnTheDevice) {
  DETFUSE_REQUIRE_GPU();
  const int64_t n = 5000;  // > one block, not a multiple of 256
  std::vector<float> f(n);
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 3.f);
  for (auto& v : f) v = g(rng);
  f[0] = -0.f;
  f[1] = std::numeric_limits<float>::quiet_NaN();
  f[2] = std::numeric_limits<float>::infinity();
  f[3] = 1e-40f;  // subnormal
  const std::vector<uint16_t> b = to_bf16_bits(f);
  for (float scale : {1.f, 0.75f, -2.5f}) {
    DeviceBuffer<float> s(1), df(n);
    DeviceBuffer<uint16_t> db(n);
    s.upload(std::vector<float>{scale});
    df.upload(f);
    db.upload(b);
    ASSERT_EQ(detfuse_scale_unless_one(df.data(), n, DETFUSE_DTYPE_F32, s.data(), nullptr), DETFUSE_OK)
        << detfuse_last_error();
    ASSERT_EQ(detfuse_scale_unless_one(db.data(), n, DETFUSE_DTYPE_BF16, s.data(), nullptr), DETFUSE_OK)
        << detfuse_last_error();
    const std::vector<float> gf = df.download();
    const std::vector<uint16_t> gb = db.download();
    for (int64_t i = 0; i < n; ++i) {
      const float wf = scale == 1.f ? f[i] : f[i] * scale;
      const uint16_t wb = scale == 1.f ? b[i] : float_to_bf16_bits(bf16_bits_to_float(b[i]) * scale);
      uint32_t gbits, wbits;
      std::memcpy(&gbits, &gf[i], 4);
      std::memcpy(&wbits, &wf, 4);
      if (std::isnan(wf)) {
        ASSERT_TRUE(std::isnan(gf[i])) << "fp32 element " << i << " scale " << scale;
        if (scale == 1.f) ASSERT_EQ(gbits, wbits) << "fp32 NaN payload " << i;
      } else {
        ASSERT_EQ(gbits, wbits) << "fp32 element " << i << " scale " << scale;
      }
      if (std::isnan(bf16_bits_to_float(wb)))
        ASSERT_TRUE(std::isnan(bf16_bits_to_float(gb[i]))) << "bf16 element " << i << " scale " << scale;
      else
        ASSERT_EQ(gb[i], wb) << "bf16 element " << i << " scale " << scale;
    }
  }
}

}  // namespace
}  // namespace detfuse
