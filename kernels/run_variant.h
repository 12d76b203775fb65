// What flce::run and attention::run share once a call is validated: the
// variant's can_run on the current device, then the launch with the caller's
// workspace, or with a temporary one (freed after the stream drains, so the
// call then synchronises) when the caller gave none large enough.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"

namespace detfuse {

template <class Variant, class Problem, class Mode, class Args>
void launch_checked(const Variant& v, const Problem& p, Mode mode, const Args& args, cudaStream_t stream) {
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  if (auto why = v.can_run(p, mode, cached_device(dev)))
    throw invalid_argument("variant " + v.desc.name + " cannot run " + p.key() + ": " + *why);
  const size_t need = v.workspace_bytes(p, mode);
  if (need == 0 || (args.workspace != nullptr && args.workspace_size >= need)) {
    v.launch(p, mode, args, stream);
    return;
  }
  DeviceBytes ws(need);
  Args a = args;
  a.workspace = ws.get();
  a.workspace_size = need;
  v.launch(p, mode, a, stream);
  DETFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace detfuse
