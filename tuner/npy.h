// A small .npy (NumPy format 1.0/2.0/3.0) reader and writer for the arrays a
// user hands to `verify` / `bench` (--inputs DIR) and the outputs they dump
// (--dump DIR). Supported: little-endian float32 ('<f4') and int64 ('<i8'),
// C order. Anything else (big-endian, Fortran order, other dtypes, a truncated
// file, a malformed header) is refused with an invalid_argument naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace detfuse::tuner {

struct NpyArray {
  std::string descr;            // "<f4" or "<i8"
  std::vector<int64_t> shape;   // C order
  std::vector<float> f32;       // when descr == "<f4"
  std::vector<int64_t> i64;     // when descr == "<i8"
  int64_t count() const;        // product of shape (1 for a 0-d array)
};

// Refuses (invalid_argument naming the file) a missing file, a directory, a
// header whose shape has a dimension above kMaxDim or whose byte count
// overflows, and a file whose size disagrees with its header, all before the
// data is allocated; a host allocation failure is a named runtime Error.
NpyArray read_npy(const std::filesystem::path& path);
// Parses a whole file held in memory; `name` is used in error messages.
NpyArray parse_npy(const std::string& bytes, const std::string& name);

// For a float32 array: nullopt when every value is finite, else what is not,
// e.g. "2 NaN and 1 infinite value(s); the first at [3, 17] is NaN".
std::optional<std::string> nonfinite_values(const NpyArray& a);

void write_npy(const std::filesystem::path& path, const std::vector<float>& data, const std::vector<int64_t>& shape);
void write_npy(const std::filesystem::path& path, const std::vector<int64_t>& data, const std::vector<int64_t>& shape);

}  // namespace detfuse::tuner
