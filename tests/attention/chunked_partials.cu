// A test-only registry holding the fp32 32x32 fma configuration with a 1 MiB
// partials bound, so the GPU tests reach the chunked paths of the partials
// strategy (several kv-head units per launch, several key ranges per unit with
// the fp32 accumulator) on small problems.
#include "kernels/attention/driver_fma.cuh"
#include "tests/attention/chunked_partials.h"

namespace detfuse::test {

const Registry& chunked_partials_registry() {
  static const Registry r = [] {
    Registry reg;
    attention::fma::register_config<float, 32, 32, 4>(reg, /*partials_mib=*/1);
    return reg;
  }();
  return r;
}

}  // namespace detfuse::test
