// The parts of the CPU emulation shared by both families: variant names, which
// variants are emulated, the fma row kernel. Built with -ffp-contract=off
// (reference/CMakeLists.txt) like every emulate*.cpp.
#include "reference/emulate.h"

#include <cmath>
#include <sstream>

#include "kernels/common/portable_math.h"
#include "reference/emulate_detail.h"

namespace detfuse::reference {

namespace emu {

float mul_add_probe(float a, float b, float c) { return pm::add(pm::mul(a, b), c); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

std::optional<ParsedName> parse_name(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream ss(name);
  for (std::string t; std::getline(ss, t, '.');) parts.push_back(t);
  if (parts.size() != 5) return std::nullopt;
  ParsedName n;
  n.family = parts[0];
  n.dtype = parts[1];
  n.engine = parts[2];
  const auto st = parse_strategy(parts[3]);
  if (!st) return std::nullopt;
  n.strategy = *st;
  std::stringstream ps(parts[4]);
  for (std::string t; std::getline(ps, t, '_');) {
    size_t i = 0;
    while (i < t.size() && std::isalpha(static_cast<unsigned char>(t[i]))) ++i;
    if (i == 0 || i == t.size()) return std::nullopt;
    const std::string key = t.substr(0, i), digits = t.substr(i);
    for (char c : digits)
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    if (digits.size() > 9 || n.params.count(key)) return std::nullopt;
    n.params[key] = std::stoll(digits);
    n.param_keys += (n.param_keys.empty() ? "" : "_") + key;
  }
  return n;
}

std::optional<ParsedName> emulated(const std::string& name) {
  auto n = parse_name(name);
  if (!n || n->engine != "fma") return std::nullopt;
  // atomic: the fp32 atomics of the dW / dQ sums land in the order the blocks
  // reach them, which no emulation (and no second run) can know.
  if (n->strategy != Strategy::owning && n->strategy != Strategy::partials) return std::nullopt;
  auto positive = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (n->params.at(k) <= 0) return false;
    return true;
  };
  if (n->family == "flce") {
    if (n->dtype != "fp32") return std::nullopt;  // the bf16 FLCE engines are tensor-core (mma, wgmma, cuBLASLt)
    if (n->strategy == Strategy::owning && n->param_keys != "bm_bn_bk_tm_tn_mb") return std::nullopt;
    if (n->strategy == Strategy::partials && n->param_keys != "bm_bn_bk_tm_tn_mb_sk_vs") return std::nullopt;
    if (!positive({"bm", "bn", "bk", "tm", "tn", "mb"})) return std::nullopt;
    if (n->strategy == Strategy::partials && (n->params.at("sk") < 0 || n->params.at("vs") < 0)) return std::nullopt;
    return n;
  }
  if (n->family == "attention") {
    // bf16 too: the engine's code is the same, bf16 loaded exactly into fp32
    // and outputs rounded to nearest even once.
    if (n->dtype != "fp32" && n->dtype != "bf16") return std::nullopt;
    if (n->strategy == Strategy::owning && n->param_keys != "br_bc_w_d") return std::nullopt;
    if (n->strategy == Strategy::partials && n->param_keys != "br_bc_w_d_mb") return std::nullopt;
    if (!positive({"br", "bc", "w", "d"})) return std::nullopt;
    const int64_t nt = n->params.at("w") * 32;
    if (nt % n->params.at("br") || nt % n->params.at("bc")) return std::nullopt;
    if (n->strategy == Strategy::partials && n->params.at("mb") <= 0) return std::nullopt;
    return n;
  }
  return std::nullopt;
}

DETFUSE_EMU_CLONES void fma_row(float* __restrict__ acc, float a, const float* __restrict__ b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] = std::fma(a, b[j], acc[j]);
}

}  // namespace emu

bool has_emulation(const std::string& variant) { return emu::emulated(variant).has_value(); }

}  // namespace detfuse::reference
