// FLCE "variants" that fault on purpose, registered only by the GPU tests of
// the supervised tuner (never by builtin_registry()):
//   "oob"  : a store 2^36 floats past dW: cudaErrorIllegalAddress, a sticky
//            error that leaves the CUDA context unusable;
//   "trap" : __trap(): the launch fails (sticky, context unusable);
//   "hang" : an endless loop: the launch never completes (only killing the
//            process ends it).
// Named like real variants with the fault as a parameter, e.g.
// flce.bf16.mma.owning.bm1_oob1; can_run accepts any problem, no workspace.
#pragma once

#include <string>

#include "kernels/registry.h"

namespace detfuse::testing {

FlceVariant faulting_flce(const std::string& how, DType dtype = DType::bf16);

}  // namespace detfuse::testing
