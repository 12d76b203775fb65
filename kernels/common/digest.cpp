#include "kernels/common/digest.h"

#include <cstdio>
#include <vector>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "kernels/common/cuda_check.h"

namespace detfuse {

std::string Digest::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

Digest Digest::from_hex(const std::string& hex) {
  if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw invalid_argument("malformed digest '" + hex + "': expected 32 hex digits");
  Digest d;
  d.hi = std::stoull(hex.substr(0, 16), nullptr, 16);
  d.lo = std::stoull(hex.substr(16), nullptr, 16);
  return d;
}

Digest digest_host(const void* data, size_t bytes) {
  XXH128_hash_t h = XXH3_128bits(data, bytes);
  return Digest{h.high64, h.low64};
}

namespace {
std::vector<unsigned char> to_host(const void* device_data, size_t bytes, cudaStream_t stream) {
  std::vector<unsigned char> host(bytes);
  if (bytes) {
    DETFUSE_CUDA_CHECK(cudaMemcpyAsync(host.data(), device_data, bytes, cudaMemcpyDeviceToHost, stream));
    DETFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return host;
}
}  // namespace

Digest digest_device(const void* device_data, size_t bytes, cudaStream_t stream) {
  auto host = to_host(device_data, bytes, stream);
  return digest_host(host.data(), host.size());
}

Digester::Digester() : state_(XXH3_createState()) {
  if (!state_) throw Error("XXH3_createState failed");
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Digester::~Digester() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Digester::add_host(const void* data, size_t bytes) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, bytes);
}
void Digester::add_device(const void* device_data, size_t bytes, cudaStream_t stream) {
  auto host = to_host(device_data, bytes, stream);
  add_host(host.data(), host.size());
}
Digest Digester::finish() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return Digest{h.high64, h.low64};
}

}  // namespace detfuse
