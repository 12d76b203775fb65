// Attention variants register here. The attention kernels are a later issue;
// until they land this family is empty and `detfuse list --kernel attention`
// says so. The argument and problem types are in kernels/registry.h.
#include "kernels/registry.h"

namespace detfuse {

#ifdef DETFUSE_HAVE_ATTENTION_WGMMA
void register_attention_wgmma(Registry&);  // kernels/attention/wgmma/ (TEMPORARY hook, branch attnwg)
#endif

void register_attention([[maybe_unused]] Registry& r) {
#ifdef DETFUSE_HAVE_ATTENTION_WGMMA
  register_attention_wgmma(r);
#endif
}

}  // namespace detfuse
