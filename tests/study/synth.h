// A synthetic contention study for CPU tests: a registry whose variant names
// follow the real FLCE naming (engines mma and cublaslt; owning at three chunk
// budgets, atomic and partials with sk/vs), and a measurer that measures
// nothing but returns outcomes shaped like the real ones (time growing with N,
// atomic's distinct digests and run-to-run spread, partials' workspace), so the
// planner, the runner, the store and plot.py run end to end without a GPU.
#pragma once

#include <cmath>
#include <string>

#include "experiments/study/contention_plan.h"
#include "tests/tuner/fakes.h"

namespace detfuse::testing {

inline FlceVariant synth_variant(const std::string& engine, const std::string& strategy,
                                 std::vector<std::pair<std::string, int64_t>> params) {
  FlceVariant v = fake_flce(strategy, 64);
  v.desc.engine = engine;
  v.desc.params = std::move(params);
  v.desc.name = VariantDesc::canonical_name(Family::flce, DType::bf16, engine, strategy, v.desc.params);
  v.desc.deterministic = strategy != "atomic";
  return v;
}

inline Registry synth_registry() {
  Registry r;
  for (int64_t bm : {128, 64}) {
    for (int64_t mb : {512, 1024, 1920})
      r.add(synth_variant("mma", "owning", {{"bm", bm}, {"bn", 128}, {"mb", mb}}));
    r.add(synth_variant("mma", "atomic", {{"bm", bm}, {"bn", 128}, {"mb", 1024}, {"sk", 4}}));
    r.add(synth_variant("mma", "partials", {{"bm", bm}, {"bn", 128}, {"mb", 1024}, {"sk", 4}, {"vs", 256}}));
  }
  for (int64_t mb : {512, 2000})
    r.add(synth_variant("cublaslt", "owning", {{"mb", mb}}));
  r.add(synth_variant("cublaslt", "partials", {{"mb", 1024}, {"sk", 2}, {"vs", 0}}));
  // Another dtype: never planned for bf16.
  r.add(fake_flce("owning", 64, DType::f32));
  return r;
}

// Outcomes shaped like the real ones; deterministic from (variant, problem).
class SynthMeasurer : public tuner::FlceMeasurer {
 public:
  FlceProblem p;
  int measured = 0;
  void prepare(const FlceProblem& q, FlceMode, int64_t) override { p = q; }
  tuner::VariantOutcome measure(const FlceVariant& v, const tuner::MeasureControl& ctl) override {
    ++measured;
    const auto pv = study::parse_variant_name(v.desc.name);
    const std::string& s = v.desc.strategy;
    const double mb = double(pv->param("mb", 1024));
    const double work = 6.0 * double(p.N) * double(p.D) * double(p.V);
    double ms = work / 4e11 * (v.desc.engine == "cublaslt" ? 1.1 : 1.0);
    if (s == "atomic") ms *= 0.9 + 1e-5 * double(p.N) / double(pv->param("bm", 128));  // contention grows with N
    if (s == "partials") ms *= 1.05 + 0.02 * std::log2(double(p.N) / 512.0);
    if (s == "owning") ms *= 1.0 + 0.15 * 1024.0 / mb;
    tuner::VariantOutcome o;
    const double bf16_err = 3e-3 / std::sqrt(double(p.D) / 1024.0);
    o.correctness = db::Correctness{"full", {{"loss", 1e-6}, {"lse", 1e-6}, {"dX", bf16_err}, {"dW", bf16_err}}, 1e-2, true};
    db::Determinism d;
    d.repeats = ctl.repeats;
    const bool nondet = s == "atomic";
    // Invariance classes: deterministic variants of one chunk budget agree.
    const std::string cls = std::string(32, char('a' + int(mb) % 7));
    for (int r = 0; r < ctl.repeats; ++r)
      for (const char* out : {"loss", "lse", "dX", "dW"}) {
        std::string dg = std::string(out) == "dW" ? cls : std::string(32, 'e');
        if (nondet && std::string(out) == "dW") dg[0] = char('0' + r);
        d.digests.push_back({r, out, dg});
      }
    d.level = nondet ? db::kLevelNone : db::kLevelRunToRun;
    for (const char* out : {"loss", "lse", "dX", "dW"}) {
      db::Spread sp;
      sp.norm = 10.0;
      if (nondet && std::string(out) == "dW") {
        sp.diff_norm = 1e-6 * std::sqrt(double(p.N));
        sp.max_abs_diff = 1e-7 * std::sqrt(double(p.N));
      }
      d.spread[out] = sp;
    }
    o.determinism = d;
    db::Timing t;
    t.samples_ms = {ms, ms * 1.02, ms * 0.99, ms * 1.01, ms};
    t.flops = work;
    t.warmup = 1;
    t.peak_extra_bytes = int64_t(mb * (1 << 20)) + (s == "partials" ? int64_t(pv->param("sk", 1)) * p.V * p.D * 4 : 0);
    db::summarize(t);
    o.timing = t;
    return o;
  }
};

inline DeviceInfo synth_device() {
  return fake_device();
}

}  // namespace detfuse::testing
