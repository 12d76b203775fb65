#include <gtest/gtest.h>

#include <vector>

#include "kernels/common/digest.h"
#include "kernels/common/error.h"

namespace detfuse {
namespace {

TEST(Digest, KnownValueOfEmptyInput) {
  // XXH3-128 of zero bytes, from the xxHash reference implementation.
  EXPECT_EQ(digest_host(nullptr, 0).hex(), "99aa06d3014798d86001c324468d497f");
}

TEST(Digest, SensitiveToEveryBitAndDeterministic) {
  std::vector<float> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * float(i) - 0.3f;
  Digest d1 = digest_host(a.data(), a.size() * sizeof(float));
  EXPECT_EQ(d1, digest_host(a.data(), a.size() * sizeof(float)));
  auto* bytes = reinterpret_cast<unsigned char*>(a.data());
  bytes[1234] ^= 1;  // flip the lowest bit of one mantissa
  EXPECT_NE(d1, digest_host(a.data(), a.size() * sizeof(float)));
}

TEST(Digest, HexRoundTripAndMalformed) {
  Digest d{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(d.hex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(Digest::from_hex(d.hex()), d);
  EXPECT_THROW(Digest::from_hex("xyz"), Error);
  EXPECT_THROW(Digest::from_hex(std::string(32, 'g')), Error);
}

TEST(Digest, StreamingEqualsOneShotOfConcatenation) {
  std::vector<unsigned char> a = {1, 2, 3, 4, 5}, b = {6, 7, 8};
  std::vector<unsigned char> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  Digester s;
  s.add_host(a.data(), a.size());
  s.add_host(b.data(), b.size());
  EXPECT_EQ(s.finish(), digest_host(ab.data(), ab.size()));
}

}  // namespace
}  // namespace detfuse
