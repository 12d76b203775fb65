// Named sets of problem shapes for `detfuse tune --preset NAME`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/problem.h"
#include "tuner/family.h"

namespace detfuse::tuner {

struct NamedShape {
  std::string name;  // "llama3-8b-head"
  int64_t N = 0, D = 0, V = 0;
};

std::vector<std::string> preset_names();
// The shapes of a preset; throws invalid_argument naming the known presets.
const std::vector<NamedShape>& preset_shapes(const std::string& preset);
// One problem per shape of the preset; every other field (dtype, options) is
// taken from `options`.
std::vector<FlceProblem> expand_preset(const std::string& preset, const FlceProblem& options);

// Attention presets (`--kernel attention --preset llm-attention`): every field
// but the shape (causal, scale, dtype) is taken from `options`.
struct NamedAttentionShape {
  std::string name;  // "llama3-8b-4k"
  int64_t B = 0, H = 0, Hkv = 0, Sq = 0, Sk = 0, d = 0;
};
std::vector<std::string> attention_preset_names();
const std::vector<NamedAttentionShape>& attention_preset_shapes(const std::string& preset);
std::vector<AttentionProblem> expand_attention_preset(const std::string& preset, const AttentionProblem& options);

// Every preset name of every family, for help texts.
std::vector<std::string> all_preset_names();
// The preset's problems for the family of `options`; invalid_argument naming
// the known presets when unknown, or saying which --kernel it belongs to.
std::vector<Problem> expand_preset_for(const std::string& preset, const Problem& options);

}  // namespace detfuse::tuner
