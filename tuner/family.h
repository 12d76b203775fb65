// The family-neutral contract of the tuner (DESIGN.md, "Families: one tuner for
// all"). The orchestration (tuner.h: plan, can_run, resume, budget, selection;
// best.h; verify.h; bench.h; the supervisor) speaks only of:
//
//   Problem   a problem of any family: key, shape, dtype, the store's record
//             (named dims, options key), validation, memory check, JSON form;
//   Variant   a handle on a registered variant of any family: its descriptor
//             and can_run;
//   Measurer  prepare(problem, mode, seed) then measure(variant): correctness
//             against the family's float64 reference, K repeats with digests,
//             timing (a VariantOutcome, one result row);
//   GpuCase   one problem's device state for verify and bench: run once,
//             repeats with digests, timing, dump of every output.
//
// A family joins by specialising FamilyTraits<P> for its problem type and
// ProblemOf<V> for its variant type (tuner/flce_family.h,
// tuner/attention_family.h: problem record, JSON form, reference-backed GPU
// case and measurer, heuristic), and by one line in tuner/families.cpp (the
// JSON form a supervised worker receives). Nothing here names a family.
#pragma once

#include <any>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "db/records.h"
#include "kernels/common/device_info.h"
#include "kernels/common/error.h"
#include "kernels/common/problem.h"
#include "kernels/registry.h"
#include "tuner/json.h"
#include "tuner/stats.h"

namespace detfuse::tuner {

// What a measurement runs: the forward pass alone, or forward then backward
// (the tuned mode of every family).
enum class Mode { forward, forward_backward };
const char* to_string(Mode m);

// Specialised by each family for its problem type P. Members (all static):
//   using Variant = ...;                 the registry's variant type
//   using FamilyMode = ...;              the mode its measurer takes
//   static constexpr Family family;
//   static constexpr const char* label;  // in messages: "FLCE", "attention"
//   static FamilyMode family_mode(Mode);
//   static const std::vector<Variant>& variants(const Registry&);
//   static std::optional<std::string> can_run(const Variant&, const P&, Mode, const DeviceInfo&);
//   static std::string shape(const P&);  // short text for progress lines
//   static db::ProblemRecord record(const P&);
//   static void check_fits(const P&, const DeviceInfo*);  // throws when it cannot fit
//   static Json to_json(const P&);  static P from_json(const Json&);
//   static double flops(const P&, Mode);
//   static std::string heuristic(const Registry&, const P&, Mode, const DeviceInfo&);  // a variant name
//   static std::unique_ptr<GpuCase> make_case(const P&, Mode, const HostInputs&, int64_t seed, const DeviceInfo&);
//   static const std::vector<std::string>& output_names();  // digest order
//   static std::vector<Mode> bench_modes();  // what bench times, the tuned mode last
//   static const char* headline_output();    // the gradient bench counts digests of
//   static constexpr bool has_baseline;       // whether bench_baseline times anything
//   static BenchBaseline bench_baseline(const P&, int min_reps);
template <class P>
struct FamilyTraits;

// Specialised by each family: ProblemOf<ItsVariant>::type is its problem type.
template <class V>
struct ProblemOf;

class Variant;
class GpuCase;

// What `detfuse bench` times beside the variants in the same run, for families
// that have such a reference (FLCE: three cuBLAS GEMMs of the shape: logits,
// dX, dW); available false otherwise.
struct BenchBaseline {
  bool available = false;
  double logits_ms = 0, dx_ms = 0, dw_ms = 0, total_ms = 0;
  std::string note;
};

// Host inputs of one problem (the family's own input type, e.g.
// reference::FlceInputs); empty: the seeded inputs of (problem, seed).
using HostInputs = std::any;

// A problem of any family: a copyable value holding the family's problem.
class Problem {
 public:
  Problem() = default;
  template <class P, class = std::enable_if_t<!std::is_same_v<std::decay_t<P>, Problem>>,
            class = decltype(FamilyTraits<P>::family)>
  Problem(const P& p);  // implicit: a FlceProblem or AttentionProblem is a Problem

