// Shared helpers of the GEMM engine tests: host operands in either major-ness
// with padded leading dimensions, a float64 reference GEMM, and error norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/host_bf16.h"
#include "kernels/flce/gemm.cuh"

namespace detfuse::engine_test {

using flce::Major;

inline const char* major_name(Major m) { return m == Major::K ? "K" : "MN"; }

// One operand X(r, k), r < rows, k < K, stored Major::K (X[off + r*ld + k]) or
// Major::MN (X[off + k*ld + r]). `data` holds the whole allocation: `off`
// leading elements and the padding are filled with `fill` (NaN by default, so
// that an engine reading outside the operand is caught).
struct HostOperand {
  int rows = 0, K = 0;
  Major major = Major::K;
  int64_t ld = 0;
  size_t off = 0;
  std::vector<float> data;

  float at(int r, int k) const {
    return data[off + (major == Major::K ? size_t(r) * ld + k : size_t(k) * ld + r)];
  }
};

// ld = contiguous extent (K or rows) plus `pad`, rounded up to `ld_multiple`.
// Values uniform in [-scale, scale), rounded to bf16 if `bf16`.
inline HostOperand make_operand(int rows, int K, Major major, int pad, size_t off, std::mt19937& rng,
                                float scale = 1.f, bool bf16 = false, int ld_multiple = 1,
                                float fill = std::numeric_limits<float>::quiet_NaN()) {
  HostOperand h;
  h.rows = rows;
  h.K = K;
  h.major = major;
  const int64_t contiguous = major == Major::K ? K : rows;
  const int64_t outer = major == Major::K ? rows : K;
  h.ld = (contiguous + pad + ld_multiple - 1) / ld_multiple * ld_multiple;
  if (h.ld == 0) h.ld = 1;
  h.off = off;
  // Allocation: off + outer*ld, plus slack up to a multiple of 8 past the end
  // (the bf16 engine may read a 16-byte chunk that starts in range).
  h.data.assign(off + size_t(outer) * h.ld + 8, fill);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < K; ++k) {
      float v = u(rng);
      if (bf16) v = round_to_bf16(v);
      h.data[off + (major == Major::K ? size_t(r) * h.ld + k : size_t(k) * h.ld + r)] = v;
    }
  return h;
}

// ref[m*N + n] = sum_{k0 <= k < k1} A(m, k) B(n, k) in float64.
inline std::vector<double> ref_gemm(const HostOperand& A, const HostOperand& B, int M, int N, int k0, int k1) {
  std::vector<double> ref(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0.0;
      for (int k = k0; k < k1; ++k) s += double(A.at(m, k)) * double(B.at(n, k));
      ref[size_t(m) * N + n] = s;
    }
  return ref;
}

// ||out - ref||_2 / ||ref||_2 over the [M, N] block of `out` (row stride ldc);
// if ||ref|| == 0, the absolute norm of out.
inline double rel_norm_error(const std::vector<float>& out, int64_t ldc, const std::vector<double>& ref, int M,
                             int N) {
  double num = 0, den = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const double d = double(out[size_t(m) * ldc + n]) - ref[size_t(m) * N + n];
      num += d * d;
      den += ref[size_t(m) * N + n] * ref[size_t(m) * N + n];
    }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Number of non-finite elements in the [M, N] block (poison left behind).
inline int64_t count_nonfinite(const std::vector<float>& out, int64_t ldc, int M, int N) {
  int64_t bad = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      if (!std::isfinite(out[size_t(m) * ldc + n])) ++bad;
  return bad;
}

// Every byte of the padding columns [N, ldc) must still be 0xFF (poison): the
// engine wrote nothing outside [M, N).
inline int64_t count_touched_padding(const std::vector<float>& out, int64_t ldc, int M, int N) {
  int64_t touched = 0;
  for (int m = 0; m < M; ++m)
    for (int64_t n = N; n < ldc; ++n) {
      uint32_t u;
      std::memcpy(&u, &out[size_t(m) * ldc + n], 4);
      if (u != 0xFFFFFFFFu) ++touched;
    }
  return touched;
}

struct Shape {
  int M, N, K;
  int pad;     // extra elements of leading dimension beyond the extent
  size_t off;  // element offset of the operand base (1 => not 16-byte aligned)
};

inline std::string shape_name(const Shape& s) {
  return "M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
         " pad=" + std::to_string(s.pad) + " off=" + std::to_string(s.off);
}

}  // namespace detfuse::engine_test
