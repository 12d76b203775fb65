// Test doubles for the tuner and the command on a machine without a GPU: FLCE
// and attention variants whose launch does nothing (attention: the second
// family, proving the orchestration is family-neutral), measurers that return
// scripted outcomes, a controllable clock, a fake device and a temporary
// database path.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <unistd.h>
#include <string>

#include "db/store.h"
#include "kernels/common/error.h"
#include "kernels/registry.h"
#include "tests/flce_shape.h"
#include "tuner/budget.h"
#include "tuner/gpu_measurer.h"
#include "tuner/tuner.h"

namespace detfuse::testing {

inline FlceVariant fake_flce(const std::string& strategy, int64_t bm, DType dtype = DType::bf16,
                             bool deterministic = true, int64_t max_n = 1 << 30) {
  FlceVariant v;
  v.desc.family = Family::flce;
  v.desc.dtype = dtype;
  v.desc.engine = dtype == DType::bf16 ? "mma" : "fma";
  v.desc.strategy = strategy;
  v.desc.params = {{"bm", bm}};
  v.desc.name = VariantDesc::canonical_name(Family::flce, dtype, v.desc.engine, strategy, v.desc.params);
  v.desc.deterministic = deterministic;
  v.desc.summary = "fake " + strategy + " variant for tests";
  v.can_run = [max_n](const FlceProblem& p, FlceMode, const DeviceInfo&) -> std::optional<std::string> {
    if (p.N > max_n) return "N above " + std::to_string(max_n);
    return std::nullopt;
  };
  v.workspace_bytes = [](const FlceProblem&, FlceMode) { return size_t(0); };
  v.launch = [](const FlceProblem&, FlceMode, const FlceArgs&, cudaStream_t) {};
  return v;
}

// owning bm64/bm128 (deterministic), atomic bm64 (not), partials bm64 (refuses N > 4096), fp32 owning bm64.
inline Registry fake_registry() {
  Registry r;
  r.add(fake_flce("owning", 64));
  r.add(fake_flce("owning", 128));
  r.add(fake_flce("atomic", 64, DType::bf16, false));
  r.add(fake_flce("partials", 64, DType::bf16, true, 4096));
  r.add(fake_flce("owning", 64, DType::f32));
  return r;
}

inline DeviceInfo fake_device() {
  DeviceInfo d;
  d.ordinal = 0;
  d.name = "NVIDIA H200";
  d.uuid = "GPU-00000000-1111-2222-3333-444444444444";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.total_memory_bytes = 150ull << 30;
  d.l2_bytes = 60 << 20;
  d.driver_version = 13000;
  d.driver_release = "580.00.00";
  d.runtime_version = 13000;
  return d;
}

struct FakeClock {
  double now = 1000.0;
  tuner::Budget::Clock fn() {
    return [this] { return now; };
  }
};

// Outcomes by variant name; defaults: ok, correct, run_to_run unless the
// variant is atomic (5 distinct dW digests); time by name.
class FakeMeasurer : public tuner::FlceMeasurer {
 public:
  FakeClock* clock = nullptr;
  double seconds_per_variant = 10;
  std::map<std::string, double> median_ms;  // default 10
  std::map<std::string, tuner::VariantOutcome> scripted;
  std::function<void(const std::string&)> on_measure;  // called first
  std::vector<std::string> measured;
  int prepares = 0;