  explicit operator bool() const { return impl_ != nullptr; }
  Family family() const { return impl().family(); }
  const char* label() const { return impl().label(); }  // "FLCE", "attention"
  std::string key() const { return impl().key(); }
  std::string shape() const { return impl().shape(); }
  DType dtype() const { return impl().dtype(); }
  void validate() const { impl().validate(); }
  db::ProblemRecord record() const { return impl().record(); }
  // Throws detfuse::Error (runtime) when the problem cannot fit this machine's
  // memory or `dev` (null: the host only).
  void check_fits(const DeviceInfo* dev) const { impl().check_fits(dev); }
  Json to_json() const;  // the family's JSON form plus "family"
  double flops(Mode m) const { return impl().flops(m); }
  // Every registered variant of the family, in registration order.
  std::vector<Variant> variants(const Registry& reg) const;
  std::optional<Variant> find_variant(const Registry& reg, std::string_view name) const;
  std::string heuristic(const Registry& reg, Mode m, const DeviceInfo& dev) const {
    return impl().heuristic(reg, m, dev);
  }
  std::unique_ptr<GpuCase> make_case(Mode m, const HostInputs& in, int64_t seed, const DeviceInfo& dev) const;
  const std::vector<std::string>& output_names() const { return impl().output_names(); }
  std::vector<Mode> bench_modes() const { return impl().bench_modes(); }
  const char* headline_output() const { return impl().headline_output(); }
  bool has_baseline() const { return impl().has_baseline(); }
  BenchBaseline bench_baseline(int min_reps) const { return impl().bench_baseline(min_reps); }

  template <class P>
  bool is() const {
    return impl_ && impl_->family() == FamilyTraits<P>::family;
  }
  // The family's problem; invalid_argument when it is of another family.
  template <class P>
  const P& as() const;

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual Family family() const = 0;
    virtual const char* label() const = 0;
    virtual std::string key() const = 0;
    virtual std::string shape() const = 0;
    virtual DType dtype() const = 0;
    virtual void validate() const = 0;
    virtual db::ProblemRecord record() const = 0;
    virtual void check_fits(const DeviceInfo*) const = 0;
    virtual Json to_json() const = 0;
    virtual double flops(Mode) const = 0;
    virtual std::vector<Variant> variants(const Registry&) const = 0;
    virtual std::string heuristic(const Registry&, Mode, const DeviceInfo&) const = 0;
    virtual std::unique_ptr<GpuCase> make_case(Mode, const HostInputs&, int64_t, const DeviceInfo&) const = 0;
    virtual const std::vector<std::string>& output_names() const = 0;
    virtual std::vector<Mode> bench_modes() const = 0;
    virtual const char* headline_output() const = 0;
    virtual bool has_baseline() const = 0;
    virtual BenchBaseline bench_baseline(int) const = 0;
  };
  template <class P>
  struct Model;
  const Concept& impl() const {
    if (!impl_) throw Error("tuner: an empty Problem was used");
    return *impl_;
  }
  std::shared_ptr<const Concept> impl_;
};

// A handle on a registered variant of any family (it does not own it: the
// registry outlives it).
class Variant {
 public:
  template <class V, class P = typename ProblemOf<V>::type>
  Variant(const V& v)  // implicit: a FlceVariant or AttentionVariant is a Variant
      : desc_(&v.desc), typed_(&v), family_(FamilyTraits<P>::family), can_run_(&can_run_impl<V, P>) {}

  const VariantDesc& desc() const { return *desc_; }
  const std::string& name() const { return desc_->name; }
  Family family() const { return family_; }
  // Empty when it can run the problem in this mode on the device, else the
  // reason; invalid_argument for a problem of another family.
  std::optional<std::string> can_run(const Problem& p, Mode m, const DeviceInfo& dev) const {
    return can_run_(typed_, p, m, dev);
  }
  template <class V>
  const V& as() const {
    if (family_ != FamilyTraits<typename ProblemOf<V>::type>::family)
      throw invalid_argument("variant '" + name() + "' is a " + to_string(family_) + " variant");
    return *static_cast<const V*>(typed_);
  }
  bool operator==(const Variant& o) const { return typed_ == o.typed_; }

