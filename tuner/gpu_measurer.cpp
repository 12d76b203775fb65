#include "tuner/gpu_measurer.h"

#include "kernels/common/error.h"
#include "tuner/attention_measurer.h"
#include "tuner/flce_measurer.h"

namespace detfuse::tuner {

void FamilyMeasurers::prepare(const Problem& p, Mode mode, int64_t seed) {
  current_ = nullptr;
  auto it = by_family_.find(p.family());
  if (it == by_family_.end())
    throw Error(std::string("no measurer for the ") + to_string(p.family()) + " family in this build");
  it->second->prepare(p, mode, seed);
  current_ = it->second.get();
}

VariantOutcome FamilyMeasurers::measure(const Variant& v, const MeasureControl& ctl) {
  auto it = by_family_.find(v.family());
  if (!current_ || it == by_family_.end() || it->second.get() != current_) {
    VariantOutcome out;
    out.status = db::kResultError;
    out.reason = "measure() of a " + std::string(to_string(v.family())) + " variant before preparing a problem of its family";
    return out;
  }
  return current_->measure(v, ctl);
}

void FamilyMeasurers::release() {
  if (current_) current_->release();
  current_ = nullptr;
}

std::unique_ptr<Measurer> make_gpu_measurer(const DeviceInfo& dev) {
  auto m = std::make_unique<FamilyMeasurers>();
  // One line per family.
  m->add(Family::flce, std::make_unique<FlceGpuMeasurer>(dev));
  m->add(Family::attention, std::make_unique<AttentionGpuMeasurer>(dev));
  return m;
}

}  // namespace detfuse::tuner
