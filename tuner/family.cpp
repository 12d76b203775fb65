#include "tuner/family.h"

#include <set>

namespace detfuse::tuner {

const char* to_string(Mode m) { return m == Mode::forward ? "forward" : "forward_backward"; }

Json Problem::to_json() const {
  Json j = impl().to_json();
  j["family"] = to_string(family());
  return j;
}

std::vector<Variant> Problem::variants(const Registry& reg) const { return impl().variants(reg); }

std::optional<Variant> Problem::find_variant(const Registry& reg, std::string_view name) const {
  for (const Variant& v : variants(reg))
    if (v.name() == name) return v;
  return std::nullopt;
}

std::unique_ptr<GpuCase> Problem::make_case(Mode m, const HostInputs& in, int64_t seed, const DeviceInfo& dev) const {
  return impl().make_case(m, in, seed, dev);
}

std::vector<Variant> plan_variants(const Registry& reg, const Problem& p, const std::vector<std::string>& names) {
  std::vector<Variant> out;
  if (names.empty()) {
    for (const Variant& v : p.variants(reg))
      if (v.desc().dtype == p.dtype() && !v.desc().study_only) out.push_back(v);  // study variants: only when named
    return out;
  }
  std::set<std::string> seen;
  for (const auto& n : names) {
    if (!seen.insert(n).second) continue;
    std::optional<Variant> v = p.find_variant(reg, n);
    if (!v) throw invalid_argument("--variant: no " + std::string(p.label()) + " variant named '" + n + "' (see `detfuse list`)");
    if (v->desc().dtype != p.dtype())
      throw invalid_argument("--variant: '" + n + "' is a " + to_string(v->desc().dtype) + " variant, the problem is " +
                             to_string(p.dtype()));
    out.push_back(*v);
  }
  return out;
}

}  // namespace detfuse::tuner
