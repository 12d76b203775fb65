// Exact CPU emulation of the fp32 `fma` engines (the `portable` determinism
// level, DESIGN.md): the same fp32 operations in the same order as the GPU
// variant, so the bytes returned here are the bytes the GPU writes, on any GPU.
// Not a float64 reference: these are fp32 results with the GPU's rounding.
// What each family emulates, and why `atomic` cannot be: reference/README.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/common/problem.h"
#include "reference/inputs.h"

namespace detfuse::reference {

// The bytes of one output exactly as the GPU variant writes it (fp32 as float bits, bf16 as uint16 bits,
// in the GPU buffer's layout), in the family's digest order (tuner's output_names()).
struct EmulatedOutput {
  std::string name;
  std::vector<std::byte> bytes;
};
// True when `variant` (a registered name) has an exact CPU emulation (the fp32 fma variants).
bool has_emulation(const std::string& variant);
// Runs the emulation; throws detfuse::Error if !has_emulation(variant) or the problem is one the variant refuses.
std::vector<EmulatedOutput> emulate_flce(const std::string& variant, const FlceProblem& p, const FlceInputs& in);
std::vector<EmulatedOutput> emulate_attention(const std::string& variant, const AttentionProblem& p,
                                              const AttentionInputs& in);

}  // namespace detfuse::reference
