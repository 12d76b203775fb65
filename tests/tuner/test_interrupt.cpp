#include <gtest/gtest.h>

#include <csignal>
#include <vector>

#include "kernels/common/digest.h"
#include "tuner/interrupt.h"

namespace detfuse::tuner {
namespace {

TEST(Interrupt, SigintSetsTheFlagAndSignalsArrivingTogetherCountAsOne) {
  clear_interrupt();
  install_sigint_handler();
  EXPECT_FALSE(interrupt_requested());
  std::raise(SIGINT);
  EXPECT_TRUE(interrupt_requested());
  std::raise(SIGINT);  // `timeout` signals the process and its group: must not kill
  EXPECT_TRUE(interrupt_requested());
  clear_interrupt();
  std::signal(SIGINT, SIG_DFL);
}

// The tuner digests outputs chunk by chunk through a pinned buffer; XXH3's
// streaming form must equal the one-shot digest DeviceCase::digests() uses.
TEST(Interrupt, ChunkedDigestEqualsOneShot) {
  std::vector<unsigned char> data(3 * 1000 * 1000 + 17);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  Digester d;
  for (size_t off = 0; off < data.size(); off += 1 << 20) d.add_host(data.data() + off, std::min<size_t>(1 << 20, data.size() - off));
  EXPECT_EQ(d.finish(), digest_host(data.data(), data.size()));
}

}  // namespace
}  // namespace detfuse::tuner
