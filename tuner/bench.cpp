#include "tuner/bench.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "kernels/common/device_info.h"
#include "kernels/common/error.h"
#include "reference/inputs.h"
#include "tuner/interrupt.h"
#include "tuner/json.h"
#include "tuner/text.h"
#include "tuner/gpu_loop.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {

BenchReport run_bench(const Registry& reg, const DeviceInfo& dev, const BenchOptions& o, std::ostream* progress) {
  o.problem.validate();
  if (o.repeats < 1) throw invalid_argument("--repeats: must be >= 1");
  BenchReport rep;
  rep.problem = o.problem;
  rep.device = dev;
  rep.repeats = o.repeats;
  const auto variants = plan_variants(reg, o.problem, o.variants);
  if (variants.empty())
    throw invalid_argument("no " + std::string(to_string(o.problem.dtype())) + " " + o.problem.label() +
                           " variant is registered");

  std::unique_ptr<GpuCase> gc = o.problem.make_case(Mode::forward_backward, o.inputs, o.seed, dev);

  if (o.baseline && o.problem.has_baseline()) {
    if (progress) *progress << "timing the baseline of the shape...\n";
    rep.gemms = o.problem.bench_baseline(std::max(5, o.reps.min_reps));
  }

  const std::vector<Mode> modes = o.problem.bench_modes();
  int i = 0;
  for (const Variant& v : variants) {
    ++i;
    if (interrupt_requested()) throw Error("interrupted");
    BenchRow row;
    row.variant = v.name();
    row.strategy = v.desc().strategy;
    row.deterministic_by_design = v.desc().deterministic;
    std::vector<Mode> run_modes = modes;
    if (auto why = v.can_run(o.problem, Mode::forward_backward, dev)) {
      // A forward-only variant is timed in the forward alone, where the family times it.
      const bool fwd = std::find(modes.begin(), modes.end(), Mode::forward) != modes.end();
      if (!fwd || v.can_run(o.problem, Mode::forward, dev)) {
        row.status = "cannot_run";
        row.reason = *why;
        rep.rows.push_back(row);
        continue;
      }
      row.forward_only = *why;
      run_modes = {Mode::forward};
    }
    if (progress) *progress << "[" << i << "/" << variants.size() << "] " << v.name() << "...\n";
    try {
      if (!gc->set_mode(run_modes.back()) && !row.forward_only.empty())
        throw Error("this problem's case cannot run the forward alone");
      for (Mode m : run_modes) {
        db::Timing t;
        if (!gc->time_mode(v, m, o.reps, interrupt_requested, t, nullptr)) throw Error("interrupted");
        if (m == Mode::forward_backward) {
          row.timing = t;
          row.stats = summarize_samples(t.samples_ms);
        } else {
          row.forward = t;
          row.forward_stats = summarize_samples(t.samples_ms);
        }
      }
      if (rep.gemms.available && rep.gemms.total_ms > 0) row.ratio_to_gemms = row.timing.median_ms / rep.gemms.total_ms;
      db::Determinism d;
      if (!gc->repeat_digests(v, o.repeats, interrupt_requested, d, {})) throw Error("interrupted");
      row.distinct = d.distinct;
      gc->set_mode(Mode::forward_backward);
    } catch (const std::exception& e) {
      if (interrupt_requested()) throw;
      row.status = "error";
      row.reason = one_line(e.what());
      if (cuda_context_lost()) {
        rep.rows.push_back(row);
        throw Error("CUDA context lost while benchmarking " + v.name() + ": " + row.reason);
      }
    }
    rep.rows.push_back(row);
  }
  return rep;
}

namespace {

// "SM 1755-1980 MHz" (one value when equal), then ", held by sw_power_cap"
// where NVML named a clock-event reason during the samples; "" without NVML.
std::string clock_note(const db::Timing& t) {
  if (t.clock_max_mhz <= 0) return "";
  std::string s = "SM " + std::to_string(t.clock_min_mhz);
  if (t.clock_max_mhz != t.clock_min_mhz) s += "-" + std::to_string(t.clock_max_mhz);
  s += " MHz";
  if (t.clock_events && *t.clock_events != 0) s += ", held by " + clock_event_names(uint64_t(*t.clock_events));
  return s;
}

}  // namespace

