// STUB, to be deleted when the s6-portable branch (reference/emulate*.cpp)
// is merged: keeps the s6-levels branch linkable alone. No variant has an
// emulation here, so the `portable` check is never shown on this branch.
#include "kernels/common/error.h"
#include "reference/emulate.h"

namespace detfuse::reference {

bool has_emulation(const std::string&) { return false; }

std::vector<EmulatedOutput> emulate_flce(const std::string& variant, const FlceProblem&, const FlceInputs&) {
  throw Error("no CPU emulation of " + variant + " in this build (reference/emulate_stub.cpp)");
}

std::vector<EmulatedOutput> emulate_attention(const std::string& variant, const AttentionProblem&,
                                              const AttentionInputs&) {
  throw Error("no CPU emulation of " + variant + " in this build (reference/emulate_stub.cpp)");
}

}  // namespace detfuse::reference
