// A synthetic contention study for CPU tests: a registry whose variant names
// follow the real FLCE naming (engines mma and cublaslt; owning at three chunk
// budgets, atomic and partials with sk/vs) and the real attention naming
// (wgmma owning/atomic/partials/ordered at d128, an owning at d64, a forward-
// only `fwd`, the fma engine), and measurers that measure nothing but return
// outcomes shaped like the real ones (time growing with the contention level,
// atomic's distinct digests and run-to-run spread, partials' workspace), so
// the planner, the runner, the store and plot.py run end to end without a GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "tuner/study/contention_plan.h"
#include "tests/tuner/fakes.h"
#include "tuner/gpu_measurer.h"

namespace detfuse::testing {

inline FlceVariant synth_variant(const std::string& engine, const std::string& strategy,
                                 std::vector<std::pair<std::string, int64_t>> params, bool study_only = false) {
  FlceVariant v = fake_flce(strategy, 64);
  v.desc.study_only = study_only;
  v.desc.engine = engine;
  v.desc.params = std::move(params);
  v.desc.name = VariantDesc::canonical_name(Family::flce, DType::bf16, engine, strategy, v.desc.params);
  v.desc.deterministic = strategy != "atomic";
  return v;
}

inline AttentionVariant synth_attention_variant(const std::string& engine, const std::string& strategy,
                                                std::vector<std::pair<std::string, int64_t>> params) {
  int64_t d = 128;
  for (const auto& [k, v] : params)
    if (k == "d") d = v;
  AttentionVariant v = fake_attention(strategy, 64, DType::bf16, strategy != "atomic", 1 << 30, d);
  v.desc.engine = engine;
  v.desc.params = std::move(params);
  v.desc.name = VariantDesc::canonical_name(Family::attention, DType::bf16, engine, strategy, v.desc.params);
  return v;
}

inline Registry synth_registry() {
  Registry r;
  for (int64_t bm : {128, 64}) {
    for (int64_t mb : {512, 1024, 1920})
      r.add(synth_variant("mma", "owning", {{"bm", bm}, {"bn", 128}, {"mb", mb}}));
    r.add(synth_variant("mma", "atomic", {{"bm", bm}, {"bn", 128}, {"mb", 1024}, {"sk", 4}}));
    r.add(synth_variant("mma", "partials", {{"bm", bm}, {"bn", 128}, {"mb", 1024}, {"sk", 4}, {"vs", 256}}));
    if (bm != 128) continue;
    // The contention study's row-split levels (study variants), as
    // kernels/flce/driver.cuh registers them: sk0 = every row block.
    for (int64_t sk : {1, 16, 0}) {
      r.add(synth_variant("mma", "atomic", {{"bm", bm}, {"bn", 128}, {"mb", 1024}, {"sk", sk}}, true));
      r.add(synth_variant("mma", "partials", {{"bm", bm}, {"bn", 128}, {"mb", 1024}, {"sk", sk}, {"vs", sk ? 1024 / sk : 0}},
                          true));
    }
  }
  for (int64_t mb : {512, 2000})
    r.add(synth_variant("cublaslt", "owning", {{"mb", mb}}));
  r.add(synth_variant("cublaslt", "partials", {{"mb", 1024}, {"sk", 2}, {"vs", 0}}));
  // Another dtype: never planned for bf16.
  r.add(fake_flce("owning", 64, DType::f32));
  // Attention, in the real registry's order: forward-only first, then owning,
  // atomic, partials (two slab bounds), ordered, and the fma engine.
  r.add(synth_attention_variant("wgmma", "fwd", {{"br", 128}, {"bc", 128}, {"st", 2}, {"ov", 1}, {"pp", 0}, {"d", 128}}));
  for (int64_t st : {2, 3})
    r.add(synth_attention_variant("wgmma", "owning", {{"br", 64}, {"bc", 128}, {"st", st}, {"qbc", 64}, {"qst", 2}, {"d", 128}}));
  r.add(synth_attention_variant("wgmma", "owning", {{"br", 64}, {"bc", 128}, {"st", 2}, {"qbc", 128}, {"qst", 2}, {"d", 64}}));
  for (int64_t st : {2, 3})
    r.add(synth_attention_variant("wgmma", "atomic", {{"br", 64}, {"bc", 128}, {"st", st}, {"d", 128}}));
  for (int64_t mb : {256, 64})
    r.add(synth_attention_variant("wgmma", "partials", {{"br", 64}, {"bc", 128}, {"st", 2}, {"d", 128}, {"mb", mb}}));
  r.add(synth_attention_variant("wgmma", "ordered", {{"br", 64}, {"bc", 128}, {"st", 2}, {"d", 128}}));
  for (const char* s : {"owning", "partials", "atomic"}) {
    std::vector<std::pair<std::string, int64_t>> p = {{"br", 64}, {"bc", 64}, {"w", 8}, {"d", 128}};
    if (std::string(s) == "partials") p.push_back({"mb", 256});
    r.add(synth_attention_variant("fma", s, p));
  }
  return r;
}

// Outcomes shaped like the real ones; deterministic from (variant, problem).
//
// Row splits: sk adders per dW element per chunk (sk0: one per bm row block of
// the chunk). Atomic's repeats differ only with more than one adder per chunk,
// and its bits then change with the SM count `sms`; the deterministic
// strategies give the same bits on any SM count. Time grows with |adders - 4|
// (1% per 2 adders) and with 132 / sms.
class SynthMeasurer : public tuner::FlceMeasurer {
 public:
  FlceProblem p;
  int measured = 0;
  int sms = 132;  // the slice the synthetic measurement ran on
  void prepare(const FlceProblem& q, FlceMode, int64_t) override { p = q; }
  tuner::VariantOutcome measure(const FlceVariant& v, const tuner::MeasureControl& ctl) override {
    ++measured;
    const auto pv = study::parse_variant_name(v.desc.name);
    const std::string& s = v.desc.strategy;
    const double mb = double(pv->param("mb", 1024));
    const double work = 6.0 * double(p.N) * double(p.D) * double(p.V);
    double ms = work / 4e11 * (v.desc.engine == "cublaslt" ? 1.1 : 1.0);
    const int64_t bm = pv->param("bm", 128), sk = pv->param("sk", 1);
    const int64_t chunk = std::min<int64_t>(p.N, std::max<int64_t>(bm, (int64_t(mb) << 20) / (p.V * 4) / bm * bm));
    const int64_t blocks = (chunk + bm - 1) / bm;
    const int64_t adders = sk == 0 ? blocks : std::min(sk, blocks);
    ms *= 132.0 / double(sms);
    if (s == "atomic") {
      ms *= 0.9 + 1e-5 * double(p.N) / double(bm);  // contention grows with N
      ms *= 1 + 0.005 * double(std::abs(adders - 4));
    }
    if (s == "partials") ms *= 1.05 + 0.02 * std::log2(double(p.N) / 512.0);
    if (s == "owning") ms *= 1.0 + 0.15 * 1024.0 / mb;
    tuner::VariantOutcome o;
    const double bf16_err = 3e-3 / std::sqrt(double(p.D) / 1024.0);
    o.correctness = db::Correctness{"full", {{"loss", 1e-6}, {"lse", 1e-6}, {"dX", bf16_err}, {"dW", bf16_err}}, 1e-2, true};
    db::Determinism d;
    d.repeats = ctl.repeats;
    const bool nondet = s == "atomic" && adders > 1;
    // Invariance classes: deterministic variants of one chunk budget agree.
    const std::string cls = std::string(32, char('a' + int(mb) % 7));
    for (int r = 0; r < ctl.repeats; ++r)
      for (const char* out : {"loss", "lse", "dX", "dW"}) {
        std::string dg = std::string(out) == "dW" ? cls : std::string(32, 'e');
        if (nondet && std::string(out) == "dW") {
          dg[0] = char('0' + r);
          dg[1] = char('0' + sms % 10);
        }
        d.digests.push_back({r, out, dg});
      }
    d.level = nondet ? db::kLevelNone : db::kLevelRunToRun;
    for (const char* out : {"loss", "lse", "dX", "dW"}) {
      db::Spread sp;
      sp.norm = 10.0;
      if (nondet && std::string(out) == "dW") {
        sp.diff_norm = 1e-6 * std::sqrt(double(p.N)) * std::sqrt(double(adders) / 4.0);
        sp.max_abs_diff = 1e-7 * std::sqrt(double(p.N)) * std::sqrt(double(adders) / 4.0);
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

// Attention outcomes shaped like the real ones (H200 figures of
// experiments/attention_bench_log.md, rounded), deterministic from (variant,
// problem). With nkb = Sk / bc key blocks adding into each dQ tile (half that,
// on average, when causal) and g = H / Hkv:
//   owning   420 TFLOP/s at every contention level;
//   atomic   500 TFLOP/s / (1 + 0.02 nkb): faster than owning below nkb 9.5,
//            i.e. up to Sk=1024 at bc=128 (crossover between 1024 and 2048);
//   ordered  470 TFLOP/s / (1 + 0.01 nkb): the fastest deterministic variant
//            up to Sk=1024;
//   partials 420 TFLOP/s / ((1.3 + 0.05 log2(Sk / 512)) sqrt(g) (mb 64: x1.1)).
// dQ: atomic's repeats differ (distinct digests, spread growing with
// sqrt(nkb)); every deterministic strategy its own dQ bits (its own summation
// order), O, LSE, dK, dV the same bits in every variant.
class SynthAttentionMeasurer : public tuner::AttentionMeasurer {
 public:
  AttentionProblem p;
  int measured = 0;
  void prepare(const AttentionProblem& q, tuner::Mode, int64_t) override { p = q; }
  tuner::VariantOutcome measure(const AttentionVariant& v, const tuner::MeasureControl& ctl) override {
    ++measured;
    const auto pv = study::parse_variant_name(v.desc.name);
    const std::string& s = v.desc.strategy;
    const double nkb = double(p.Sk) / double(pv->param("bc", 128)) / (p.causal ? 2.0 : 1.0);
    const double g = double(p.H / p.Hkv);
    const double flops = 3.5 * p.flops_forward();
    double tflops = 420;
    if (s == "atomic") tflops = 500 / (1 + 0.02 * nkb);
    if (s == "ordered") tflops = 470 / (1 + 0.01 * nkb);
    if (s == "partials")
      tflops = 420 / ((1.3 + 0.05 * std::log2(double(p.Sk) / 512.0)) * std::sqrt(g) *
                      (pv->param("mb", 256) < 256 ? 1.1 : 1.0));
    if (v.desc.engine == "fma") tflops /= 40;
    if (pv->param("st") == 3) tflops *= 0.97;
    const double ms = flops / (tflops * 1e9);
    tuner::VariantOutcome o;
    const double bf16_err = 4e-3;
    o.correctness = db::Correctness{
        "slice", {{"O@slice", bf16_err}, {"lse@slice", 1e-7}, {"dQ@slice", bf16_err}}, 2e-2, true};
    db::Determinism d;
    d.repeats = ctl.repeats;
    const bool nondet = s == "atomic";
    const std::string dq_class = std::string(32, char('a' + int(s.size()) % 6));  // hex digits
    for (int r = 0; r < ctl.repeats; ++r)
      for (const char* out : {"O", "lse", "dQ", "dK", "dV"}) {
        std::string dg = std::string(out) == "dQ" ? dq_class : std::string(32, 'e');
        if (nondet && std::string(out) == "dQ") dg[0] = char('0' + r);
        d.digests.push_back({r, out, dg});
      }
    d.level = nondet ? db::kLevelNone : db::kLevelRunToRun;
    for (const char* out : {"O", "lse", "dQ", "dK", "dV"}) {
      db::Spread sp;
      sp.norm = 100.0;
      if (nondet && std::string(out) == "dQ") {
        sp.diff_norm = 1e-5 * std::sqrt(nkb);
        sp.max_abs_diff = 2e-6 * std::sqrt(nkb);
      }
      d.spread[out] = sp;
    }
    o.determinism = d;
    db::Timing t;
    t.samples_ms = {ms, ms * 1.02, ms * 0.99, ms * 1.01, ms};
    t.flops = flops;
    t.warmup = 1;
    const int64_t rows = p.B * p.H * p.Sq;
    int64_t extra = rows * 4;                                              // D = rowsum(dO O)
    if (s == "atomic") extra += rows * p.d * 4;                            // fp32 dQ accumulator
    if (s == "partials") extra += pv->param("mb", 256) << 20;              // the slab bound
    t.peak_extra_bytes = extra;
    db::summarize(t);
    o.timing = t;
    return o;
  }
};

// The measurer of a worker that serves both families (as tuner::make_gpu_measurer).
inline std::unique_ptr<tuner::Measurer> synth_measurers() {
  auto m = std::make_unique<tuner::FamilyMeasurers>();
  m->add(Family::flce, std::make_unique<SynthMeasurer>());
  m->add(Family::attention, std::make_unique<SynthAttentionMeasurer>());
  return m;
}

inline DeviceInfo synth_device() {
  return fake_device();
}

}  // namespace detfuse::testing
