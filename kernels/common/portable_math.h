// Portable fp32 arithmetic: one exp, log and tanh, and explicitly rounded
// +, -, *, /, fma, written once for the device and the host, so that a CPU
// emulation (reference/emulate*.cpp) reproduces the bits of the fp32 `fma`
// engines (the `portable` determinism level, DESIGN.md).
//
// Why: CUDA's expf/logf/tanhf are not the host's (different algorithms and
// errors), and nvcc contracts a*b+c into one fma where it likes (-fmad=true);
// neither can be reproduced on a CPU from documentation. Here every operation
// is a named, IEEE-754 correctly rounded step:
//   device: __fmaf_rn, __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn (never
//           merged or split by nvcc: CUDA Programming Guide, "Intrinsic
//           functions"), no flush to zero (the library builds without
//           --use_fast_math / -ftz);
//   host:   std::fma and plain float +, -, *, / in a translation unit built
//           with -ffp-contract=off (reference/CMakeLists.txt), SSE float
//           arithmetic (FLT_EVAL_METHOD 0), round to nearest, no FTZ/DAZ.
// The functions are therefore pure functions of their argument bits, the same
// on every GPU and every x86-64 (or any IEEE) CPU.
//
// Accuracy (against float64, measured by tests/reference/test_emulate.cpp over
// dense grids): exp and log within 2 ulp, tanh within 3 ulp. The algorithms
// (no third-party code; constants are Taylor coefficients and ln 2 split):
//   exp(x): n = round(x log2 e) (the 1.5*2^23 rounding trick), r = x - n ln2
//           in two fma steps (ln 2 = LN2_HI + LN2_LO), e^r by its degree-7
//           Taylor polynomial (|r| <= ln2/2: truncation 5e-9 relative) in
//           Horner form, times 2^n applied as two exact powers of two so that
//           results in the subnormal range are rounded once.
//   log(x): x = 2^e m with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact),
//           s = f / (2 + f), log(1 + f) = 2 atanh(s) = 2s + s*(2s^2/3 + 2s^4/5
//           + ... + 2s^10/11) (|s| < 0.172: truncation 3e-10), arranged as
//           f - (f^2/2 - s (f^2/2 + R)) so the leading term stays exact, plus
//           e ln 2 in two parts.
//   tanh(x): |x| < 0.625: the Taylor series x + x^3 P(x^2) to x^21 (1.2e-9 at
//           0.625); up to 9.1: 1 - 2 / (exp(2|x|) + 1); beyond: +-1.
// Special values: exp(-inf) = 0, exp(+inf) = inf, log(0) = -inf, log(x < 0)
// = NaN, tanh(+-inf) = +-1. NaN inputs give a NaN (its payload may differ
// between host and device: compare NaN-free data bit for bit).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DETFUSE_PM_FN __host__ __device__ __forceinline__
#else
#define DETFUSE_PM_FN inline
#endif