 private:
  template <class V, class P>
  static std::optional<std::string> can_run_impl(const void* v, const Problem& p, Mode m, const DeviceInfo& d) {
    return FamilyTraits<P>::can_run(*static_cast<const V*>(v), p.as<P>(), m, d);
  }
  const VariantDesc* desc_;
  const void* typed_;
  Family family_;
  std::optional<std::string> (*can_run_)(const void*, const Problem&, Mode, const DeviceInfo&);
};

template <class P>
struct Problem::Model final : Problem::Concept {
  using T = FamilyTraits<P>;
  P p;
  explicit Model(const P& x) : p(x) {}
  Family family() const override { return T::family; }
  const char* label() const override { return T::label; }
  std::string key() const override { return p.key(); }
  std::string shape() const override { return T::shape(p); }
  DType dtype() const override { return p.dtype; }
  void validate() const override { p.validate(); }
  db::ProblemRecord record() const override { return T::record(p); }
  void check_fits(const DeviceInfo* dev) const override { T::check_fits(p, dev); }
  Json to_json() const override { return T::to_json(p); }
  double flops(Mode m) const override { return T::flops(p, m); }
  std::vector<Variant> variants(const Registry& reg) const override {
    std::vector<Variant> out;
    for (const auto& v : T::variants(reg)) out.emplace_back(v);
    return out;
  }
  std::string heuristic(const Registry& reg, Mode m, const DeviceInfo& dev) const override {
    return T::heuristic(reg, p, m, dev);
  }
  std::unique_ptr<GpuCase> make_case(Mode m, const HostInputs& in, int64_t seed, const DeviceInfo& dev) const override {
    return T::make_case(p, m, in, seed, dev);
  }
  const std::vector<std::string>& output_names() const override { return T::output_names(); }
  std::vector<Mode> bench_modes() const override { return T::bench_modes(); }
  const char* headline_output() const override { return T::headline_output(); }
  bool has_baseline() const override { return T::has_baseline; }
  BenchBaseline bench_baseline(int min_reps) const override { return T::bench_baseline(p, min_reps); }
};

template <class P, class, class>
Problem::Problem(const P& p) : impl_(std::make_shared<Model<P>>(p)) {}

template <class P>
const P& Problem::as() const {
  if (!is<P>())
    throw invalid_argument("a " + std::string(to_string(FamilyTraits<P>::family)) + " problem was expected, got " +
                           (impl_ ? std::string(to_string(impl_->family())) : std::string("none")));
  return static_cast<const Model<P>&>(*impl_).p;
}

// Variants of the problem's family and dtype, restricted to `names` when not
// empty (duplicates dropped; an unknown name, one of another family or dtype
// is invalid_argument naming --variant).
std::vector<Variant> plan_variants(const Registry& reg, const Problem& p, const std::vector<std::string>& names);

// ------------------------------------------------------------------ measuring

// What measuring one variant produced (becomes one result row).
struct VariantOutcome {
  std::string status = db::kResultOk;  // ok, incorrect, error, crashed
  std::string reason;
  std::optional<db::Correctness> correctness;
  std::optional<db::Determinism> determinism;
  std::optional<db::Timing> timing;
  bool interrupted = false;   // abandoned on request (Ctrl-C): nothing is recorded
  // The CUDA context is unusable: record, then stop the run (in-process
  // measuring). A supervised measurer restarts its worker and clears it.
  bool context_lost = false;
  // What the variant's time cap cut, e.g. "repeats 812 of 1000000000" or
  // "timing 5 of 200 repetitions"; empty when nothing was cut.
  std::string cut;
};

struct MeasureControl {
  int repeats = 5;                  // K, for the determinism check
  // Soft cap of this variant's measuring (min(--time-cap, budget left)): from
  // the start of measure(), the K repeats and the timing repetitions stop when
  // it is spent, past their minimums (2 repeats, 5 timing repetitions; the
  // correctness check is never cut). The outcome's `cut` says what was cut.
  double time_cap_s = 20;
  // Hard cap (--kill-after): a supervised measurer kills a worker that has not
  // answered after this long and records the variant `crashed` ("timeout: ...").
  // 0: none. In-process measurers cannot enforce it.
  double kill_after_s = 0;
  std::function<bool()> stop;       // true when the caller wants to stop (Ctrl-C)
  std::function<void(const std::string&)> note;  // optional sub-step progress
  // `tune --levels`: after the repeats, the sm_count and portable checks
  // (tuner/levels.h; 2 more runs of the variant, and a CPU emulation).
  bool levels = false;
};

