#include "tuner/gpu_loop.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "kernels/common/device_info.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/timer.h"
#include "tuner/budget.h"
#include "tuner/levels.h"
#include "tuner/spread.h"

namespace detfuse::tuner {

DeviceDigester::~DeviceDigester() {
  if (pinned_) cudaFreeHost(pinned_);
}

Digest DeviceDigester::digest(const void* src, size_t bytes) {
  constexpr size_t kChunk = size_t(256) << 20;
  const size_t want = std::min(bytes, kChunk);
  if (bytes_ < want) {
    if (pinned_) cudaFreeHost(pinned_);
    pinned_ = nullptr;
    bytes_ = 0;
    DETFUSE_CUDA_CHECK(cudaMallocHost(&pinned_, want));
    bytes_ = want;
  }
  Digester d;
  for (size_t off = 0; off < bytes; off += kChunk) {
    const size_t n = std::min(kChunk, bytes - off);
    DETFUSE_CUDA_CHECK(cudaMemcpy(pinned_, static_cast<const char*>(src) + off, n, cudaMemcpyDeviceToHost));
    d.add_host(pinned_, n);
  }
  return d.finish();
}

bool cuda_context_lost() {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return false;
  (void)cudaGetLastError();
  e = cudaDeviceSynchronize();
  return e != cudaSuccess;
}

size_t free_device_memory() {
  size_t free = 0, total = 0;
  DETFUSE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

bool repeat_with_digests(const std::function<void()>& poison_and_run, const std::function<NamedDigests()>& digest_outputs,
                         const std::function<std::vector<OutputView>()>& output_views, int repeats,
                         const std::function<bool()>& stop, db::Determinism& d, const std::function<bool()>& cap_spent) {
  d = db::Determinism{};
  d.repeats = repeats;
  std::map<std::string, std::set<Digest>> seen;
  // The run-to-run spread: repeat 0's outputs stay on the device and every
  // later repeat is compared with them there (tuner/spread.h). When the copy
  // does not fit in device memory the spread is left unmeasured (empty).
  std::vector<DeviceBytes> first;
  bool spread_ok = bool(output_views);
  for (int r = 0; r < repeats; ++r) {
    if (stop && stop()) return false;
    if (r >= 2 && cap_spent && cap_spent()) {
      d.repeats = r;  // cut by the cap: the digests of r repeats
      break;
    }
    poison_and_run();
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto& [name, dg] : digest_outputs()) {
      d.digests.push_back(db::DigestRow{r, name, dg.hex()});
      seen[name].insert(dg);
    }
    if (!spread_ok) continue;
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
    for (size_t i = 0; i < views.size() && i < first.size(); ++i) {
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
  // run_to_run is shown by at least 2 repeats that agree (one repeat shows nothing).
  d.checks.run_to_run = d.repeats < 2 ? db::kCheckNotChecked : all_one ? db::kCheckShown : db::kCheckFailed;
  if (d.repeats < 2) d.checks.note("run_to_run", "not checked: a single repeat");
  d.level = db::derive_level(d.checks);
  return true;
}

bool time_launches(const std::function<void()>& launch, const std::function<void()>& flush_l2, int device_ordinal,
                   size_t free0, size_t ws_bytes, double flops, const RepetitionPolicy& policy,
                   const std::function<bool()>& stop, db::Timing& t, int* uncapped) {
  t = db::Timing{};
  size_t free_min = free_device_memory();
  // The SM clock and its clock-event reasons, read while every fourth timed
  // launch runs (between recording the stop event and waiting for it: the
  // host's read delays nothing the events time; every fourth, as before, to
  // keep the host's NVML calls few); a launch shorter than the read may
  // already have ended (gpu_idle, not counted).
  int clock_min = 0, clock_max = 0;
  std::optional<int64_t> events;
  auto see_clock = [&]() {
    if (auto c = read_sm_clock(device_ordinal)) {
      clock_min = clock_min ? std::min(clock_min, c->sm_mhz) : c->sm_mhz;
      clock_max = std::max(clock_max, c->sm_mhz);
      if (c->events) events = events.value_or(0) | int64_t(*c->events & ~clock_event::kGpuIdle);
    }
  };

  EventTimer timer;
  // First warm-up launch, timed, gives the estimate.
  flush_l2();
  timer.start();
  launch();
  double estimate = timer.stop_ms();
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  free_min = std::min(free_min, free_device_memory());
  const int warmup = plan_warmup(estimate);
  for (int i = 1; i < warmup; ++i) {
    if (stop && stop()) return false;
    flush_l2();
    timer.start();
    launch();
    estimate = std::min<double>(estimate, timer.stop_ms());
  }
  t.warmup = warmup;
  const int reps = plan_repetitions(estimate, policy);
  if (uncapped) {
    RepetitionPolicy free = policy;
    free.cap_ms = std::numeric_limits<double>::infinity();
    *uncapped = plan_repetitions(estimate, free);
  }
  for (int i = 0; i < reps; ++i) {
    if (stop && stop()) return false;
    flush_l2();
    timer.start();
    launch();
    timer.record_stop();
    if (i % 4 == 0 || i + 1 == reps) see_clock();
    t.samples_ms.push_back(timer.wait_ms());
  }
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  free_min = std::min(free_min, free_device_memory());
  t.clock_min_mhz = clock_min;
  t.clock_max_mhz = clock_max;
  t.clock_events = events;
  // The workspace, or more if the variant allocated device memory itself and
  // kept it (cudaMemGetInfo sees only what is still allocated when asked).
  t.peak_extra_bytes = int64_t(std::max<size_t>(ws_bytes, free0 > free_min ? free0 - free_min : 0));
  t.flops = flops;
  db::summarize(t);
  return true;
}

VariantOutcome measure_case(GpuCase& c, const Variant& v, Mode timed, const MeasureControl& ctl,
                            const RepetitionPolicy& reps, const std::function<db::Correctness()>& check) {
  VariantOutcome out;
  auto note = [&](const std::string& s) {
    if (ctl.note) ctl.note(s);
  };
  // The variant's soft cap runs from here: the check is never cut, the repeats
  // and the timing repetitions are, past their minimums.
  const SoftCap cap(ctl.time_cap_s);
  try {
    note("checking against the reference");
    out.correctness = check();
    if (ctl.stop && ctl.stop()) {
      out.interrupted = true;
      return out;
    }
    if (!out.correctness->pass) {
      out.status = db::kResultIncorrect;
      out.reason = "error above tolerance";
      return out;
    }
    note("repeating " + std::to_string(ctl.repeats) + " times");
    db::Determinism d;
    if (!c.repeat_digests(v, ctl.repeats, ctl.stop, d, [&] { return cap.spent(); })) {
      out.interrupted = true;
      return out;
    }
    if (d.repeats < ctl.repeats) out.cut = "repeats " + std::to_string(d.repeats) + " of " + std::to_string(ctl.repeats);
    if (ctl.levels) {
      note("levels: sm_count on 16 and 66 SMs, portable against the CPU emulation");
      if (!check_sm_count(c, v, d, ctl.stop)) {
        out.interrupted = true;
        return out;
      }
      check_portable(c, v, d);
    }
    out.determinism = d;
    note("timing");
    RepetitionPolicy rp = reps;
    rp.cap_ms = cap.remaining() * 1e3;
    db::Timing t;
    int uncapped = 0;
    if (!c.time_mode(v, timed, rp, ctl.stop, t, &uncapped)) {
      out.interrupted = true;
      return out;
    }
    if (int(t.samples_ms.size()) < uncapped)
      out.cut += (out.cut.empty() ? "" : ", ") + std::string("timing ") + std::to_string(t.samples_ms.size()) + " of " +
                 std::to_string(uncapped) + " repetitions";
    out.timing = t;
    out.status = db::kResultOk;
  } catch (const std::exception& e) {
    out.reason = e.what();
    if (cuda_context_lost()) {
      out.status = db::kResultCrashed;
      out.reason = "CUDA context lost: " + out.reason;
      out.context_lost = true;
    } else {
      out.status = db::kResultError;
    }
  }
  return out;
}

}  // namespace detfuse::tuner