  void prepare(const FlceProblem&, FlceMode, int64_t) override { ++prepares; }
  tuner::VariantOutcome measure(const FlceVariant& v, const tuner::MeasureControl&) override {
    if (on_measure) on_measure(v.desc.name);
    measured.push_back(v.desc.name);
    if (clock) clock->now += seconds_per_variant;
    auto it = scripted.find(v.desc.name);
    if (it != scripted.end()) return it->second;
    tuner::VariantOutcome o;
    o.correctness = db::Correctness{"full", {{"loss", 1e-6}, {"dW", 1e-3}}, 1e-2, true};
    db::Determinism d;
    d.repeats = 5;
    bool nondet = v.desc.strategy == "atomic";
    for (int r = 0; r < 5; ++r) {
      d.digests.push_back({r, "loss", std::string(32, 'a')});
      std::string dw(32, 'b');
      if (nondet) dw[0] = char('0' + r);
      d.digests.push_back({r, "dW", dw});
    }
    d.level = nondet ? db::kLevelNone : db::kLevelRunToRun;
    o.determinism = d;
    db::Timing t;
    double ms = median_ms.count(v.desc.name) ? median_ms[v.desc.name] : 10.0;
    t.samples_ms = {ms, ms * 1.01, ms * 0.99, ms, ms};
    t.flops = 1e12;
    t.warmup = 1;
    db::summarize(t);
    o.timing = t;
    return o;
  }
};

// A fake variant whose launch misbehaves the way a broken kernel can take its
// process down: "abort" calls abort(), "hang" never returns, "throw" throws a
// detfuse::Error, "lost" reports a lost CUDA context (see LaunchingMeasurer).
inline FlceVariant misbehaving_flce(const std::string& how, int64_t bm = 32) {
  FlceVariant v = fake_flce("owning", bm);
  v.desc.params = {{"bm", bm}, {how == "abort" ? "ab" : how == "hang" ? "hg" : how == "throw" ? "th" : "lo", 1}};
  v.desc.name = VariantDesc::canonical_name(Family::flce, v.desc.dtype, v.desc.engine, "owning", v.desc.params);
  v.desc.summary = "fake variant that " + how + "s (supervision tests)";
  v.launch = [how](const FlceProblem&, FlceMode, const FlceArgs&, cudaStream_t) {
    if (how == "abort") std::abort();
    if (how == "hang")
      for (;;) pause();
    if (how == "throw") throw Error("fake launch failure");
  };
  return v;
}

// A measurer that launches the variant (so a misbehaving launch acts inside
// whatever process measures) and honours the soft cap: `repeat_ms` of work per
// repeat, repeats stop once ctl.time_cap_s is spent (past 2), as the GPU
// measurer does. Variants made by misbehaving_flce("lost") report a lost context.
class LaunchingMeasurer : public tuner::FlceMeasurer {
 public:
  double repeat_ms = 0;
  int prepares = 0;
  void prepare(const FlceProblem& p, FlceMode, int64_t) override {
    ++prepares;
    p_ = p;
  }
  tuner::VariantOutcome measure(const FlceVariant& v, const tuner::MeasureControl& ctl) override {
    tuner::SoftCap cap(ctl.time_cap_s);
    tuner::VariantOutcome o;
    if (v.desc.name.find("_lo1") != std::string::npos) {
      o.status = db::kResultCrashed;
      o.reason = "CUDA context lost: cudaErrorIllegalAddress (an illegal memory access was encountered)";
      o.context_lost = true;
      return o;
    }
    try {
      v.launch(p_, FlceMode::forward_backward, FlceArgs{}, nullptr);
    } catch (const std::exception& e) {
      o.status = db::kResultError;
      o.reason = e.what();
      return o;
    }
    o.correctness = db::Correctness{"full", {{"dW", 1e-3}}, 1e-2, true};
    db::Determinism d;
    int r = 0;
    for (; r < ctl.repeats && cap.keep_going(r, 2); ++r) {
      if (ctl.stop && ctl.stop()) {
        o.interrupted = true;
        return o;
      }
      if (repeat_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(int64_t(repeat_ms * 1000)));
      d.digests.push_back({r, "dW", std::string(32, 'c')});
    }
    d.repeats = r;
    d.level = db::kLevelRunToRun;
    if (r < ctl.repeats) o.cut = "repeats " + std::to_string(r) + " of " + std::to_string(ctl.repeats);
    o.determinism = d;
    db::Timing t;
    t.samples_ms = {1, 1, 1, 1, 1};
    t.flops = 1e9;
    db::summarize(t);
    o.timing = t;
    return o;
  }

