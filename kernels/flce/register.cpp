// FLCE variants register here (see kernels/flce/README.md).
#include "kernels/registry.h"

namespace detfuse {

void register_flce(Registry&) {}

}  // namespace detfuse
