#include "tuner/flce_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "db/store.h"
#include "kernels/common/error.h"
#include "kernels/common/timer.h"
#include "kernels/flce/flce.h"
#include "reference/inputs.h"
#include "tuner/spread.h"

namespace detfuse::tuner {

std::vector<std::pair<std::string, Digest>> flce_digest_list(const flce::DeviceCase::Digests& d, FlceMode mode) {
  std::vector<std::pair<std::string, Digest>> out;
  if (mode != FlceMode::backward) {
    out.emplace_back("loss", d.loss);
    out.emplace_back("lse", d.lse);
  }
  if (mode != FlceMode::forward) {
    out.emplace_back("dX", d.dX);
    out.emplace_back("dW", d.dW);
  }
  return out;
}

FlceHostInputs inputs_or_seeded(const std::optional<FlceHostInputs>& user, const FlceProblem& p, int64_t seed) {
  return user ? *user : reference::make_flce_inputs(p, uint64_t(seed));
}

FlceGpuCase::FlceGpuCase(const FlceProblem& p, FlceMode mode, const FlceHostInputs& in, const DeviceInfo& dev)
    : mode_(mode), dev_(dev), case_(p, in.X, in.W, in.y, in.dloss) {
  if (mode == FlceMode::backward)
    throw invalid_argument("mode: the tuner measures forward and forward_backward only");
  flce::validate_call(p, mode, case_.args(mode));
  // Twice the L2 size, written between repetitions, evicts the inputs from L2.
  flush_.allocate(size_t(std::max(dev.l2_bytes, 1 << 20)) * 2);
}

void FlceGpuCase::launch(const FlceVariant& v, const DeviceBytes& ws) {
  FlceArgs a = case_.args(mode_);
  a.workspace = ws.get();
  a.workspace_size = ws.bytes();
  v.launch(case_.problem(), mode_, a, nullptr);
}

void FlceGpuCase::flush_l2() { DETFUSE_CUDA_CHECK(cudaMemsetAsync(flush_.get(), 0, flush_.bytes(), nullptr)); }

void FlceGpuCase::run_once(const FlceVariant& v) {
  DeviceBytes ws(v.workspace_bytes(case_.problem(), mode_));
  case_.poison();
  launch(v, ws);
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<FlceGpuCase::OutputView> FlceGpuCase::output_views() {
  const FlceProblem& p = case_.problem();
  const FlceArgs a = case_.args(mode_);
  std::vector<OutputView> v;
  if (mode_ != FlceMode::backward) {
    v.push_back({"loss", a.loss, case_.loss_count(), DType::f32});
    v.push_back({"lse", a.lse, size_t(p.N), DType::f32});
  }
  if (mode_ != FlceMode::forward) {
    v.push_back({"dX", a.dX, size_t(p.N) * size_t(p.D), p.grad_dtype});
    v.push_back({"dW", a.dW, size_t(p.V) * size_t(p.D), p.grad_dtype});
  }
  return v;
}

bool FlceGpuCase::repeat_digests(const FlceVariant& v, int repeats, const std::function<bool()>& stop,
                                 db::Determinism& d, const std::function<bool()>& cap_spent) {
  DeviceBytes ws(v.workspace_bytes(case_.problem(), mode_));
  d = db::Determinism{};
  d.repeats = repeats;
  std::map<std::string, std::set<Digest>> seen;
  // The run-to-run spread: repeat 0's outputs stay on the device and every
  // later repeat is compared with them there (tuner/spread.h). When the copy
  // does not fit in device memory the spread is left unmeasured (empty).
  std::vector<DeviceBytes> first;
  bool spread_ok = true;
  for (int r = 0; r < repeats; ++r) {
    if (stop && stop()) return false;
    if (r >= 2 && cap_spent && cap_spent()) {
      d.repeats = r;  // cut by the cap: the digests of r repeats
      break;
    }
    case_.poison();
    launch(v, ws);
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto& [name, dg] : digest_outputs()) {
      d.digests.push_back(db::DigestRow{r, name, dg.hex()});
      seen[name].insert(dg);
    }
    const std::vector<OutputView> views = output_views();
    if (r == 0) {
      try {
        for (const auto& o : views) {
          first.emplace_back(o.count * dtype_bytes(o.dtype));
          DETFUSE_CUDA_CHECK(cudaMemcpy(first.back().get(), o.ptr, first.back().bytes(), cudaMemcpyDeviceToDevice));
        }
      } catch (const Error&) {
        if (cuda_context_lost()) throw;
        (void)cudaGetLastError();  // out of memory: not sticky
        first.clear();
        spread_ok = false;
      }
      continue;
    }
    if (!spread_ok) continue;
    for (size_t i = 0; i < views.size(); ++i) {
      const SpreadSums s = device_spread(views[i].ptr, first[i].get(), views[i].count, views[i].dtype);
      db::Spread& sp = d.spread[views[i].name];
      const double diff_norm = std::sqrt(s.diff_sq);
      sp.norm = std::sqrt(s.ref_sq);
      // NaN (a NaN output) wins over any number.
      sp.max_abs_diff = std::isnan(s.max_abs_diff) || std::isnan(sp.max_abs_diff) ? std::nan("")
                                                                                  : std::max(sp.max_abs_diff, s.max_abs_diff);
      sp.diff_norm = std::isnan(diff_norm) || std::isnan(sp.diff_norm) ? std::nan("") : std::max(sp.diff_norm, diff_norm);
    }
  }
  bool all_one = true;
  for (const auto& [name, s] : seen) {
    d.distinct[name] = int(s.size());
    all_one = all_one && s.size() == 1;
  }
  d.level = all_one ? db::kLevelRunToRun : db::kLevelNone;
  return true;
}

FlceGpuCase::Pinned::~Pinned() {
  if (p) cudaFreeHost(p);
}

Digest FlceGpuCase::digest_device_bytes(const void* src, size_t bytes) {
  constexpr size_t kChunk = size_t(256) << 20;
  const size_t want = std::min(bytes, kChunk);
  if (pinned_.bytes < want) {
    if (pinned_.p) cudaFreeHost(pinned_.p);
    pinned_.p = nullptr;
    pinned_.bytes = 0;
    DETFUSE_CUDA_CHECK(cudaMallocHost(&pinned_.p, want));
    pinned_.bytes = want;
  }
  Digester d;
  for (size_t off = 0; off < bytes; off += kChunk) {
    const size_t n = std::min(kChunk, bytes - off);
    DETFUSE_CUDA_CHECK(cudaMemcpy(pinned_.p, static_cast<const char*>(src) + off, n, cudaMemcpyDeviceToHost));
    d.add_host(pinned_.p, n);
  }
  return d.finish();
}

std::vector<std::pair<std::string, Digest>> FlceGpuCase::digest_outputs() {
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const FlceProblem& p = case_.problem();
  const FlceArgs a = case_.args(mode_);
  const size_t g = dtype_bytes(p.grad_dtype);
  std::vector<std::pair<std::string, Digest>> out;
  if (mode_ != FlceMode::backward) {
    out.emplace_back("loss", digest_device_bytes(a.loss, case_.loss_count() * sizeof(float)));
    out.emplace_back("lse", digest_device_bytes(a.lse, size_t(p.N) * sizeof(float)));
  }
  if (mode_ != FlceMode::forward) {
    out.emplace_back("dX", digest_device_bytes(a.dX, size_t(p.N) * size_t(p.D) * g));
    out.emplace_back("dW", digest_device_bytes(a.dW, size_t(p.V) * size_t(p.D) * g));
  }
  return out;
}

namespace {
size_t free_device_memory() {
  size_t free = 0, total = 0;
  DETFUSE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}
}  // namespace

bool FlceGpuCase::time(const FlceVariant& v, const RepetitionPolicy& policy, const std::function<bool()>& stop,
                       db::Timing& t, int* uncapped) {
  t = db::Timing{};
  const FlceProblem& p = case_.problem();
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t free0 = free_device_memory();
  const size_t ws_bytes = v.workspace_bytes(p, mode_);
  DeviceBytes ws(ws_bytes);
  size_t free_min = free_device_memory();

  int clock_min = 0, clock_max = 0;
  auto see_clock = [&]() {
    if (auto c = current_sm_clock_mhz(dev_.ordinal)) {
      clock_min = clock_min ? std::min(clock_min, *c) : *c;
      clock_max = std::max(clock_max, *c);
    }
  };

  EventTimer timer;
  // First warm-up launch, timed, gives the estimate.
  flush_l2();
  timer.start();
  launch(v, ws);
  double estimate = timer.stop_ms();
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  free_min = std::min(free_min, free_device_memory());
  const int warmup = plan_warmup(estimate);
  for (int i = 1; i < warmup; ++i) {
    if (stop && stop()) return false;
    flush_l2();
    timer.start();
    launch(v, ws);
    estimate = std::min<double>(estimate, timer.stop_ms());
  }
  t.warmup = warmup;
  const int reps = plan_repetitions(estimate, policy);
  if (uncapped) {
    RepetitionPolicy free = policy;
    free.cap_ms = std::numeric_limits<double>::infinity();
    *uncapped = plan_repetitions(estimate, free);
  }
  see_clock();
  for (int i = 0; i < reps; ++i) {
    if (stop && stop()) return false;
    flush_l2();
    timer.start();
    launch(v, ws);
    t.samples_ms.push_back(timer.stop_ms());
    if (i % 4 == 0 || i + 1 == reps) see_clock();
  }
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  free_min = std::min(free_min, free_device_memory());
  t.clock_min_mhz = clock_min;
  t.clock_max_mhz = clock_max;
  // The workspace, or more if the variant allocated device memory itself and
  // kept it (cudaMemGetInfo sees only what is still allocated when asked).
  t.peak_extra_bytes = int64_t(std::max<size_t>(ws_bytes, free0 > free_min ? free0 - free_min : 0));
  t.flops = mode_ == FlceMode::forward ? p.flops_forward() : p.flops_forward_backward();
  db::summarize(t);
  return true;
}

bool cuda_context_lost() {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return false;
  (void)cudaGetLastError();
  e = cudaDeviceSynchronize();
  return e != cudaSuccess;
}

std::vector<int64_t> sample_rows(int64_t N, int count, int64_t seed) {
  std::set<int64_t> rows;
  if (N <= 0) return {};
  if (count >= N) {
    std::vector<int64_t> all(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) all[size_t(i)] = i;
    return all;
  }
  rows.insert(0);
  if (count > 1) rows.insert(N - 1);
  const uint64_t key = reference::stream_key(uint64_t(seed), 0x726f7773ull /* "rows" */);
  for (uint64_t i = 0; int(rows.size()) < count; ++i) rows.insert(int64_t(reference::splitmix64_at(key, i) % uint64_t(N)));
  return {rows.begin(), rows.end()};
}

}  // namespace detfuse::tuner
