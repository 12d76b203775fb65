#include "tuner/sm_slice.h"

#include <cuda.h>

#include <algorithm>
#include <mutex>

#include "kernels/common/cuda_check.h"

namespace detfuse::tuner {

SmSlicePlan plan_sm_slice(int requested, int device_sms, int min_partition, int alignment) {
  check_sms_argument(requested);
  if (device_sms < 1) throw Error("--sms: the device reports " + std::to_string(device_sms) + " SMs");
  if (requested > device_sms)
    throw invalid_argument("--sms " + std::to_string(requested) + ": the device has " + std::to_string(device_sms) +
                           " SMs");
  alignment = std::max(alignment, 1);
  SmSlicePlan p;
  p.requested = requested;
  p.granted = std::max(min_partition, (requested + alignment - 1) / alignment * alignment);
  if (p.granted >= device_sms) {
    p.granted = device_sms;
    p.whole_device = true;
  }
  if (p.granted != requested)
    p.note = "--sms " + std::to_string(requested) + ": green-context slices of this device hold at least " +
             std::to_string(min_partition) + " SMs in multiples of " + std::to_string(alignment) + ", so " +
             std::to_string(p.granted) + (p.whole_device ? " (the whole device)" : "") + " SMs";
  return p;
}

void check_sms_argument(int requested) {
  if (requested < 1) throw invalid_argument("--sms " + std::to_string(requested) + ": must be at least 1");
}

// The driver entry points, looked up through the runtime (no libcuda link).
struct SmSlice::Api {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*get_resource)(CUdevice, CUdevResource*, CUdevResourceType) = nullptr;
  CUresult (*split)(CUdevResource*, unsigned*, const CUdevResource*, CUdevResource*, unsigned, unsigned) = nullptr;
  CUresult (*generate_desc)(CUdevResourceDesc*, CUdevResource*, unsigned) = nullptr;
  CUresult (*green_create)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned) = nullptr;
  CUresult (*green_destroy)(CUgreenCtx) = nullptr;
  CUresult (*stream_create)(CUstream*, CUgreenCtx, unsigned, int) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*record_event)(CUgreenCtx, CUevent) = nullptr;
  CUresult (*wait_event)(CUgreenCtx, CUevent) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;

  template <class F>
  void get(F& fn, const char* symbol, unsigned version) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p)
      throw Error(std::string("--sms: green contexts are not available: the CUDA driver has no ") + symbol +
                  " (CUDA " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) +
                  " driver API; " + (e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found") +
                  "); this GPU cannot be measured on a slice of its SMs");
    fn = reinterpret_cast<F>(p);
  }
  Api() {
    get(device_get, "cuDeviceGet", 2000);
    get(error_string, "cuGetErrorString", 6000);
    get(get_resource, "cuDeviceGetDevResource", 12040);
    get(split, "cuDevSmResourceSplitByCount", 12040);
    get(generate_desc, "cuDevResourceGenerateDesc", 12040);
    get(green_create, "cuGreenCtxCreate", 12040);
    get(green_destroy, "cuGreenCtxDestroy", 12040);
    get(stream_create, "cuGreenCtxStreamCreate", 12050);
    get(stream_destroy, "cuStreamDestroy", 4000);
    get(record_event, "cuGreenCtxRecordEvent", 12040);
    get(wait_event, "cuGreenCtxWaitEvent", 12040);
  }
  void check(CUresult r, const std::string& what) const {
    if (r == CUDA_SUCCESS) return;
    const char* s = nullptr;
    if (error_string) error_string(r, &s);
    throw Error("--sms: " + what + " failed: " + (s ? s : "CUresult " + std::to_string(int(r))));
  }
};

SmSlice::SmSlice(int ordinal, int requested) {
  check_sms_argument(requested);
  DETFUSE_CUDA_CHECK(cudaSetDevice(ordinal));
  DETFUSE_CUDA_CHECK(cudaFree(nullptr));  // the primary context exists before the driver calls
  api_ = std::make_unique<Api>();
  CUdevice dev = 0;
  api_->check(api_->device_get(&dev, ordinal), "cuDeviceGet");
  CUdevResource all{};
  api_->check(api_->get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM),
              "cuDeviceGetDevResource (green contexts refused by this device or driver)");
  plan_ = plan_sm_slice(requested, int(all.sm.smCount), int(all.sm.minSmPartitionSize),
                        int(all.sm.smCoscheduledAlignment));
  if (plan_.whole_device) return;
  CUdevResource part{}, rest{};
  unsigned groups = 1;
  api_->check(api_->split(&part, &groups, &all, &rest, 0, unsigned(plan_.granted)),
              "cuDevSmResourceSplitByCount(" + std::to_string(plan_.granted) + " SMs)");
  if (groups < 1) throw Error("--sms: the driver made no slice of " + std::to_string(plan_.granted) + " SMs");
  if (int(part.sm.smCount) != plan_.granted) {
    plan_.note = "--sms " + std::to_string(requested) + ": the driver's slice holds " +
                 std::to_string(part.sm.smCount) + " SMs";
    plan_.granted = int(part.sm.smCount);
  }
  CUdevResourceDesc desc = nullptr;
  api_->check(api_->generate_desc(&desc, &part, 1), "cuDevResourceGenerateDesc");
  CUgreenCtx g = nullptr;
  api_->check(api_->green_create(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
  green_ = g;
  CUstream s = nullptr;
  api_->check(api_->stream_create(&s, g, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
  stream_ = s;
  DETFUSE_CUDA_CHECK(cudaEventCreateWithFlags(&before_, cudaEventDisableTiming));
  DETFUSE_CUDA_CHECK(cudaEventCreateWithFlags(&after_, cudaEventDisableTiming));
}

SmSlice::~SmSlice() {
  if (before_) cudaEventDestroy(before_);
  if (after_) cudaEventDestroy(after_);
  if (stream_ && api_) api_->stream_destroy(stream_);
  if (green_ && api_) api_->green_destroy(static_cast<CUgreenCtx>(green_));
}

void SmSlice::launch(const std::function<void(cudaStream_t)>& fn) const {
  if (!green_) {
    fn(nullptr);
    return;
  }
  auto g = static_cast<CUgreenCtx>(green_);
  DETFUSE_CUDA_CHECK(cudaEventRecord(before_, nullptr));
  api_->check(api_->wait_event(g, before_), "cuGreenCtxWaitEvent");
  fn(stream_);
  api_->check(api_->record_event(g, after_), "cuGreenCtxRecordEvent");
  DETFUSE_CUDA_CHECK(cudaStreamWaitEvent(nullptr, after_, 0));
}

namespace {
std::mutex g_mu;
std::shared_ptr<SmSlice> g_slice;
}  // namespace

void set_measure_slice(std::shared_ptr<SmSlice> slice) {
  std::lock_guard<std::mutex> l(g_mu);
  g_slice = std::move(slice);
}

const SmSlice* measure_slice() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_slice.get();
}

void measure_launch(const std::function<void(cudaStream_t)>& launch) {
  const SmSlice* s = measure_slice();
  if (s)
    s->launch(launch);
  else
    launch(nullptr);
}

}  // namespace detfuse::tuner