 private:
  FlceProblem p_;
};

// A fresh path in a fresh temporary directory (removed by the destructor).
struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    std::random_device rd;
    dir = std::filesystem::temp_directory_path() / ("detfuse-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return dir / name; }
};

inline FlceProblem problem(int64_t N, int64_t D, int64_t V, DType t = DType::bf16) { return flce_shape(N, D, V, t); }

// ------------------------------------------------------------- attention fakes

// A fake attention variant "attention.<dtype>.<engine>.<strategy>.br<br>_bc64";
// can_run refuses head dims other than `head_dim` and Sq above max_sq (for the
// backward pass only when backward_only_limit: a forward_backward refusal).
inline AttentionVariant fake_attention(const std::string& strategy, int64_t br, DType dtype = DType::bf16,
                                       bool deterministic = true, int64_t max_sq = 1 << 30, int64_t head_dim = 128,
                                       bool backward_only_limit = false) {
  AttentionVariant v;
  v.desc.family = Family::attention;
  v.desc.dtype = dtype;
  v.desc.engine = dtype == DType::bf16 ? "mma" : "fma";
  v.desc.strategy = strategy;
  v.desc.params = {{"br", br}, {"bc", 64}, {"d", head_dim}};
  v.desc.name = VariantDesc::canonical_name(Family::attention, dtype, v.desc.engine, strategy, v.desc.params);
  v.desc.deterministic = deterministic;
  v.desc.summary = "fake attention " + strategy + " variant for tests";
  v.can_run = [max_sq, head_dim, backward_only_limit](const AttentionProblem& p, AttentionMode m,
                                                      const DeviceInfo&) -> std::optional<std::string> {
    if (p.d != head_dim) return "head dim " + std::to_string(p.d) + " (this variant: " + std::to_string(head_dim) + ")";
    if (p.Sq > max_sq && (!backward_only_limit || m == AttentionMode::backward))
      return "Sq above " + std::to_string(max_sq);
    return std::nullopt;
  };
  v.workspace_bytes = [](const AttentionProblem&, AttentionMode) { return size_t(0); };
  v.launch = [](const AttentionProblem&, AttentionMode, const AttentionArgs&, cudaStream_t) {};
  return v;
}

// The FLCE fakes plus attention: owning br64/br128 (deterministic, d128),
// atomic br64 (not), partials br64 (backward refuses Sq > 4096), owning br64
// for d64, fp32 owning br64.
inline Registry fake_registry_with_attention() {
  Registry r = fake_registry();
  r.add(fake_attention("owning", 64));
  r.add(fake_attention("owning", 128));
  r.add(fake_attention("atomic", 64, DType::bf16, false));
  r.add(fake_attention("partials", 64, DType::bf16, true, 4096, 128, true));
  r.add(fake_attention("owning", 64, DType::bf16, true, 1 << 30, 64));
  r.add(fake_attention("owning", 64, DType::f32));
  return r;
}

inline AttentionProblem attention_problem(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t d,
                                          bool causal = false, DType t = DType::bf16) {
  AttentionProblem p;
  p.B = B;
  p.H = H;
  p.Hkv = Hkv;
  p.Sq = Sq;
  p.Sk = Sk;
  p.d = d;
  p.causal = causal;
  p.dtype = t;
  return p;
}

// Outcomes by variant name, as FakeMeasurer: ok, correct, run_to_run unless
// the variant is atomic (5 distinct dQ digests); time by name (default 10 ms).
class FakeAttentionMeasurer : public tuner::AttentionMeasurer {
 public:
  FakeClock* clock = nullptr;
  double seconds_per_variant = 10;
  std::map<std::string, double> median_ms;
  std::map<std::string, tuner::VariantOutcome> scripted;
  std::vector<std::string> measured;
  std::vector<std::string> prepared;  // problem keys, in order
  int releases = 0;

  void prepare(const AttentionProblem& p, tuner::Mode, int64_t) override { prepared.push_back(p.key()); }
  void release() override { ++releases; }
  tuner::VariantOutcome measure(const AttentionVariant& v, const tuner::MeasureControl&) override {
    measured.push_back(v.desc.name);
    if (clock) clock->now += seconds_per_variant;
    auto it = scripted.find(v.desc.name);
    if (it != scripted.end()) return it->second;
    tuner::VariantOutcome o;
    o.correctness = db::Correctness{"full", {{"O", 1e-3}, {"lse", 1e-6}, {"dQ", 4e-3}, {"dK", 4e-3}, {"dV", 3e-3}}, 2e-2, true};
    db::Determinism d;
    d.repeats = 5;
    const bool nondet = v.desc.strategy == "atomic";
    for (int r = 0; r < 5; ++r) {
      for (const char* out : {"O", "lse", "dK", "dV"}) d.digests.push_back({r, out, std::string(32, 'a')});
      std::string dq(32, 'd');
      if (nondet) dq[0] = char('0' + r);
      d.digests.push_back({r, "dQ", dq});
    }
    d.distinct = {{"O", 1}, {"lse", 1}, {"dK", 1}, {"dV", 1}, {"dQ", nondet ? 5 : 1}};
    d.level = nondet ? db::kLevelNone : db::kLevelRunToRun;
    o.determinism = d;
    db::Timing t;
    const double ms = median_ms.count(v.desc.name) ? median_ms[v.desc.name] : 10.0;
    t.samples_ms = {ms, ms * 1.01, ms * 0.99, ms, ms};
    t.flops = 3.5e12;
    t.warmup = 1;
    db::summarize(t);
    o.timing = t;
    return o;
  }
};

}  // namespace detfuse::testing
