// A test-only registry holding the fp32 32x32 fma configuration with a 1 MiB
// partials bound, so the GPU tests reach the chunked paths of the partials
// strategy (several kv-head units per launch, several key ranges per unit with
// the fp32 accumulator) on small problems. The bound is a run-time argument:
// the library's instantiation registers them (this file compiled the fma
// kernels a second time, 70 s of CI on the CPU machine, until session 16).
#include "tests/attention/chunked_partials.h"

#include "kernels/attention/variants.h"

namespace detfuse::test {

const Registry& chunked_partials_registry() {
  static const Registry r = [] {
    Registry reg;
    attention::register_fma_f32_br32_bc32(reg, /*partials_mib=*/1);
    return reg;
  }();
  return r;
}

}  // namespace detfuse::test
