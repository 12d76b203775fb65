#include "tuner/footprint.h"

#include <unistd.h>

#include "kernels/common/error.h"
#include "tuner/text.h"

namespace detfuse::tuner {

std::optional<FlceFootprint> flce_footprint(const FlceProblem& p) {
  std::optional<uint64_t> h = checked_bytes({p.N, p.D}, 4);  // X
  h = checked_add(h, checked_bytes({p.V, p.D}, 4));         // W
  h = checked_add(h, checked_bytes({p.V, p.D}, 8));         // reference dW (float64)
  h = checked_add(h, checked_bytes({p.N}, 8 + 4 + 8 + 8));  // y, dloss, reference lse and loss rows
  const std::optional<uint64_t> d = p.device_io_bytes();
  if (!h || !d) return std::nullopt;
  return FlceFootprint{*h, *d};
}

std::optional<FlceFootprint> attention_footprint(const AttentionProblem& p) {
  const uint64_t e = dtype_bytes(p.dtype);
  // Q, dO, O, dQ: [B, H, Sq, d]; K, V, dK, dV: [B, Hkv, Sk, d].
  std::optional<uint64_t> h = checked_bytes({p.B, p.H, p.Sq, p.d}, 4 * 2);   // Q, dO
  h = checked_add(h, checked_bytes({p.B, p.Hkv, p.Sk, p.d}, 4 * 2));        // K, V
  std::optional<uint64_t> d = checked_bytes({p.B, p.H, p.Sq, p.d}, e * 4);  // Q, dO, O, dQ
  d = checked_add(d, checked_bytes({p.B, p.Hkv, p.Sk, p.d}, e * 4));       // K, V, dK, dV
  d = checked_add(d, checked_bytes({p.B, p.H, p.Sq}, 4));                  // LSE
  if (!h || !d) return std::nullopt;
  return FlceFootprint{*h, *d};
}

namespace {
std::string attention_shape_text(const AttentionProblem& p) {
  return std::to_string(p.B) + "," + std::to_string(p.H) + "," + std::to_string(p.Hkv) + "," + std::to_string(p.Sq) +
         "," + std::to_string(p.Sk) + "," + std::to_string(p.d);
}
}  // namespace

void check_fits(const AttentionProblem& p, const DeviceInfo* dev) {
  const auto f = attention_footprint(p);
  const std::string shape = attention_shape_text(p);
  if (!f) throw Error("shape " + shape + " needs more memory than a 64-bit byte count holds (its size overflows 64 bits)");
  const uint64_t host = host_memory_bytes();
  if (host && f->host_bytes > host)
    throw Error("shape " + shape + " needs at least " + format_bytes(double(f->host_bytes)) +
                " of host memory (float32 inputs); this machine has " + format_bytes(double(host)));
  if (dev && dev->total_memory_bytes && f->device_bytes > dev->total_memory_bytes)
    throw Error("shape " + shape + " needs at least " + format_bytes(double(f->device_bytes)) +
                " of device memory for its inputs and outputs; " + dev->name + " has " +
                format_bytes(double(dev->total_memory_bytes)));
}

uint64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

void check_fits(const FlceProblem& p, const DeviceInfo* dev) {
  const auto f = flce_footprint(p);
  if (!f) throw Error("shape " + p.shape() + " needs more memory than a 64-bit byte count holds (its size overflows 64 bits)");
  const uint64_t host = host_memory_bytes();
  if (host && f->host_bytes > host)
    throw Error("shape " + p.shape() + " needs at least " + format_bytes(double(f->host_bytes)) +
                " of host memory (float32 inputs and the float64 reference); this machine has " + format_bytes(double(host)));
  if (dev && dev->total_memory_bytes && f->device_bytes > dev->total_memory_bytes)
    throw Error("shape " + p.shape() + " needs at least " + format_bytes(double(f->device_bytes)) +
                " of device memory for its inputs and outputs; " + dev->name + " has " +
                format_bytes(double(dev->total_memory_bytes)));
}

}  // namespace detfuse::tuner
