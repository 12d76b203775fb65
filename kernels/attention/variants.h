// The registered attention variant set: which block configurations exist (one
// instantiation file each, kernels/attention/CMakeLists.txt) and the strategy
// parameters registered for each. Measured alternatives go in comments next to
// the chosen values once the tuner has data for them.
#pragma once

#include "kernels/registry.h"

namespace detfuse::attention {

// Slab bound (MiB) of the `partials` dQ strategy: the key-block partials of as
// many kv-head groups as fit are summed per launch; a problem whose single
// key-block partial of one group exceeds it is refused by can_run.
constexpr int kPartialsMiB = 256;

// fma engine (CUDA-core fp32 arithmetic), fp32 and bf16 storage. The fp32
// 32x32 one takes the partials bound too: the GPU tests register it with 1 MiB
// in a registry of their own (tests/attention/chunked_partials.cpp) to reach
// the chunked partials paths on small problems, with the library's kernels.
void register_fma_f32_br32_bc32(Registry& r, int partials_mib = kPartialsMiB);
void register_fma_f32_br64_bc32(Registry& r);
void register_fma_f32_br64_bc64(Registry& r);
void register_fma_bf16_br32_bc32(Registry& r);
void register_fma_bf16_br64_bc32(Registry& r);
void register_fma_bf16_br64_bc64(Registry& r);

}  // namespace detfuse::attention