std::string format_bench_table(const BenchReport& r) {
  std::ostringstream os;
  char b[512];
  const std::string headline = r.problem.headline_output();
  const bool ratio_col = r.problem.has_baseline();
  bool fwd_cols = false;
  for (const auto& row : r.rows) fwd_cols = fwd_cols || row.forward.has_value();
  os << r.problem.label() << " forward_backward " << r.problem.shape() << " " << to_string(r.problem.dtype()) << " on "
     << r.device.name << " (" << r.device.uuid << "), " << r.repeats << " repeats for digests\n";
  if (r.gemms.available) {
    std::snprintf(b, sizeof b, "three cuBLAS GEMMs: %.3f ms (logits %.3f, dX %.3f, dW %.3f)%s%s\n", r.gemms.total_ms,
                  r.gemms.logits_ms, r.gemms.dx_ms, r.gemms.dw_ms, r.gemms.note.empty() ? "" : "; ",
                  r.gemms.note.c_str());
    os << b;
  } else if (!r.gemms.note.empty()) {
    os << r.gemms.note << "\n";
  }
  size_t w = 7;
  for (const auto& row : r.rows) w = std::max(w, row.variant.size());
  const std::string digest_col = headline + "#";
  std::string head;
  std::snprintf(b, sizeof b, "%-*s  ", int(w), "variant");
  head += b;
  if (fwd_cols) {
    std::snprintf(b, sizeof b, "%10s  %8s  ", "fwd ms", "TFLOP/s");
    head += b;
  }
  std::snprintf(b, sizeof b, "%10s  %7s  %8s  ", fwd_cols ? "fwd+bwd ms" : "median ms", "spread", "TFLOP/s");
  head += b;
  if (ratio_col) {
    std::snprintf(b, sizeof b, "%7s  ", "x GEMMs");
    head += b;
  }
  std::snprintf(b, sizeof b, "%10s  %5s  %s\n", "extra mem", digest_col.c_str(), "notes");
  head += b;
  os << head;
  for (const auto& row : r.rows) {
    std::string line;
    std::snprintf(b, sizeof b, "%-*s  ", int(w), row.variant.c_str());
    line += b;
    if (row.status != "ok") {
      if (fwd_cols) {
        std::snprintf(b, sizeof b, "%10s  %8s  ", "-", "-");
        line += b;
      }
      std::snprintf(b, sizeof b, "%10s  %7s  %8s  ", "-", "-", "-");
      line += b;
      if (ratio_col) {
        std::snprintf(b, sizeof b, "%7s  ", "-");
        line += b;
      }
      std::snprintf(b, sizeof b, "%10s  %5s  %s: %s\n", "-", "-", row.status.c_str(), row.reason.c_str());
      os << line << b;
      continue;
    }
    if (fwd_cols) {
      if (row.forward)
        std::snprintf(b, sizeof b, "%10.3f  %8.1f  ", row.forward_stats.median, row.forward->tflops);
      else
        std::snprintf(b, sizeof b, "%10s  %8s  ", "-", "-");
      line += b;
    }
    const bool fb = !row.timing.samples_ms.empty();
    if (fb)
      std::snprintf(b, sizeof b, "%10.3f  %6.1f%%  %8.1f  ", row.stats.median, row.stats.spread * 100, row.timing.tflops);
    else
      std::snprintf(b, sizeof b, "%10s  %6.1f%%  %8s  ", "-", row.forward_stats.spread * 100, "-");
    line += b;
    if (ratio_col) {
      std::string ratio = "-";
      if (row.ratio_to_gemms > 0) {
        char rb[32];
        std::snprintf(rb, sizeof rb, "%.2f", row.ratio_to_gemms);
        ratio = rb;
      }
      std::snprintf(b, sizeof b, "%7s  ", ratio.c_str());
      line += b;
    }
    auto it = row.distinct.find(headline);
    std::string nd;
    for (const auto& [k, n] : row.distinct)
      if (n > 1 && k != headline) nd += (nd.empty() ? "" : " ") + k + ":" + std::to_string(n) + " distinct";
    if (fb) {
      const std::string clock = clock_note(row.timing);
      if (!clock.empty()) nd += (nd.empty() ? "" : "; ") + clock;
    }
    if (!row.forward_only.empty()) nd += (nd.empty() ? "" : "; ") + std::string("forward only: ") + row.forward_only;
    const int64_t extra = fb ? row.timing.peak_extra_bytes : row.forward ? row.forward->peak_extra_bytes : 0;
    const std::string count = it == row.distinct.end() ? (fb ? "0" : "-") : std::to_string(it->second);
    std::snprintf(b, sizeof b, "%10s  %5s  %s\n", format_bytes(double(extra)).c_str(), count.c_str(), nd.c_str());
    os << line << b;
  }
  return os.str();
}

