// The determinism levels beyond run_to_run (DESIGN.md, "Determinism levels";
// db/records.h: each check's outcome is stored per result, the level derived).
// How each check is shown, never assumed:
//   sm_count  repeat 0's digests on green-context slices of 16 and 66 SMs
//             (rounded to the hardware's granularity: 66 -> 72 on Hopper) equal
//             those of the whole device (the run's own repeats);
//   config    the digests equal those of every other variant of the same
//             config group (family, dtype, engine, strategy) measured on the
//             problem in the same tune or verify call (config_checks: pure);
//   portable  the digests equal those of the CPU emulation of the variant
//             (reference/emulate.h), for variants that have one.
// sm_count and portable cost extra runs and are opt-in (`tune --levels`,
// `verify --levels`); config is computed from digests every run already has.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/records.h"
#include "kernels/registry.h"

namespace detfuse::tuner {

class GpuCase;
class Variant;

// The config group of a variant: "family.dtype.engine.strategy" (e.g.
// "flce.bf16.wgmma.owning"). The strategy is the variant's own token (owning,
// partials, ordered, atomic, fwd, ...): variants of different strategies are
// never compared, whatever they promise.
std::string config_group(const VariantDesc& d);
std::string config_group(const db::VariantRecord& v);

struct LevelSubject {
  std::string variant;
  std::string group;                      // config_group()
  const db::Determinism* det = nullptr;   // null or no digests: not measured (skipped)
};

struct CheckOutcome {
  std::string outcome = db::kCheckNotChecked;
  std::string note;  // how it was shown, or why it failed / was not checked
};

// The config check of every subject, in order. A subject with digests is
// shown when every output of every repeat of it and of every other subject of
// its group with digests has one and the same digest; failed otherwise (the
// note names a variant and the outputs that differ, or says its own repeats
// differ); not_checked when no other subject of its group has digests.
std::vector<CheckOutcome> config_checks(const std::vector<LevelSubject>& subjects);

// The outputs whose repeat-0 digests differ between `a` and `b` (an output
// missing from one of them counts as differing), in a's order.
std::vector<std::string> repeat0_differences(const db::Determinism& a,
                                             const std::vector<std::pair<std::string, std::string>>& b);
std::vector<std::pair<std::string, std::string>> repeat0_digests(const db::Determinism& d);

// The slices the sm_count check runs on a device of `device_sms` SMs besides
// the whole device: 16 and 66, those below the device's count.
std::vector<int> sm_count_slices(int device_sms);

// The largest problem the portable check emulates on the CPU (forward +
// backward FLOPs by the DESIGN.md convention); larger ones: not_checked.
inline constexpr double kPortableMaxFlops = 6e10;  // 1e10 NDV: about 15 s of CPU (reference/README.md, "Speed")

// GPU checks of one variant whose repeats `d` just ran on `c` (the whole
// device): d.checks.sm_count / d.checks.portable and their notes. Not checked
// (with the reason) when the repeats were not run_to_run, when a --sms slice
// is installed (sm_count), when the driver has no green contexts, or when the
// variant has no emulation / the problem is too large (portable). Errors of
// the variant propagate; stop() abandons (returns false).
bool check_sm_count(GpuCase& c, const Variant& v, db::Determinism& d, const std::function<bool()>& stop);
void check_portable(GpuCase& c, const Variant& v, db::Determinism& d);

// Sets d.level from d.checks (the store derives it again).
void settle_level(db::Determinism& d);

}  // namespace detfuse::tuner
