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

// NVML's clock-event reasons (nvmlClocksEventReasons, "throttle reasons"
// before driver 535): why the SM clock is below its maximum at a reading.
// The values are NVML's bits.
namespace clock_event {
inline constexpr uint64_t kGpuIdle = 0x1;             // nothing running: the clock is dropping to idle
inline constexpr uint64_t kApplicationsClocks = 0x2;  // the application clocks setting
inline constexpr uint64_t kSwPowerCap = 0x4;          // the power limit (the driver lowers the clock)
inline constexpr uint64_t kHwSlowdown = 0x8;          // hardware slowdown (thermal or power brake)
inline constexpr uint64_t kSyncBoost = 0x10;          // held with other GPUs of a sync boost group
inline constexpr uint64_t kSwThermal = 0x20;          // the driver's thermal limit
inline constexpr uint64_t kHwThermal = 0x40;          // the hardware's thermal slowdown
inline constexpr uint64_t kHwPowerBrake = 0x80;       // the external power brake
inline constexpr uint64_t kDisplayClock = 0x100;      // the display clock setting
}  // namespace clock_event

// The names of the set bits in bit order ({"sw_power_cap", "sw_thermal"});
// an unknown bit as its hex value ("0x200"); empty for none.
std::vector<std::string> clock_event_list(uint64_t bits);
// The same names comma separated ("sw_power_cap,sw_thermal"); "" for none.
std::string clock_event_names(uint64_t bits);

// One NVML reading: the SM clock and, where the driver reports them, the
// clock-event reasons at that moment. Empty without NVML. The device's NVML
// handle is looked up once per ordinal (cheap enough to read between timed
// launches).
struct ClockReading {
  int sm_mhz = 0;
  std::optional<uint64_t> events;
};
std::optional<ClockReading> read_sm_clock(int ordinal);

}  // namespace detfuse