namespace detfuse::pm {

// ------------------------------------------------------------ rounded steps
DETFUSE_PM_FN float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
DETFUSE_PM_FN float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DETFUSE_PM_FN float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DETFUSE_PM_FN float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
DETFUSE_PM_FN float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

DETFUSE_PM_FN uint32_t bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
DETFUSE_PM_FN float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
// The larger of a and b, symmetric in its arguments to the bit (so every lane
// of a butterfly gets the same value): between +0 and -0 it is +0, between
// equal bits either. No fmaxf, whose choice of zero is not the same everywhere.
DETFUSE_PM_FN float max(float a, float b) {
  if (b > a) return b;
  if (a > b) return a;
  return bits(a) <= bits(b) ? a : b;
}
// 2^e for e in [-126, 127] (a normal number), exactly.
DETFUSE_PM_FN float pow2i(int e) { return from_bits(uint32_t(e + 127) << 23); }

constexpr float kInf = __builtin_huge_valf();

// ---------------------------------------------------------------------- exp
DETFUSE_PM_FN float exp(float x) {
  if (!(x == x)) return add(x, x);               // NaN
  if (x > 88.72283935546875f) return kInf;      // e^x > FLT_MAX (rounds to inf)
  if (x < -103.97283935546875f) return 0.f;     // e^x < 2^-150 (rounds to 0)
  constexpr float kLog2e = 1.44269502162933349609375f;  // log2(e) rounded
  constexpr float kRound = 12582912.f;                  // 1.5 * 2^23
  constexpr float kLn2Hi = 0.693145751953125f;          // ln 2, 16 significant bits (n * hi exact)
  constexpr float kLn2Lo = 1.428606765330187045e-06f;   // ln 2 - kLn2Hi
  const float t = fma(x, kLog2e, kRound);
  const float n = sub(t, kRound);  // round(x log2 e), |n| <= 150
  float r = fma(-n, kLn2Hi, x);
  r = fma(-n, kLn2Lo, r);
  // e^r = sum r^k / k!, k <= 7 (Taylor coefficients rounded to fp32).
  float q = 1.98412701e-4f;        // 1/5040
  q = fma(q, r, 1.38888892e-3f);   // 1/720
  q = fma(q, r, 8.33333377e-3f);   // 1/120
  q = fma(q, r, 4.16666679e-2f);   // 1/24
  q = fma(q, r, 1.66666672e-1f);   // 1/6
  q = fma(q, r, 0.5f);
  q = fma(q, r, 1.f);
  q = fma(q, r, 1.f);
  const int ni = int(n);
  const int e1 = ni / 2, e2 = ni - e1;  // each in [-75, 64]
  return mul(mul(q, pow2i(e1)), pow2i(e2));
}

// ---------------------------------------------------------------------- log
DETFUSE_PM_FN float log(float x) {
  if (!(x == x)) return add(x, x);
  if (x < 0.f) return sub(kInf, kInf);  // NaN
  if (x == 0.f) return -kInf;
  if (x == kInf) return x;
  uint32_t u = bits(x);
  int e = 0;
  if (u < 0x00800000u) {  // subnormal: scale by 2^23 (exact)
    u = bits(mul(x, 8388608.f));
    e = -23;
  }
  e += int(u >> 23) - 127;
  float m = from_bits((u & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.41421353816986083984375f) {                 // sqrt(2) rounded to fp32
    m = mul(m, 0.5f);                                   // exact
    e += 1;
  }
  const float f = sub(m, 1.f);  // exact (Sterbenz), in [-0.293, 0.415]
  const float s = div(f, add(2.f, f));
  const float z = mul(s, s);
  // R = 2 z/3 + 2 z^2/5 + ... + 2 z^5/11 (Horner in z, times z).
  float R = 0.181818187f;          // 2/11
  R = fma(R, z, 0.222222224f);     // 2/9
  R = fma(R, z, 0.285714298f);     // 2/7
  R = fma(R, z, 0.400000006f);     // 2/5
  R = fma(R, z, 0.666666687f);     // 2/3
  R = mul(R, z);
  // log(1 + f) = 2s + sR = f - (hf - s (hf + R)) with hf = f^2 / 2, since
  // 2s = f - s f.
  const float hf = mul(mul(0.5f, f), f);
  const float lg1p = sub(f, sub(hf, mul(s, add(hf, R))));
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.428606765330187045e-06f;
  const float fe = float(e);
  return add(fma(fe, kLn2Lo, lg1p), mul(fe, kLn2Hi));  // e*hi exact (|e| <= 149)
}

// --------------------------------------------------------------------- tanh
DETFUSE_PM_FN float tanh(float x) {
  if (!(x == x)) return add(x, x);
  const float a = x < 0.f ? -x : x;
  float t;
  if (a < 0.625f) {
    // tanh x = x + x^3 P(x^2): Taylor coefficients 2^2n (2^2n - 1) B_2n / (2n)!.
    const float z = mul(x, x);
    float q = 9.69153796e-05f;      // x^21
    q = fma(q, z, -2.39129114e-04f);  // x^19
    q = fma(q, z, 5.90027441e-04f);   // x^17
    q = fma(q, z, -1.45583439e-03f);  // x^15
    q = fma(q, z, 3.59212804e-03f);   // x^13
    q = fma(q, z, -8.86323553e-03f);  // x^11
    q = fma(q, z, 2.18694885e-02f);   // x^9
    q = fma(q, z, -5.39682540e-02f);  // x^7
    q = fma(q, z, 1.33333340e-01f);   // x^5
    q = fma(q, z, -3.33333343e-01f);  // x^3
    return fma(mul(q, z), x, x);
  }
  if (a > 9.1f) {
    t = 1.f;
  } else {
    const float e = exp(add(a, a));
    t = sub(1.f, div(2.f, add(e, 1.f)));
  }
  return x < 0.f ? -t : t;
}

}  // namespace detfuse::pm

#undef DETFUSE_PM_FN
