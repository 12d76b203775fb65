// GPU smoke test: device facts are readable and a trivial kernel computes the
// right answer. Skips (with the reason) where there is no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/device_info.h"
#include "kernels/common/smoke.h"
#include "kernels/common/timer.h"
#include "tests/gpu_test.h"

namespace detfuse {
namespace {

TEST(GpuSmoke, DeviceInfoIsComplete) {
  DETFUSE_REQUIRE_GPU();
  DeviceInfo d = query_device(0);
  std::printf("device 0: %s uuid=%s cc=%s sms=%d mem=%.1f GiB l2=%d KiB driver=%d (%s) runtime=%d sm_clock=%s MHz\n",
              d.name.c_str(), d.uuid.c_str(), d.cc_string().c_str(), d.sm_count,
              double(d.total_memory_bytes) / (1 << 30), d.l2_bytes / 1024, d.driver_version,
              d.driver_release.c_str(), d.runtime_version,
              d.current_sm_clock_mhz ? std::to_string(*d.current_sm_clock_mhz).c_str() : "n/a");
  EXPECT_FALSE(d.name.empty());
  EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ(d.uuid.size(), 40u);
  EXPECT_GT(d.sm_count, 0);
  EXPECT_GT(d.total_memory_bytes, 0u);
  EXPECT_GT(d.l2_bytes, 0);
  EXPECT_GT(d.driver_version, 0);
  EXPECT_GT(d.runtime_version, 0);
}

TEST(GpuSmoke, SaxpyComputesOnDevice) {
  DETFUSE_REQUIRE_GPU();
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = float(i % 1000) * 0.5f;
    y[i] = float(i % 7) - 3.f;
  }
  DeviceBuffer<float> dx, dy;
  dx.upload(x);
  dy.upload(y);
  EventTimer t;
  t.start();
  smoke_saxpy(n, 2.f, dx.data(), dy.data());
  float ms = t.stop_ms();
  EXPECT_GT(ms, 0.f);
  std::vector<float> out = dy.download();
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.f * x[i] + y[i]) << i;
}

TEST(GpuSmoke, NoDeviceIsReportedNotThrown) {
  // Either way, counting devices never throws.
  std::string why;
  int n = cuda_device_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace detfuse
