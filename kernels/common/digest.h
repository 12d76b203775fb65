// Bitwise digests: XXH3-128 over the raw bytes of host or device buffers. Two
// runs are bitwise identical exactly when (with overwhelming probability) their
// digests are equal. A Digester combines several outputs into one digest.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace detfuse {

struct Digest {
  uint64_t hi = 0, lo = 0;
  std::string hex() const;  // 32 lowercase hex digits, hi first
  static Digest from_hex(const std::string& hex);  // throws Error on malformed text
  friend bool operator==(const Digest&, const Digest&) = default;
  friend auto operator<=>(const Digest&, const Digest&) = default;
};

Digest digest_host(const void* data, size_t bytes);
// Copies the device bytes to the host (synchronising `stream`) and hashes them.
Digest digest_device(const void* device_data, size_t bytes, cudaStream_t stream = nullptr);

// Streaming digest of several buffers in order.
class Digester {
 public:
  Digester();
  ~Digester();
  Digester(const Digester&) = delete;
  Digester& operator=(const Digester&) = delete;
  void add_host(const void* data, size_t bytes);
  void add_device(const void* device_data, size_t bytes, cudaStream_t stream = nullptr);
  Digest finish() const;

 private:
  void* state_;
};

}  // namespace detfuse
