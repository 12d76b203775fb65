// The GPU measurer of `detfuse tune` for problems of any family: one measurer
// per family (FlceGpuMeasurer, AttentionGpuMeasurer), each used for the
// problems of its family.
#pragma once

#include <map>
#include <memory>

#include "kernels/common/device_info.h"
#include "tuner/family.h"

namespace detfuse::tuner {

// Routes prepare/measure/release to the measurer of the prepared problem's family.
class FamilyMeasurers : public Measurer {
 public:
  void add(Family f, std::unique_ptr<Measurer> m) { by_family_[f] = std::move(m); }
  void prepare(const Problem& p, Mode mode, int64_t seed) override;
  VariantOutcome measure(const Variant& v, const MeasureControl& ctl) override;
  void release() override;

 private:
  std::map<Family, std::unique_ptr<Measurer>> by_family_;
  Measurer* current_ = nullptr;
};

// Every family's GPU measurer on `dev` (the current device).
std::unique_ptr<Measurer> make_gpu_measurer(const DeviceInfo& dev);

}  // namespace detfuse::tuner
