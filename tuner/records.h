// Conversions from what the tuner measures to the store's plain records, and
// the facts of this build (version, commit, compiler, flags) that key them.
#pragma once

#include <string>

#include "db/records.h"
#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"
#include "kernels/registry.h"
#include "tuner/family.h"

namespace detfuse::tuner {

db::DeviceRecord device_record(const DeviceInfo& d);
// A DeviceInfo rebuilt from a stored device (no GPU needed): what can_run and
// the heuristic see when `best --gpu` names a device of the store.
DeviceInfo device_info_from(const db::DeviceRecord& r);
db::BuildRecord this_build();
// The problem row of any family (named dims and options key from its traits).
db::ProblemRecord problem_record(const Problem& p);
db::VariantRecord variant_record(const VariantDesc& d);

}  // namespace detfuse::tuner
