// Host-side bfloat16 conversion (round to nearest even, NaN preserved), so that
// inputs, references and device buffers agree bit for bit on what bf16 means.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace detfuse {

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16_bits(v[i]);
  return out;
}

inline std::vector<float> from_bf16_bits(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits_to_float(v[i]);
  return out;
}

}  // namespace detfuse
