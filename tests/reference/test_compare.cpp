#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common/error.h"
#include "reference/compare.h"

namespace detfuse::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Compare, RelNormAndMaxAbs) {
  const std::vector<double> ref = {3.0, 4.0};  // ||ref|| = 5
  const std::vector<float> got = {3.0f, 4.5f};
  EXPECT_DOUBLE_EQ(rel_norm_error(got, ref), 0.1);
  EXPECT_DOUBLE_EQ(max_abs_error(got, ref), 0.5);
  const std::vector<double> gotd = {0.0, 4.0};
  EXPECT_DOUBLE_EQ(rel_norm_error(gotd, ref), 0.6);
  EXPECT_DOUBLE_EQ(max_abs_error(gotd, ref), 3.0);
  EXPECT_EQ(rel_norm_error(ref, ref), 0.0);
}

TEST(Compare, ZeroReferenceGivesNormOfGot) {
  const std::vector<double> ref = {0.0, 0.0};
  EXPECT_DOUBLE_EQ(rel_norm_error(std::vector<double>{3.0, 4.0}, ref), 5.0);
  EXPECT_EQ(rel_norm_error(std::vector<float>{0.0f, 0.0f}, ref), 0.0);
}

TEST(Compare, NonFiniteGotIsInfinite) {
  const std::vector<double> ref = {1.0, 2.0};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(rel_norm_error(std::vector<float>{1.0f, nan}, ref), kInf);
  EXPECT_EQ(max_abs_error(std::vector<float>{1.0f, nan}, ref), kInf);
  EXPECT_EQ(rel_norm_error(std::vector<double>{kInf, 2.0}, ref), kInf);
  EXPECT_EQ(max_abs_error(std::vector<double>{-kInf, 2.0}, ref), kInf);
}

TEST(Compare, MatchingInfinitiesAreExact) {  // LSE of fully masked attention rows
  const std::vector<double> ref = {-kInf, 2.0};
  EXPECT_EQ(rel_norm_error(std::vector<double>{-kInf, 2.0}, ref), 0.0);
  EXPECT_EQ(max_abs_error(std::vector<float>{-INFINITY, 2.5f}, ref), 0.5);
  EXPECT_EQ(rel_norm_error(std::vector<double>{0.0, 2.0}, ref), kInf);
  EXPECT_EQ(rel_norm_error(std::vector<double>{kInf, 2.0}, ref), kInf);
}

TEST(Compare, SizeMismatchThrows) {
  EXPECT_THROW(rel_norm_error(std::vector<double>{1.0}, std::vector<double>{1.0, 2.0}), Error);
}

}  // namespace
}  // namespace detfuse::reference
