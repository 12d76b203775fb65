#include "tuner/attention_measurer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/common/error.h"
#include "reference/compare.h"
#include "reference/inputs.h"
#include "tuner/gpu_loop.h"
#include "tuner/text.h"

namespace detfuse::tuner {

AttentionTolerances attention_tolerances_for(DType dtype) {
  if (dtype == DType::f32) return AttentionTolerances{1e-5, 1e-4};
  return AttentionTolerances{2e-2, 1e-4};
}

AttentionProblem attention_check_slice(const AttentionProblem& p, double reduced_macs) {
  AttentionProblem s = p;
  s.B = 1;
  s.Hkv = 1;
  s.H = p.H / p.Hkv;
  s.scale = p.softmax_scale();  // the same scale whatever d (explicit, so the key says it)
  const double per_row = double(s.H) * double(p.Sk) * double(p.d);
  s.Sq = std::clamp<int64_t>(int64_t(reduced_macs / per_row), 1, p.Sq);
  return s;
}

namespace {
// Copies rows [Sq - s.Sq, Sq) of heads [0, s.H) of batch 0 of a [B, H, Sq, w] tensor.
std::vector<float> slice_rows(const AttentionProblem& p, const std::vector<float>& t, const AttentionProblem& s,
                              int64_t w) {
  std::vector<float> out;
  out.reserve(size_t(s.H * s.Sq * w));
  for (int64_t h = 0; h < s.H; ++h) {
    const size_t first = size_t((h * p.Sq + (p.Sq - s.Sq)) * w);
    out.insert(out.end(), t.begin() + first, t.begin() + first + size_t(s.Sq * w));
  }
  return out;
}
}  // namespace

AttentionHostInputs slice_attention_inputs(const AttentionProblem& p, const AttentionHostInputs& in,
                                           const AttentionProblem& s) {
  AttentionHostInputs out;
  out.Q = slice_rows(p, in.Q, s, p.d);
  if (!in.dO.empty()) out.dO = slice_rows(p, in.dO, s, p.d);
  // kv head 0 of batch 0: every key.
  const size_t nk = size_t(p.Sk * p.d);
  out.K.assign(in.K.begin(), in.K.begin() + nk);
  out.V.assign(in.V.begin(), in.V.begin() + nk);
  return out;
}

std::vector<float> slice_query_rows(const AttentionProblem& p, const std::vector<float>& full,
                                    const AttentionProblem& s, int64_t width) {
  return slice_rows(p, full, s, width);
}

double lse_error(const std::vector<float>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  std::vector<float> g;
  std::vector<double> r;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) && ref[i] < 0) {
      if (!(std::isinf(got[i]) && got[i] < 0)) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    g.push_back(got[i]);
    r.push_back(ref[i]);
  }
  return g.empty() ? 0.0 : reference::rel_norm_error(g, r);
}

AttentionGpuMeasurer::AttentionGpuMeasurer(const DeviceInfo& dev, AttentionCheckPolicy check, RepetitionPolicy reps)
    : dev_(dev), check_(check), reps_(reps) {}

AttentionGpuMeasurer::~AttentionGpuMeasurer() = default;

void AttentionGpuMeasurer::release() {
  full_.reset();
  small_.reset();
  ref_full_ = {};
  ref_small_ = {};
}

void AttentionGpuMeasurer::prepare(const AttentionProblem& p, Mode mode, int64_t seed) {
  prepare_or_release(p.key(), [this] { release(); }, [&] { prepare_(p, mode, seed); });
}

