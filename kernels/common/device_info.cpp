#include "kernels/common/device_info.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "kernels/common/cuda_check.h"

namespace detfuse {

namespace {

// Minimal NVML binding through dlopen: the library is part of the driver, so
// linking it would make the binaries unloadable on machines without a driver.
struct Nvml {
  using Handle = void*;
  int (*init)() = nullptr;
  int (*by_uuid)(const char*, Handle*) = nullptr;
  int (*clock)(Handle, int, unsigned*) = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons (driver 535 on), else its older
  // name nvmlDeviceGetCurrentClocksThrottleReasons; null if neither.
  int (*event_reasons)(Handle, unsigned long long*) = nullptr;
  bool ok = false;

  static const Nvml& get() {
    static Nvml n = [] {
      Nvml v;
      void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib) return v;
      v.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
      v.by_uuid = reinterpret_cast<int (*)(const char*, Handle*)>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
      v.clock = reinterpret_cast<int (*)(Handle, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
      v.driver_version = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetDriverVersion"));
      using Reasons = int (*)(Handle, unsigned long long*);
      v.event_reasons = reinterpret_cast<Reasons>(dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
      if (!v.event_reasons)
        v.event_reasons = reinterpret_cast<Reasons>(dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
      v.ok = v.init && v.by_uuid && v.clock && v.driver_version && v.init() == 0;
      return v;
    }();
    return n;
  }
};

std::string format_uuid(const cudaUUID_t& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    (void)cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device found";
  return n;
}

namespace {

// The NVML handle of a CUDA ordinal (by its UUID), looked up once; null when
// NVML or the device is missing.
Nvml::Handle nvml_handle(int ordinal) {
  static std::mutex mu;
  static std::map<int, Nvml::Handle> handles;
  const Nvml& nvml = Nvml::get();
  if (!nvml.ok) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(ordinal);
  if (it != handles.end()) return it->second;
  Nvml::Handle h = nullptr;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;  // not kept: a later call may find the device
  }
  if (nvml.by_uuid(format_uuid(p.uuid).c_str(), &h) != 0) h = nullptr;
  handles.emplace(ordinal, h);
  return h;
}

}  // namespace

std::optional<ClockReading> read_sm_clock(int ordinal) {
  const Nvml& nvml = Nvml::get();
  Nvml::Handle h = nvml_handle(ordinal);
  if (h == nullptr) return std::nullopt;
  unsigned mhz = 0;
  if (nvml.clock(h, /*NVML_CLOCK_SM*/ 1, &mhz) != 0) return std::nullopt;
  ClockReading r;
  r.sm_mhz = static_cast<int>(mhz);
  unsigned long long bits = 0;
  if (nvml.event_reasons && nvml.event_reasons(h, &bits) == 0) r.events = uint64_t(bits);
  return r;
}

std::optional<int> current_sm_clock_mhz(int ordinal) {
  if (auto r = read_sm_clock(ordinal)) return r->sm_mhz;
  return std::nullopt;
}

std::vector<std::string> clock_event_list(uint64_t bits) {
  static const std::pair<uint64_t, const char*> kNames[] = {
      {clock_event::kGpuIdle, "gpu_idle"},         {clock_event::kApplicationsClocks, "applications_clocks"},
      {clock_event::kSwPowerCap, "sw_power_cap"},  {clock_event::kHwSlowdown, "hw_slowdown"},
      {clock_event::kSyncBoost, "sync_boost"},     {clock_event::kSwThermal, "sw_thermal"},
      {clock_event::kHwThermal, "hw_thermal"},     {clock_event::kHwPowerBrake, "hw_power_brake"},
      {clock_event::kDisplayClock, "display_clock"}};
  std::vector<std::string> out;
  for (int i = 0; i < 64; ++i) {
    const uint64_t bit = uint64_t(1) << i;
    if (!(bits & bit)) continue;
    std::string name;
    for (const auto& [b, n] : kNames)
      if (b == bit) name = n;
    if (name.empty()) {
      char hex[24];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(bit));
      name = hex;
    }
    out.push_back(name);
  }
  return out;
}

std::string clock_event_names(uint64_t bits) {
  std::string out;
  for (const std::string& n : clock_event_list(bits)) out += (out.empty() ? "" : ",") + n;
  return out;
}

DeviceInfo query_device(int ordinal) {
  std::string why;
  int n = cuda_device_count(&why);
  if (ordinal < 0 || ordinal >= n)
    throw invalid_argument("device " + std::to_string(ordinal) + " does not exist (" +
                           std::to_string(n) + " CUDA devices" + (why.empty() ? "" : ": " + why) + ")");
  cudaDeviceProp p{};
  DETFUSE_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = p.name;
  d.uuid = format_uuid(p.uuid);
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.total_memory_bytes = p.totalGlobalMem;
  d.l2_bytes = p.l2CacheSize;
  d.max_smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
  int khz = 0;
  DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, ordinal));
  d.max_sm_clock_mhz = khz / 1000;
  DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, ordinal));
  d.memory_clock_mhz = khz / 1000;
  DETFUSE_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  DETFUSE_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  const Nvml& nvml = Nvml::get();
  if (nvml.ok) {
    char buf[96] = {0};
    if (nvml.driver_version(buf, sizeof buf) == 0) d.driver_release = buf;
  }
  d.current_sm_clock_mhz = current_sm_clock_mhz(ordinal);
  return d;
}

const DeviceInfo& cached_device(int ordinal) {
  static std::mutex mu;
  static std::map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(ordinal);
  if (it == cache.end()) it = cache.emplace(ordinal, query_device(ordinal)).first;
  return it->second;
}

std::vector<DeviceInfo> query_all_devices() {
  std::vector<DeviceInfo> out;
  int n = cuda_device_count();
  for (int i = 0; i < n; ++i) out.push_back(query_device(i));
  return out;
}

}  // namespace detfuse
