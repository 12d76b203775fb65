#include "tuner/flce_measurer.h"

#include <cmath>
#include <cstdio>

#include "kernels/common/error.h"
#include "reference/compare.h"
#include "reference/inputs.h"
#include "tuner/budget.h"
#include "tuner/gpu_loop.h"
#include "tuner/text.h"

namespace detfuse::tuner {

Tolerances tolerances_for(DType dtype) {
  if (dtype == DType::f32) return Tolerances{1e-5, 1e-5, 1e-5};
  return Tolerances{1e-4, 1e-4, 1e-2};
}

FlceGpuMeasurer::FlceGpuMeasurer(const DeviceInfo& dev, CheckPolicy check, RepetitionPolicy reps)
    : dev_(dev), check_(check), reps_(reps) {}

FlceGpuMeasurer::~FlceGpuMeasurer() = default;

void FlceGpuMeasurer::release() {
  full_.reset();
  small_.reset();
  rows_.clear();
  ref_full_ = {};
  ref_small_ = {};
}

void FlceGpuMeasurer::prepare(const FlceProblem& p, FlceMode mode, int64_t seed) {
  prepare_or_release(p.shape(), [this] { release(); }, [&] { prepare_(p, mode, seed); });
}

void FlceGpuMeasurer::prepare_(const FlceProblem& p, FlceMode mode, int64_t seed) {
  mode_ = mode;
  const bool backward = mode != FlceMode::forward;
  reference::FlceInputs in = reference::make_flce_inputs(p, uint64_t(seed));
  const double macs = double(p.N) * double(p.D) * double(p.V);
  const Tolerances tol = tolerances_for(p.dtype);
  const std::string tol_text = "tolerance loss,lse " + format_tolerance(tol.loss) + ", dX,dW " + format_tolerance(tol.grad);
  if (macs <= check_.full_check_macs) {
    ref_full_ = reference::flce_reference(p, in, backward, check_.reference_threads);
    checked_what_ = "full; " + tol_text;
    full_ = std::make_unique<FlceGpuCase>(p, mode, in, dev_);
    return;
  }
  // Large: sampled rows at full size, and everything at a reduced N.
  rows_ = sample_rows(p.N, check_.sample_rows, seed);
  ref_full_ = reference::flce_reference_rows(p, in, rows_, backward, check_.reference_threads);
  FlceProblem ps = p;
  ps.N = std::max<int64_t>(1, std::min<int64_t>(p.N, int64_t(check_.reduced_macs / (double(p.D) * double(p.V)))));
  FlceHostInputs small;
  small.X.assign(in.X.begin(), in.X.begin() + ps.N * p.D);
  small.W = in.W;
  small.y.assign(in.y.begin(), in.y.begin() + ps.N);
  if (!in.dloss.empty()) small.dloss.assign(in.dloss.begin(), in.dloss.begin() + ps.N);
  ref_small_ = reference::flce_reference<float>(ps, small.X.data(), small.W.data(), small.y.data(),
                                                small.dloss.empty() ? nullptr : small.dloss.data(), backward,
                                                check_.reference_threads);
  checked_what_ = "rows:" + std::to_string(rows_.size()) + " sampled at full size (lse" +
                  std::string(p.reduction == Reduction::none ? ", loss" : "") + (backward ? ", dX" : "") +
                  ") + all outputs at N=" + std::to_string(ps.N) + "; " + tol_text;
  small_ = std::make_unique<FlceGpuCase>(ps, mode, small, dev_);
  full_ = std::make_unique<FlceGpuCase>(p, mode, in, dev_);
}

db::Correctness FlceGpuMeasurer::check(const FlceVariant& v) {
  const FlceProblem& p = full_->problem();
  const Tolerances tol = tolerances_for(p.dtype);
  const bool backward = mode_ != FlceMode::forward;
  db::Correctness c;
  c.checked_what = checked_what_;
  c.tolerance = tol.grad;
  bool pass = true;
  auto add = [&](const std::string& name, double err, double bound) {
    c.errors[name] = err;
    pass = pass && (err <= bound);  // NaN fails
  };
  auto check_all = [&](FlceGpuCase& gc, const reference::FlceResult& ref, const std::string& suffix) {
    flce::DeviceCase& dc = gc.device_case();
    const FlceProblem& q = gc.problem();
    std::vector<float> loss = dc.loss();
    if (q.reduction == Reduction::none)
      add("loss" + suffix, reference::rel_norm_error(loss, ref.loss_rows), tol.loss);
    else
      add("loss" + suffix, reference::rel_norm_error(loss.data(), &ref.loss, 1), tol.loss);
    add("lse" + suffix, reference::rel_norm_error(dc.lse(), ref.lse), tol.lse);
    if (backward) {
      add("dX" + suffix, reference::rel_norm_error(dc.dX(), ref.dX), tol.grad);
      add("dW" + suffix, reference::rel_norm_error(dc.dW(), ref.dW), tol.grad);
    }
  };
  if (!small_) {
    full_->run_once(v);
    check_all(*full_, ref_full_, "");
  } else {
    full_->run_once(v);
    flce::DeviceCase& dc = full_->device_case();
    std::vector<float> lse = dc.lse();
    std::vector<float> lse_rows;
    for (int64_t r : rows_) lse_rows.push_back(lse[size_t(r)]);
    add("lse@rows", reference::rel_norm_error(lse_rows, ref_full_.lse), tol.lse);
    if (p.reduction == Reduction::none) {
      std::vector<float> loss = dc.loss(), loss_rows;
      for (int64_t r : rows_) loss_rows.push_back(loss[size_t(r)]);
      add("loss@rows", reference::rel_norm_error(loss_rows, ref_full_.loss_rows), tol.loss);
    }
    if (backward) {
      std::vector<float> dX = dc.dX(), dX_rows;
      dX_rows.reserve(rows_.size() * size_t(p.D));
      for (int64_t r : rows_)
        dX_rows.insert(dX_rows.end(), dX.begin() + r * p.D, dX.begin() + (r + 1) * p.D);
      add("dX@rows", reference::rel_norm_error(dX_rows, ref_full_.dX), tol.grad);
    }
    // The reduced-N problem: every output. A variant that refuses it (a tile
    // larger than the reduced N, say) is checked on the sampled rows only.
    std::optional<std::string> refused = v.can_run(small_->problem(), mode_, dev_);
    if (refused) {
      c.checked_what += "; reduced-N check skipped: " + *refused;
    } else {
      small_->run_once(v);
      check_all(*small_, ref_small_, "");
    }
  }
  c.pass = pass;
  return c;
}

VariantOutcome FlceGpuMeasurer::measure(const FlceVariant& v, const MeasureControl& ctl) {
  if (!full_) {
    VariantOutcome out;
    out.status = db::kResultError;
    out.reason = "measure() before prepare()";
    return out;
  }
  return measure_case(*full_, v, mode_ == FlceMode::forward ? Mode::forward : Mode::forward_backward, ctl, reps_,
                      [&] { return check(v); });
}

}  // namespace detfuse::tuner
