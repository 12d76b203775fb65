#include <gtest/gtest.h>

#include <fstream>

#include "kernels/common/error.h"
#include "tests/tuner/fakes.h"
#include "tuner/npy.h"

namespace detfuse::tuner {
namespace {

TEST(Npy, RoundTripFloat32AndInt64) {
  testing::TempDir tmp;
  std::vector<float> f = {1.5f, -2.25f, 3.0f, 0.0f, 1e-30f, -7.0f};
  write_npy(tmp / "f.npy", f, {2, 3});
  NpyArray a = read_npy(tmp / "f.npy");
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.f32, f);
  std::vector<int64_t> y = {0, -100, 5, int64_t(1) << 40};
  write_npy(tmp / "y.npy", y, {4});
  NpyArray b = read_npy(tmp / "y.npy");
  EXPECT_EQ(b.descr, "<i8");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(b.i64, y);
  // Header padded so the data starts at a multiple of 64 bytes (numpy's layout).
  std::ifstream in(tmp / "y.npy", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ((bytes.size() - y.size() * 8) % 64, 0u);
  EXPECT_NE(bytes.find("'shape': (4,)"), std::string::npos);
}

TEST(Npy, ReadsWhatNumpyWrites) {
  // np.save of np.array([[1, 2]], dtype='<f4'): version 1.0, padded header.
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }";
  h.append(64 - (10 + h.size() + 1) % 64, ' ');
  h += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h;
  float v[2] = {1.f, 2.f};
  bytes.append(reinterpret_cast<const char*>(v), 8);
  NpyArray a = parse_npy(bytes, "x.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.f32, (std::vector<float>{1.f, 2.f}));
}

std::string npy_with(const std::string& header, size_t data_bytes) {
  std::string h = header + "\n";
  std::string b = std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h;
  b.append(data_bytes, '\0');
  return b;
}

TEST(Npy, RefusesMalformedOrUnsupportedFiles) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"garbage", "not a numpy file at all"},
      {"big-endian", npy_with("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8)},
      {"float64", npy_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16)},
      {"fortran", npy_with("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16)},
      {"truncated data", npy_with("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 8)},
      {"extra data", npy_with("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", 16)},
      {"bad shape", npy_with("{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }", 4)},
      {"no descr", npy_with("{'fortran_order': False, 'shape': (1,), }", 4)},
      {"truncated header", std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18)},
  };
  for (const auto& [what, bytes] : bad) {
    try {
      parse_npy(bytes, "in.npy");
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << what;
      EXPECT_EQ(std::string(e.what()).rfind("in.npy", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(read_npy("/nonexistent/x.npy"), Error);
}

}  // namespace
}  // namespace detfuse::tuner
