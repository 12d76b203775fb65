// Seeded input generation (see inputs.h). This file is compiled with
// -ffp-contract=off (reference/CMakeLists.txt) so that no FMA changes a bit.
#include "reference/inputs.h"

#include <cmath>

#include "kernels/common/error.h"
#include "kernels/common/host_bf16.h"
#include "reference/parallel.h"

namespace detfuse::reference {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// log(u) for u in (0, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its series.
double hand_log(double u) {
  int e = 0;
  double m = std::frexp(u, &e);  // exact; m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double term = s, sum = 0.0;
  for (int k = 1; k <= 31; k += 2) {  // s^2 <= 0.0295: 16 terms reach 1e-24
    sum += term / double(k);
    term *= s2;
  }
  constexpr double kLn2Hi = 0.693147180369123816490;     // exact in 32 bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
  return double(e) * kLn2Hi + (2.0 * sum + double(e) * kLn2Lo);
}

// cos(2 pi v) for v in [0, 1), by symmetry down to cos or sin on [0, pi/4].
double hand_cos_2pi(double v) {
  constexpr double kTwoPi = 6.28318530717958647692;
  double w = v > 0.5 ? 1.0 - v : v;  // cos(2 pi v) = cos(2 pi (1 - v)); w in [0, 0.5]
  double sign = 1.0;
  if (w > 0.25) {  // cos(2 pi w) = -cos(2 pi (0.5 - w))
    w = 0.5 - w;
    sign = -1.0;
  }
  // w in [0, 0.25]: a = 2 pi w in [0, pi/2]
  bool use_sin = false;
  if (w > 0.125) {  // cos(a) = sin(pi/2 - a)
    w = 0.25 - w;
    use_sin = true;
  }
  const double a = kTwoPi * w;  // [0, pi/4]
  const double a2 = a * a;
  double sum = 0.0, term = use_sin ? a : 1.0;
  int k = use_sin ? 1 : 0;
  for (int it = 0; it < 12; ++it, k += 2) {  // (pi/4)^24 / 24! ~ 1e-26
    sum += term;
    term = -term * a2 / double((k + 1) * (k + 2));
  }
  return sign * sum;
}

constexpr double kTwoM53 = 1.0 / 9007199254740992.0;  // 2^-53

// Stream tags: one per tensor.
enum : uint64_t { kX = 1, kW = 2, kY = 3, kIgnore = 4, kDloss = 5, kSign = 6, kQ = 11, kK = 12, kV = 13, kDO = 14 };

}  // namespace

uint64_t splitmix64_at(uint64_t key, uint64_t index) { return mix64(key + (index + 1) * kGamma); }

uint64_t stream_key(uint64_t seed, uint64_t stream) { return mix64(seed ^ mix64(stream * 0xD1B54A32D192ED03ull)); }

double uniform_at(uint64_t key, uint64_t index) { return double(splitmix64_at(key, index) >> 11) * kTwoM53; }

double normal_at(uint64_t key, uint64_t index) {
  const double u1 = double((splitmix64_at(key, 2 * index) >> 11) + 1) * kTwoM53;  // (0, 1]
  const double u2 = double(splitmix64_at(key, 2 * index + 1) >> 11) * kTwoM53;    // [0, 1)
  return std::sqrt(-2.0 * hand_log(u1)) * hand_cos_2pi(u2);
}

float round_to_dtype(float v, DType dtype) { return dtype == DType::bf16 ? round_to_bf16(v) : v; }

void fill_normal(float* out, int64_t n, uint64_t key, double stddev, DType dtype) {
  constexpr int64_t kChunk = 1 << 16;
  detail::parallel_for(detail::chunks(n, kChunk), 0, [&](int64_t c, int) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i)
      out[i] = round_to_dtype(float(stddev * normal_at(key, uint64_t(i))), dtype);
  });
}

FlceInputs make_flce_inputs(const FlceProblem& p, uint64_t seed, const FlceInputOptions& o) {
  p.validate();
  if (!(o.logit_std >= 0) || !std::isfinite(o.logit_std))
    throw invalid_argument("FlceInputOptions.logit_std: must be finite and >= 0");
  if (!(o.ignore_fraction >= 0 && o.ignore_fraction <= 1))
    throw invalid_argument("FlceInputOptions.ignore_fraction: must be in [0, 1]");
  if (!std::isfinite(o.logit_offset)) throw invalid_argument("FlceInputOptions.logit_offset: must be finite");
  const bool offset = o.logit_offset != 0.0;
  if (offset && p.D < 2) throw invalid_argument("FlceInputOptions.logit_offset: needs D >= 2");

  FlceInputs in;
  in.X.resize(size_t(p.N * p.D));
  in.W.resize(size_t(p.V * p.D));
  in.y.resize(size_t(p.N));
  in.dloss.resize(size_t(p.N));
  const double d_eff = double(offset ? p.D - 1 : p.D);
  fill_normal(in.X.data(), p.N * p.D, stream_key(seed, kX), 1.0, p.dtype);
  fill_normal(in.W.data(), p.V * p.D, stream_key(seed, kW), o.logit_std / std::sqrt(d_eff), p.dtype);
  const uint64_t ky = stream_key(seed, kY), ki = stream_key(seed, kIgnore), kd = stream_key(seed, kDloss),
                 ks = stream_key(seed, kSign);
  for (int64_t i = 0; i < p.N; ++i) {
    const bool ignored = uniform_at(ki, uint64_t(i)) < o.ignore_fraction;
    const uint64_t r = splitmix64_at(ky, uint64_t(i));
    in.y[size_t(i)] = ignored ? p.ignore_index : int64_t((unsigned __int128)r * uint64_t(p.V) >> 64);
    in.dloss[size_t(i)] = float(0.5 + uniform_at(kd, uint64_t(i)));
    if (offset) in.X[size_t(i * p.D)] = (splitmix64_at(ks, uint64_t(i)) >> 63) ? -1.0f : 1.0f;
  }
  if (offset) {
    const float w0 = round_to_dtype(float(o.logit_offset), p.dtype);
    for (int64_t j = 0; j < p.V; ++j) in.W[size_t(j * p.D)] = w0;
  }
  return in;
}

AttentionInputs make_attention_inputs(const AttentionProblem& p, uint64_t seed) {
  p.validate();
  AttentionInputs in;
  const int64_t nq = p.B * p.H * p.Sq * p.d, nk = p.B * p.Hkv * p.Sk * p.d;
  in.Q.resize(size_t(nq));
  in.dO.resize(size_t(nq));
  in.K.resize(size_t(nk));
  in.V.resize(size_t(nk));
  fill_normal(in.Q.data(), nq, stream_key(seed, kQ), 1.0, p.dtype);
  fill_normal(in.K.data(), nk, stream_key(seed, kK), 1.0, p.dtype);
  fill_normal(in.V.data(), nk, stream_key(seed, kV), 1.0, p.dtype);
  fill_normal(in.dO.data(), nq, stream_key(seed, kDO), 1.0, p.dtype);
  return in;
}

}  // namespace detfuse::reference
