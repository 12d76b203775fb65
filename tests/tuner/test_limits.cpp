// Bad input, one rule: the shared dimension limit, overflow-safe byte counts,
// the memory check before allocation, the hardened .npy reader (with a seeded
// fuzz) and the non-finite report.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "kernels/common/error.h"
#include "kernels/common/problem.h"
#include "tests/tuner/fakes.h"
#include "tuner/footprint.h"
#include "tuner/npy.h"

namespace detfuse::tuner {
namespace {

std::string what_of(const std::function<void()>& f, Error::Kind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(Limits, OneDimensionRuleForValidationAndCanRun) {
  FlceProblem p = testing::problem(kMaxDim, 1, 1);
  EXPECT_NO_THROW(p.validate());
  EXPECT_FALSE(p.dim_error());
  for (int which = 0; which < 3; ++which) {
    FlceProblem q = testing::problem(4, 4, 4);
    (which == 0 ? q.N : which == 1 ? q.D : q.V) = kMaxDim + 1;
    const char* name = which == 0 ? "N" : which == 1 ? "D" : "V";
    ASSERT_TRUE(q.dim_error());
    EXPECT_EQ(q.dim_error()->rfind(std::string(name) + ": must be at most 2^30", 0), 0u) << *q.dim_error();
    Error::Kind k{};
    // validate() refuses with the very text can_run is told to give.
    EXPECT_EQ(what_of([&] { q.validate(); }, &k), *q.dim_error());
    EXPECT_EQ(k, Error::Kind::invalid_argument);
  }
  AttentionProblem a;
  a.B = a.H = a.Hkv = a.d = 1;
  a.Sq = 4;
  a.Sk = kMaxDim + 1;
  EXPECT_NE(what_of([&] { a.validate(); }).find("Sk: must be at most 2^30"), std::string::npos);
}

TEST(Limits, CheckedBytesDetectsOverflow) {
  const int64_t g = int64_t(1) << 31;
  EXPECT_EQ(checked_bytes({g, g}, 2), uint64_t(1) << 63);
  EXPECT_FALSE(checked_bytes({g, g}, 4));  // 2^64
  EXPECT_FALSE(checked_bytes({-1, 4}, 4));
  EXPECT_EQ(checked_bytes({0, g, g, g}, 8), 0u);
  EXPECT_EQ(checked_bytes({}, 8), 8u);
  EXPECT_FALSE(checked_add(UINT64_MAX, 1));
  EXPECT_FALSE(checked_add(std::nullopt, 1));
  // One array of the largest valid problem never overflows (the rule's
  // point); their sum can (4 x 2^62 bytes), and that is a runtime error like
  // any other shape beyond memory, not a wrap-around.
  EXPECT_TRUE(checked_bytes({kMaxDim, kMaxDim}, 8));
  FlceProblem big = testing::problem(kMaxDim, kMaxDim, kMaxDim, DType::f32);
  EXPECT_FALSE(big.device_io_bytes());
  Error::Kind k{};
  EXPECT_NE(what_of([&] { check_fits(big, nullptr); }, &k).find("overflows 64 bits"), std::string::npos);
  EXPECT_EQ(k, Error::Kind::runtime);
}

TEST(Limits, ShapesThatCannotFitAreNamedErrorsBeforeAllocation) {
  // Every dimension valid, the arrays far beyond any machine.
  FlceProblem p = testing::problem(int64_t(1) << 30, int64_t(1) << 30, 1);
  Error::Kind k{};
  const std::string e = what_of([&] { check_fits(p, nullptr); }, &k);
  EXPECT_NE(e.find("host memory"), std::string::npos) << e;
  EXPECT_NE(e.find(p.shape()), std::string::npos) << e;
  EXPECT_EQ(k, Error::Kind::runtime);  // exit 1: a runtime failure, not bad usage
  // Fits the host, not a small device: named with the device.
  DeviceInfo small = testing::fake_device();
  small.name = "Tiny GPU";
  small.total_memory_bytes = uint64_t(64) << 20;
  FlceProblem q = testing::problem(4096, 4096, 4096);  // ~200 MiB of inputs and outputs
  EXPECT_NO_THROW(check_fits(q, nullptr));
  const std::string e2 = what_of([&] { check_fits(q, &small); });
  EXPECT_NE(e2.find("device memory"), std::string::npos) << e2;
  EXPECT_NE(e2.find("Tiny GPU"), std::string::npos) << e2;
  DeviceInfo h200 = testing::fake_device();
  EXPECT_NO_THROW(check_fits(q, &h200));
}

std::string npy_bytes(const std::string& descr, const std::string& shape, size_t data_bytes) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  h.append(64 - (10 + h.size() + 1) % 64, ' ');
  h += '\n';
  std::string b = std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h;
  b.append(data_bytes, '\0');
  return b;
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

TEST(Limits, NpyHeadersAreValidatedBeforeTheDataIsAllocated) {
  testing::TempDir tmp;
  const auto file = tmp / "X.npy";
  // (2^31, 2^31): once `vector::_M_default_append`; now the dimension rule.
  write_file(file, npy_bytes("<f4", "(2147483648, 2147483648)", 16));
  std::string e = what_of([&] { read_npy(file); });
  EXPECT_EQ(e.rfind(file.string() + ": ", 0), 0u) << e;
  EXPECT_NE(e.find("above the limit of 2^30"), std::string::npos) << e;
  // Valid dimensions whose product overflows 64 bits.
  write_file(file, npy_bytes("<f4", "(1073741824, 1073741824, 1073741824)", 16));
  e = what_of([&] { read_npy(file); });
  EXPECT_NE(e.find("overflows 64 bits"), std::string::npos) << e;
  // A header that claims 4 EiB on a 16-byte file: refused by size, nothing allocated.
  write_file(file, npy_bytes("<f4", "(1073741824, 1073741824)", 16));
  e = what_of([&] { read_npy(file); });
  EXPECT_NE(e.find("does not match shape (1073741824, 1073741824)"), std::string::npos) << e;
  EXPECT_NE(e.find("16 bytes"), std::string::npos) << e;
  // Dtype and order are named.
  write_file(file, npy_bytes("<f8", "(2,)", 16));
  EXPECT_NE(what_of([&] { read_npy(file); }).find("dtype '<f8' not supported"), std::string::npos);
  // A directory named X.npy, a missing file, a fifo-like non-regular file.
  const auto dir = tmp / "d" / "X.npy";
  std::filesystem::create_directories(dir);
  e = what_of([&] { read_npy(dir); });
  EXPECT_EQ(e, dir.string() + ": is a directory, not a .npy file");
  e = what_of([&] { read_npy(tmp / "missing.npy"); });
  EXPECT_EQ(e.rfind((tmp / "missing.npy").string() + ": cannot open", 0), 0u) << e;
  // A valid file reads back.
  write_file(file, npy_bytes("<i8", "(3,)", 24));
  NpyArray a = read_npy(file);
  EXPECT_EQ(a.i64, (std::vector<int64_t>{0, 0, 0}));
}

TEST(Limits, NonFiniteValuesAreCountedAndLocated) {
  NpyArray a;
  a.descr = "<f4";
  a.shape = {3, 4};
  a.f32.assign(12, 1.f);
  EXPECT_FALSE(nonfinite_values(a));
  a.f32[6] = std::numeric_limits<float>::infinity();  // [1, 2]
  a.f32[9] = std::nanf("");
  a.f32[11] = -std::numeric_limits<float>::infinity();
  auto r = nonfinite_values(a);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, "1 NaN and 2 infinite value(s); the first at [1, 2] is infinite");
  a.f32.assign(12, 0.f);
  a.f32[0] = std::nanf("");
  EXPECT_EQ(*nonfinite_values(a), "1 NaN value(s); the first at [0, 0] is NaN");
}

// Seeded fuzz: random bytes and mutated valid files never crash the reader,
// never throw anything but detfuse::Error naming the file, and whatever is
// accepted is self-consistent.
TEST(Limits, NpyReaderFuzz) {
  std::mt19937_64 rng(20261201);
  const std::string good_f = npy_bytes("<f4", "(3, 5)", 60), good_i = npy_bytes("<i8", "(7,)", 56);
  int accepted = 0, refused = 0;
  for (int it = 0; it < 20000; ++it) {
    std::string b;
    const int kind = int(rng() % 4);
    if (kind == 0) {
      b.resize(rng() % 200);
      for (char& c : b) c = char(rng());
    } else {
      b = (rng() % 2) ? good_f : good_i;
      const int edits = 1 + int(rng() % 4);
      for (int k = 0; k < edits; ++k) {
        const size_t pos = kind == 1 ? rng() % std::min<size_t>(b.size(), 80) : rng() % b.size();
        switch (rng() % 3) {
          case 0: b[pos] = char(rng()); break;
          case 1: b.erase(pos, 1 + rng() % 8); break;
          default: b.insert(pos, std::string(1 + rng() % 8, "0123456789(),: '<>fi48"[rng() % 22])); break;
        }
        if (b.empty()) break;
      }
    }
    try {
      NpyArray a = parse_npy(b, "fuzz.npy");
      ++accepted;
      ASSERT_TRUE(a.descr == "<f4" || a.descr == "<i8");
      ASSERT_EQ(uint64_t(a.count()), a.descr == "<f4" ? a.f32.size() : a.i64.size());
      for (int64_t d : a.shape) ASSERT_LE(d, kMaxDim);
    } catch (const Error& e) {
      ++refused;
      ASSERT_EQ(std::string(e.what()).rfind("fuzz.npy: ", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(accepted, 0);  // the mutations leave some files valid: the check above ran
  EXPECT_GT(refused, 10000);
}

TEST(Limits, SoftCapStopsLoopsPastTheirMinimum) {
  testing::FakeClock clock;
  SoftCap cap(10, clock.fn());
  EXPECT_TRUE(cap.keep_going(5, 2));
  clock.now += 10;
  EXPECT_TRUE(cap.spent());
  EXPECT_TRUE(cap.keep_going(1, 2));  // the minimum is never cut
  EXPECT_FALSE(cap.keep_going(2, 2));
  SoftCap zero(0, clock.fn());  // a cap of 0 is spent at once, not "no cap"
  EXPECT_TRUE(zero.spent());
  SoftCap none(std::numeric_limits<double>::infinity(), clock.fn());
  clock.now += 1e9;
  EXPECT_FALSE(none.spent());
}

}  // namespace
}  // namespace detfuse::tuner
