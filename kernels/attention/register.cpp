// Attention variants register here. The attention kernels are a later issue;
// until they land this family is empty and `detfuse list --kernel attention`
// says so. The argument and problem types are in kernels/registry.h.
#include "kernels/registry.h"

namespace detfuse {

void register_attention(Registry&) {}

}  // namespace detfuse