class Measurer {
 public:
  virtual ~Measurer() = default;
  // Once per (problem, seed) before its first measured variant: inputs, device
  // buffers, the float64 reference. Throws on failure.
  virtual void prepare(const Problem& p, Mode mode, int64_t seed) = 0;
  // Checks, repeats and times one variant of the prepared problem. Errors of
  // the variant are reported in the outcome, not thrown.
  virtual VariantOutcome measure(const Variant& v, const MeasureControl& ctl) = 0;
  // Frees what prepare() holds.
  virtual void release() {}
  // Called now and then (about every second) while a supervised measurer waits
  // for its worker, so the caller can keep a heartbeat; in-process measurers
  // never call it.
  virtual void set_wait_hook(std::function<void()>) {}
};

// A family's measurer written against its own types (FlceMeasurer,
// AttentionMeasurer): the neutral calls are forwarded to the typed ones.
template <class P>
class MeasurerFor : public Measurer {
 public:
  using Traits = FamilyTraits<P>;
  using VariantType = typename Traits::Variant;
  using ModeType = typename Traits::FamilyMode;
  virtual void prepare(const P& p, ModeType mode, int64_t seed) = 0;
  virtual VariantOutcome measure(const VariantType& v, const MeasureControl& ctl) = 0;
  void prepare(const Problem& p, Mode mode, int64_t seed) final { prepare(p.as<P>(), Traits::family_mode(mode), seed); }
  VariantOutcome measure(const Variant& v, const MeasureControl& ctl) final {
    return measure(v.as<VariantType>(), ctl);
  }
};

// One problem's device state, shared by verify and bench (and a family's
// measurer): inputs uploaded, outputs allocated, an L2-flush buffer.
class GpuCase {
 public:
  virtual ~GpuCase() = default;
  // Poisons the outputs, runs v once (the case's mode), synchronises. Throws on failure.
  virtual void run_once(const Variant& v) = 0;
  // K repeats, each poisoned then run; every output's digest of every repeat.
  // Returns false when stop() asked to abandon. `cap_spent` (optional) ends
  // the repeats early once true, after at least 2; d.repeats then says how many ran.
  virtual bool repeat_digests(const Variant& v, int repeats, const std::function<bool()>& stop, db::Determinism& d,
                              const std::function<bool()>& cap_spent) = 0;
  // Warm-up then timed repetitions of `timed` (forward, or forward then
  // backward), L2 flushed before each; samples, clocks, peak extra memory,
  // flops (DESIGN.md conventions). False when stop() asked to abandon.
  virtual bool time_mode(const Variant& v, Mode timed, const RepetitionPolicy& policy,
                         const std::function<bool()>& stop, db::Timing& t, int* uncapped) = 0;
  // Writes every output of the last run as .npy (float32) into dir.
  virtual void dump_outputs(const std::filesystem::path& dir) = 0;
  // What run_once and repeat_digests run from now on; false when the case
  // cannot (it was prepared for less, or its family's case has one mode).
  virtual bool set_mode(Mode) { return false; }
  // The portable level check (tuner/levels.h): the XXH3-128 hex digest of
  // every output of the variant's CPU emulation (reference/emulate.h) on the
  // case's inputs, as (output, hex) in digest order; nullopt with `why` when
  // there is none (no emulation of the variant, the case's mode is not
  // forward+backward, the problem's forward+backward FLOPs exceed max_flops).
  virtual std::optional<std::vector<std::pair<std::string, std::string>>> emulated_digests(const Variant& v,
                                                                                           double max_flops,
                                                                                           std::string* why) {
    (void)v;
    (void)max_flops;
    if (why) *why = "this case has no CPU emulation";
    return std::nullopt;
  }
};

}  // namespace detfuse::tuner
