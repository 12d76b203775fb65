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
