#include "tuner/presets.h"

#include <map>

#include "kernels/common/error.h"

namespace detfuse::tuner {

namespace {
const std::map<std::string, std::vector<NamedShape>>& presets() {
  // Heads of real models: N tokens per step, D hidden size, V vocabulary.
  static const std::map<std::string, std::vector<NamedShape>> p = {
      {"llm-heads",
       {
           {"llama3-8b-head", 16384, 4096, 128256},
           {"gemma2-2b-head", 8192, 2304, 256000},
           {"llama2-7b-head", 4096, 4096, 32000},
           {"small-32k", 4096, 2048, 32000},
           {"gpt2-medium-head", 2048, 1024, 50257},
       }},
      // A quick set for smoke-testing the tuner itself (seconds on an H200).
      {"smoke",
       {
           {"tiny", 256, 256, 1000},
           {"odd", 257, 200, 4099},
       }},
  };
  return p;
}
}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (const auto& [k, v] : presets()) n.push_back(k);
  return n;
}

const std::vector<NamedShape>& preset_shapes(const std::string& preset) {
  auto it = presets().find(preset);
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw invalid_argument("--preset: unknown preset '" + preset + "' (known: " + known + ")");
  }
  return it->second;
}

std::vector<FlceProblem> expand_preset(const std::string& preset, const FlceProblem& options) {
  std::vector<FlceProblem> out;
  for (const auto& s : preset_shapes(preset)) {
    FlceProblem p = options;
    p.N = s.N;
    p.D = s.D;
    p.V = s.V;
    out.push_back(p);
  }
  return out;
}

}  // namespace detfuse::tuner
