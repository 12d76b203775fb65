#include "tuner/presets.h"

#include <map>

#include "kernels/common/error.h"
#include "tuner/families.h"

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

namespace {
const std::map<std::string, std::vector<NamedAttentionShape>>& attention_presets() {
  // Attention layers of real models: batch B chosen so that one problem's
  // tensors (Q, K, V, dO, O, dQ, dK, dV in bf16) stay near 1 GiB.
  static const std::map<std::string, std::vector<NamedAttentionShape>> p = {
      {"llm-attention",
       {
           {"llama3-8b-4k", 4, 32, 8, 4096, 4096, 128},    // the attention benchmark shape
           {"llama3-8b-8k", 2, 32, 8, 8192, 8192, 128},
           {"llama3.2-1b-4k", 8, 32, 8, 4096, 4096, 64},  // head dim 64
           {"llama3-8b-32k", 1, 32, 8, 32768, 32768, 128},  // long context
       }},
      // A quick set for smoke-testing the tuner itself: GQA, Sq != Sk, odd lengths.
      {"smoke-attention",
       {
           {"tiny", 1, 4, 2, 128, 128, 64},
           {"odd", 2, 4, 1, 100, 257, 64},
       }},
  };
  return p;
}

std::string known_text(const std::vector<std::string>& names) {
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  return known;
}
}  // namespace

std::vector<std::string> attention_preset_names() {
  std::vector<std::string> n;
  for (const auto& [k, v] : attention_presets()) n.push_back(k);
  return n;
}

const std::vector<NamedAttentionShape>& attention_preset_shapes(const std::string& preset) {
  auto it = attention_presets().find(preset);
  if (it == attention_presets().end())
    throw invalid_argument("--preset: unknown attention preset '" + preset + "' (known: " +
                           known_text(attention_preset_names()) + ")");
  return it->second;
}

std::vector<AttentionProblem> expand_attention_preset(const std::string& preset, const AttentionProblem& options) {
  std::vector<AttentionProblem> out;
  for (const auto& s : attention_preset_shapes(preset)) {
    AttentionProblem p = options;
    p.B = s.B;
    p.H = s.H;
    p.Hkv = s.Hkv;
    p.Sq = s.Sq;
    p.Sk = s.Sk;
    p.d = s.d;
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> all_preset_names() {
  std::vector<std::string> n = preset_names();
  for (const auto& a : attention_preset_names()) n.push_back(a);
  return n;
}

std::vector<Problem> expand_preset_for(const std::string& preset, const Problem& options) {
  const bool flce = presets().count(preset) > 0, attention = attention_presets().count(preset) > 0;
  if (!flce && !attention)
    throw invalid_argument("--preset: unknown preset '" + preset + "' (known: " + known_text(all_preset_names()) + ")");
  std::vector<Problem> out;
  if (options.is<FlceProblem>()) {
    if (!flce) throw invalid_argument("--preset " + preset + ": an attention preset (use --kernel attention)");
    for (const auto& p : expand_preset(preset, options.as<FlceProblem>())) out.push_back(p);
  } else if (options.is<AttentionProblem>()) {
    if (!attention) throw invalid_argument("--preset " + preset + ": an FLCE preset (use --kernel flce)");
    for (const auto& p : expand_attention_preset(preset, options.as<AttentionProblem>())) out.push_back(p);
  } else {
    throw invalid_argument("--preset: presets exist for flce and attention only");
  }
  return out;
}

}  // namespace detfuse::tuner
