#include "kernels/registry.h"

#include <set>

#include "kernels/common/error.h"
#include "kernels/common/strategy.h"

namespace detfuse {

const char* to_string(Family f) { return f == Family::flce ? "flce" : "attention"; }

Family parse_family(const std::string& s) {
  if (s == "flce") return Family::flce;
  if (s == "attention") return Family::attention;
  throw invalid_argument("unknown kernel family '" + s + "' (expected flce or attention)");
}

const std::vector<std::string>& known_engines() {
  static const std::vector<std::string> e = {"fma", "mma", "wgmma", "wgmmalt", "cublaslt"};
  return e;
}

std::string known_engines_text() {
  const auto& e = known_engines();
  std::string t;
  for (size_t i = 0; i < e.size(); ++i) t += (i == 0 ? "" : i + 1 == e.size() ? " or " : ", ") + e[i];
  return t;
}

const char* to_string(FlceMode m) {
  switch (m) {
    case FlceMode::forward: return "forward";
    case FlceMode::forward_backward: return "forward_backward";
    case FlceMode::backward: return "backward";
  }
  return "?";
}

std::string VariantDesc::canonical_name(Family f, DType t, const std::string& engine, const std::string& strategy,
                                        const std::vector<std::pair<std::string, int64_t>>& params) {
  std::string n = std::string(to_string(f)) + "." + to_string(t) + "." + engine + "." + strategy + ".";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i) n += "_";
    n += params[i].first + std::to_string(params[i].second);
  }
  return n;
}

std::string VariantDesc::params_text() const {
  std::string s;
  for (const auto& [k, v] : params) s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s;
}

void Registry::check_new(const VariantDesc& d) const {
  if (d.name.empty()) throw Error("registry: variant with an empty name");
  if (d.engine.empty() || d.engine.find_first_of("._") != std::string::npos)
    throw Error("registry: variant '" + d.name + "' needs an engine token without '.' or '_'");
  if (!parse_strategy(d.strategy))
    throw Error("registry: variant '" + d.name + "' has strategy '" + d.strategy + "' (expected " +
                known_strategies_text() + ")");
  if (d.name != VariantDesc::canonical_name(d.family, d.dtype, d.engine, d.strategy, d.params))
    throw Error("registry: name '" + d.name + "' is not canonical (expected '" +
                VariantDesc::canonical_name(d.family, d.dtype, d.engine, d.strategy, d.params) + "')");
  if (find_flce(d.name) || find_attention(d.name)) throw Error("registry: duplicate variant '" + d.name + "'");
}

void Registry::add(FlceVariant v) {
  check_new(v.desc);
  if (v.desc.family != Family::flce || !v.can_run || !v.workspace_bytes || !v.launch)
    throw Error("registry: incomplete FLCE variant '" + v.desc.name + "'");
  flce_.push_back(std::move(v));
}

void Registry::add(AttentionVariant v) {
  check_new(v.desc);
  if (v.desc.family != Family::attention || !v.can_run || !v.workspace_bytes || !v.launch)
    throw Error("registry: incomplete attention variant '" + v.desc.name + "'");
  attention_.push_back(std::move(v));
}

const FlceVariant* Registry::find_flce(std::string_view name) const {
  for (const auto& v : flce_)
    if (v.desc.name == name) return &v;
  return nullptr;
}

const AttentionVariant* Registry::find_attention(std::string_view name) const {
  for (const auto& v : attention_)
    if (v.desc.name == name) return &v;
  return nullptr;
}

std::vector<const VariantDesc*> Registry::descriptors() const {
  std::vector<const VariantDesc*> out;
  for (const auto& v : flce_) out.push_back(&v.desc);
  for (const auto& v : attention_) out.push_back(&v.desc);
  return out;
}

const Registry& builtin_registry() {
  static const Registry r = [] {
    Registry reg;
    register_flce(reg);
    register_attention(reg);
    return reg;
  }();
  return r;
}

}  // namespace detfuse