void AttentionGpuMeasurer::prepare_(const AttentionProblem& p, Mode mode, int64_t seed) {
  p.validate();
  mode_ = mode;
  const bool backward = mode == Mode::forward_backward;
  AttentionHostInputs in = reference::make_attention_inputs(p, uint64_t(seed));
  const AttentionTolerances tol = attention_tolerances_for(p.dtype);
  const std::string tol_text = "tolerance O" + std::string(backward ? ",dQ,dK,dV " : " ") + format_tolerance(tol.out) + ", lse " +
                               format_tolerance(tol.lse);
  const double macs = double(p.B) * double(p.H) * double(p.Sq) * double(p.Sk) * double(p.d);
  if (macs <= check_.full_check_macs) {
    ref_full_ = reference::attention_reference(p, in, backward, check_.reference_threads);
    checked_what_ = "full; " + tol_text;
    full_ = std::make_unique<AttentionGpuCase>(p, mode, in, dev_);
    return;
  }
  const AttentionProblem s = attention_check_slice(p, check_.reduced_macs);
  AttentionHostInputs small = slice_attention_inputs(p, in, s);
  ref_small_ = reference::attention_reference(s, small, backward, check_.reference_threads);
  checked_what_ = "slice b=0, heads 0-" + std::to_string(s.H - 1) + ", last " + std::to_string(s.Sq) +
                  " queries at full size (O, lse" + (backward ? ", dQ" : "") +
                  ") + all outputs of the slice as a problem (B=1,H=" + std::to_string(s.H) +
                  ",Hkv=1,Sq=" + std::to_string(s.Sq) + ",Sk=" + std::to_string(s.Sk) + "); " + tol_text;
  small_ = std::make_unique<AttentionGpuCase>(s, mode, small, dev_);
  full_ = std::make_unique<AttentionGpuCase>(p, mode, in, dev_);
}

db::Correctness AttentionGpuMeasurer::check(const AttentionVariant& v) {
  if (!full_) throw Error("check() before prepare()");
  const AttentionProblem& p = full_->problem();
  const AttentionTolerances tol = attention_tolerances_for(p.dtype);
  const bool backward = mode_ == Mode::forward_backward;
  db::Correctness c;
  c.checked_what = checked_what_;
  c.tolerance = tol.out;
  bool pass = true;
  auto add = [&](const std::string& name, double err, double bound) {
    c.errors[name] = err;
    pass = pass && (err <= bound);  // NaN fails
  };
  auto check_all = [&](AttentionGpuCase& gc, const reference::AttentionResult& ref) {
    add("O", reference::rel_norm_error(gc.O(), ref.O), tol.out);
    add("lse", lse_error(gc.lse(), ref.lse), tol.lse);
    if (backward) {
      add("dQ", reference::rel_norm_error(gc.dQ(), ref.dQ), tol.out);
      add("dK", reference::rel_norm_error(gc.dK(), ref.dK), tol.out);
      add("dV", reference::rel_norm_error(gc.dV(), ref.dV), tol.out);
    }
  };
  full_->run_once(v);
  if (!small_) {
    check_all(*full_, ref_full_);
  } else {
    const AttentionProblem& s = small_->problem();
    add("O@slice", reference::rel_norm_error(slice_query_rows(p, full_->O(), s, p.d), ref_small_.O), tol.out);
    add("lse@slice", lse_error(slice_query_rows(p, full_->lse(), s, 1), ref_small_.lse), tol.lse);
    if (backward)
      add("dQ@slice", reference::rel_norm_error(slice_query_rows(p, full_->dQ(), s, p.d), ref_small_.dQ), tol.out);
    // The slice as a problem: every output. A variant that refuses it is
    // checked on the full-size slice only.
    std::optional<std::string> refused = FamilyTraits<AttentionProblem>::can_run(v, s, mode_, dev_);
    if (refused) {
      c.checked_what += "; slice problem skipped: " + *refused;
    } else {
      small_->run_once(v);
      check_all(*small_, ref_small_);
    }
  }
  c.pass = pass;
  return c;
}

VariantOutcome AttentionGpuMeasurer::measure(const AttentionVariant& v, const MeasureControl& ctl) {
  if (!full_) {
    VariantOutcome out;
    out.status = db::kResultError;
    out.reason = "measure() before prepare()";
    return out;
  }
  return measure_case(*full_, v, mode_, ctl, reps_, [&] { return check(v); });
}

}  // namespace detfuse::tuner
