// What a results database needs to key a measurement to one GPU: name, UUID,
// compute capability, SM count, memory, L2, driver and runtime versions, and
// the SM clock at the moment of the query (read through NVML when the driver
// provides it; NVML is loaded at run time so binaries run without it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace detfuse {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-..." as nvidia-smi prints it
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t total_memory_bytes = 0;
  int l2_bytes = 0;
  int max_smem_per_block_optin = 0;  // bytes, after cudaFuncSetAttribute
  int max_sm_clock_mhz = 0;
  int memory_clock_mhz = 0;
  int driver_version = 0;   // e.g. 13000 (CUDA API version the driver supports)
  int runtime_version = 0;  // e.g. 13000
  std::string driver_release;  // e.g. "580.159.04" (NVML), empty if unavailable
  std::optional<int> current_sm_clock_mhz;  // NVML, empty if unavailable

  int compute_capability() const { return cc_major * 10 + cc_minor; }
  std::string cc_string() const { return std::to_string(cc_major) + "." + std::to_string(cc_minor); }
};

// Number of usable CUDA devices; 0 (never an exception) when there is no driver
// or no device. `why` receives the CUDA error text in that case.
int cuda_device_count(std::string* why = nullptr);

// Facts of one device. Throws detfuse::Error if it does not exist.
DeviceInfo query_device(int ordinal = 0);
std::vector<DeviceInfo> query_all_devices();

// The facts of a device queried once per process and kept (thread-safe), for
// hot paths such as can_run checks on every call; current_sm_clock_mhz is the
// reading of that first query. Throws like query_device.
const DeviceInfo& cached_device(int ordinal);

// Current SM clock of a device in MHz through NVML, if NVML can be loaded.
std::optional<int> current_sm_clock_mhz(int ordinal);

}  // namespace detfuse
