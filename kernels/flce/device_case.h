// Device buffers for one FLCE problem, shared by the GPU tests, the tuner,
// `bench` and `verify`: inputs uploaded from host floats (converted to the
// problem's dtype), every output allocated, outputs poisoned (NaN bytes)
// before a check run, outputs read back as float and digested byte for byte.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/digest.h"
#include "kernels/common/problem.h"
#include "kernels/registry.h"

namespace detfuse::flce {

class DeviceCase {
 public:
  // X [N*D], W [V*D] (values as the problem's dtype will hold them), y [N],
  // dloss [N] (only for reduction none; may be empty otherwise).
  DeviceCase(const FlceProblem& p, const std::vector<float>& X, const std::vector<float>& W,
             const std::vector<int64_t>& y, const std::vector<float>& dloss = {});

  const FlceProblem& problem() const { return p_; }
  // Pointers for `mode`. backward reads lse_in from the case's LSE buffer, so
  // run forward (or forward_backward) first, or set_lse().
  FlceArgs args(FlceMode mode) const;
  void set_lse(const std::vector<float>& lse);

  // Fill every output with 0xFF bytes (NaN in fp32 and bf16).
  void poison(cudaStream_t stream = nullptr);

  // Outputs as float (bf16 gradients widened).
  std::vector<float> loss() const;  // 1 value (mean/sum) or N (none)
  std::vector<float> lse() const;
  std::vector<float> dX() const;
  std::vector<float> dW() const;

  struct Digests {
    Digest loss, lse, dX, dW;
  };
  // Raw-byte digests of the outputs `mode` writes (others left zero).
  Digests digests(FlceMode mode) const;

  size_t loss_count() const { return p_.reduction == Reduction::none ? size_t(p_.N) : 1; }

 private:
  FlceProblem p_;
  DeviceBytes X_, W_, dX_, dW_;
  DeviceBuffer<int64_t> y_;
  DeviceBuffer<float> dloss_, loss_, lse_;
};

}  // namespace detfuse::flce