std::string bench_json(const BenchReport& r) {
  Json j;
  j["family"] = to_string(r.problem.family());
  j["problem"] = r.problem.key();
  j["shape"] = r.problem.shape();
  j["dtype"] = to_string(r.problem.dtype());
  j["device"] = {{"name", r.device.name}, {"uuid", r.device.uuid}};
  j["repeats"] = r.repeats;
  j["flops"] = json_number(r.problem.flops(Mode::forward_backward));
  if (r.gemms.available)
    j["three_gemms"] = {{"total_ms", json_number(r.gemms.total_ms)}, {"logits_ms", json_number(r.gemms.logits_ms)},
                        {"dx_ms", json_number(r.gemms.dx_ms)},       {"dw_ms", json_number(r.gemms.dw_ms)},
                        {"note", r.gemms.note}};
  else
    j["three_gemms"] = nullptr;
  j["variants"] = Json::array();
  for (const auto& row : r.rows) {
    Json v = {{"name", row.variant},
              {"strategy", row.strategy},
              {"deterministic_by_design", row.deterministic_by_design},
              {"status", row.status},
              {"reason", row.reason}};
    if (!row.forward_only.empty()) v["forward_only"] = row.forward_only;
    if (row.status == "ok" && !row.timing.samples_ms.empty()) {
      v["median_ms"] = json_number(row.stats.median);
      v["min_ms"] = json_number(row.stats.min);
      v["max_ms"] = json_number(row.stats.max);
      v["spread"] = json_number(row.stats.spread);
      v["tflops"] = json_number(row.timing.tflops);
      v["ratio_to_three_gemms"] = row.ratio_to_gemms > 0 ? json_number(row.ratio_to_gemms) : Json(nullptr);
      v["peak_extra_bytes"] = row.timing.peak_extra_bytes;
      v["clock_mhz"] = {row.timing.clock_min_mhz, row.timing.clock_max_mhz};
      v["clock_events"] =
          row.timing.clock_events ? Json(clock_event_list(uint64_t(*row.timing.clock_events))) : Json(nullptr);
      Json samples = Json::array();
      for (double s : row.timing.samples_ms) samples.push_back(json_number(s));
      v["samples_ms"] = samples;
    }
    if (row.status == "ok") {
      if (row.forward) {
        Json fs = Json::array();
        for (double s : row.forward->samples_ms) fs.push_back(json_number(s));
        v["forward"] = {{"median_ms", json_number(row.forward_stats.median)},
                        {"spread", json_number(row.forward_stats.spread)},
                        {"tflops", json_number(row.forward->tflops)},
                        {"peak_extra_bytes", row.forward->peak_extra_bytes},
                        {"samples_ms", fs}};
      }
      v["distinct_digests"] = Json::object();
      for (const auto& [name, n] : row.distinct) v["distinct_digests"][name] = n;
    }
    j["variants"].push_back(v);
  }
  return json_text(j) + "\n";
}

}  // namespace detfuse::tuner
