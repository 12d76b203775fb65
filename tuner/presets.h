// Named sets of problem shapes for `detfuse tune --preset NAME`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/problem.h"

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

}  // namespace detfuse::tuner
