#pragma once
#include "kernels/registry.h"

namespace detfuse::test {
// fp32 fma br32_bc32_w4 variants (d64, d128) with partials bound mb1.
const Registry& chunked_partials_registry();
}  // namespace detfuse::test
