#include "tuner/levels.h"

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <set>

#include "kernels/common/cuda_check.h"
#include "kernels/common/error.h"
#include "tuner/family.h"
#include "tuner/records.h"
#include "tuner/sm_slice.h"
#include "tuner/text.h"

namespace detfuse::tuner {

std::string config_group(const db::VariantRecord& v) {
  return v.family + "." + v.dtype + "." + v.engine + "." + v.strategy;
}

std::string config_group(const VariantDesc& d) { return config_group(variant_record(d)); }

namespace {

// Every digest of every repeat, per output.
std::map<std::string, std::set<std::string>> digest_sets(const db::Determinism& d) {
  std::map<std::string, std::set<std::string>> m;
  for (const auto& g : d.digests) m[g.output].insert(g.digest);
  return m;
}

bool self_consistent(const std::map<std::string, std::set<std::string>>& m) {
  for (const auto& [out, s] : m)
    if (s.size() != 1) return false;
  return !m.empty();
}

}  // namespace

std::vector<CheckOutcome> config_checks(const std::vector<LevelSubject>& subjects) {
  std::vector<CheckOutcome> out(subjects.size());
  std::vector<std::map<std::string, std::set<std::string>>> sets(subjects.size());
  for (size_t i = 0; i < subjects.size(); ++i)
    if (subjects[i].det) sets[i] = digest_sets(*subjects[i].det);
  for (size_t i = 0; i < subjects.size(); ++i) {
    if (sets[i].empty()) continue;  // not measured: nothing to compare
    CheckOutcome& o = out[i];
    std::vector<size_t> others;
    for (size_t j = 0; j < subjects.size(); ++j)
      if (j != i && !sets[j].empty() && subjects[j].group == subjects[i].group) others.push_back(j);
    if (others.empty()) {
      o.note = "alone in its group " + subjects[i].group;
      continue;
    }
    if (!self_consistent(sets[i])) {
      o.outcome = db::kCheckFailed;
      o.note = "its own repeats differ";
      continue;
    }
    std::vector<std::string> bad;  // "variant (outputs)"
    for (size_t j : others) {
      std::string outs;
      std::set<std::string> names;
      for (const auto& [k, s] : sets[i]) names.insert(k);
      for (const auto& [k, s] : sets[j]) names.insert(k);
      for (const auto& k : names) {
        auto a = sets[i].find(k), b = sets[j].find(k);
        const bool same = a != sets[i].end() && b != sets[j].end() && b->second.size() == 1 && a->second == b->second;
        if (!same) outs += (outs.empty() ? "" : ",") + k;
      }
      if (!outs.empty()) bad.push_back(subjects[j].variant + " (" + outs + ")");
    }
    if (bad.empty()) {
      o.outcome = db::kCheckShown;
      o.note = "same bits as " + std::to_string(others.size()) + " other variant(s) of " + subjects[i].group;
    } else {
      o.outcome = db::kCheckFailed;
      o.note = "differs from " + bad.front() +
               (bad.size() > 1 ? " and " + std::to_string(bad.size() - 1) + " more" : std::string()) + " of " +
               std::to_string(others.size()) + " in " + subjects[i].group;
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> repeat0_digests(const db::Determinism& d) {
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& g : d.digests)
    if (g.repeat == 0) r.emplace_back(g.output, g.digest);
  return r;
}

std::vector<std::string> repeat0_differences(const db::Determinism& a,
                                             const std::vector<std::pair<std::string, std::string>>& b) {
  std::map<std::string, std::string> bm(b.begin(), b.end());
  std::vector<std::string> diff;
  std::set<std::string> seen;
  for (const auto& [out, hex] : repeat0_digests(a)) {
    seen.insert(out);
    auto it = bm.find(out);
    if (it == bm.end() || it->second != hex) diff.push_back(out);
  }
  for (const auto& [out, hex] : b)
    if (!seen.count(out)) diff.push_back(out);
  return diff;
}

std::vector<int> sm_count_slices(int device_sms) {
  std::vector<int> r;
  for (int k : {16, 66})
    if (k < device_sms) r.push_back(k);
  return r;
}

void settle_level(db::Determinism& d) { d.level = db::derive_level(d.checks); }

bool check_sm_count(GpuCase& c, const Variant& v, db::Determinism& d, const std::function<bool()>& stop) {
  auto skip = [&](const std::string& why) {
    d.checks.sm_count = db::kCheckNotChecked;
    d.checks.note("sm_count", "not checked: " + why);
    return true;
  };
  if (d.checks.run_to_run != db::kCheckShown) return skip("the repeats were not run-to-run deterministic");
  if (measure_slice()) return skip("measured on a --sms slice, not the whole device");
  int ordinal = 0, sms = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&ordinal));
  DETFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal));
  const auto base = repeat0_digests(d);
  std::string shown;  // "16, 72 (66 asked)"
  std::vector<std::string> failed;
  // Put back what the checks install, whatever happens.
  struct Reset {
    ~Reset() { set_measure_slice(nullptr); }
  } reset;
  for (int k : sm_count_slices(sms)) {
    std::shared_ptr<SmSlice> slice;
    try {
      slice = std::make_shared<SmSlice>(ordinal, k);
    } catch (const Error& e) {
      (void)cudaGetLastError();
      return skip("no green context of " + std::to_string(k) + " SMs: " + one_line(e.what()));
    }
    const std::string label = std::to_string(slice->sm_count()) +
                              (slice->sm_count() != k ? " (" + std::to_string(k) + " asked)" : std::string());
    if (slice->plan().whole_device) continue;  // rounds up to the device: the base run
    set_measure_slice(slice);
    db::Determinism one;
    if (!c.repeat_digests(v, 1, stop, one, {})) return false;
    set_measure_slice(nullptr);
    const auto diff = repeat0_differences(one, base);
    if (diff.empty()) {
      shown += (shown.empty() ? "" : ", ") + label;
    } else {
      std::string outs;
      for (const auto& o : diff) outs += (outs.empty() ? "" : ",") + o;
      failed.push_back(outs + " differ on " + label + " SMs");
    }
  }
  if (!failed.empty()) {
    d.checks.sm_count = db::kCheckFailed;
    std::string n;
    for (const auto& f : failed) n += (n.empty() ? "" : "; ") + f;
    d.checks.note("sm_count", n + " vs " + std::to_string(sms));
  } else if (shown.empty()) {
    return skip("the device has no slice below 66 SMs to compare");
  } else {
    d.checks.sm_count = db::kCheckShown;
    d.checks.note("sm_count", shown + " and " + std::to_string(sms) + " SMs agree");
  }
  settle_level(d);
  return true;
}

void check_portable(GpuCase& c, const Variant& v, db::Determinism& d) {
  auto skip = [&](const std::string& why) {
    d.checks.portable = db::kCheckNotChecked;
    d.checks.note("portable", "not checked: " + why);
  };
  if (d.checks.run_to_run != db::kCheckShown) return skip("the repeats were not run-to-run deterministic");
  std::string why;
  auto emu = c.emulated_digests(v, kPortableMaxFlops, &why);
  if (!emu) return skip(why);
  const auto diff = repeat0_differences(d, *emu);
  if (diff.empty()) {
    d.checks.portable = db::kCheckShown;
    d.checks.note("portable", "every output equals the CPU emulation");
  } else {
    std::string outs;
    for (const auto& o : diff) outs += (outs.empty() ? "" : ",") + o;
    d.checks.portable = db::kCheckFailed;
    d.checks.note("portable", outs + " differ from the CPU emulation");
  }
  settle_level(d);
}

}  // namespace detfuse::tuner
