// The bf16 tensor-core engine as the FLCE driver sees it: element type, the
// gradient chunk kept in bf16, the canonical parameters of a TcConfig and the
// engine's own can_run conditions.
#pragma once

#include <cuda_bf16.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"
#include "kernels/flce/gemm_mma.cuh"

namespace detfuse::flce {

struct Bf16Engine {
  using T = __nv_bfloat16;
  static constexpr DType dtype = DType::bf16;
  static constexpr bool fused_row_stats = false;  // the row pass computes LSE from the logits
  static constexpr bool split_dx = true;  // split dX along K when it has too few output tiles
  static constexpr bool grad_bf16 = true;
  static constexpr bool owning_acc_in = true;  // owning dW: one fp32 chain whatever the chunk budget
  static constexpr const char* engine = "mma";
  static constexpr const char* summary = "bf16 tensor cores (mma.sync m16n8k16), fp32 accumulation";

  template <class Cfg, Major AM, Major BM, class Epi>
  static void gemm(const GemmParams& p, const Epi& e, int group_m, cudaStream_t s) {
    launch_gemm_bf16_grouped<Cfg, AM, BM, Epi>(p, e, group_m, s);
  }

  template <class Cfg>
  static std::vector<std::pair<std::string, int64_t>> config_params() {
    return {{"bm", Cfg::BM}, {"bn", Cfg::BN}, {"bk", Cfg::BK}, {"wm", Cfg::WARPS_M}, {"wn", Cfg::WARPS_N}, {"st", Cfg::STAGES}};
  }

  template <class Cfg>
  static std::optional<std::string> can_run(const FlceProblem& p, const DeviceInfo& dev) {
    if (dev.compute_capability() < 80) return "bf16 mma.sync needs compute capability 8.0 or newer";
    if (p.D % 8 != 0)
      return "D must be a multiple of 8 (16-byte tensor-core loads of X and W rows), got " + std::to_string(p.D);
    size_t smem = std::max(Cfg::template smem_bytes<Major::K, Major::K>(), Cfg::template smem_bytes<Major::MN, Major::MN>());
    if (dev.max_smem_per_block_optin > 0 && smem > size_t(dev.max_smem_per_block_optin))
      return "needs " + std::to_string(smem) + " bytes of shared memory per block, device allows " +
             std::to_string(dev.max_smem_per_block_optin);
    return std::nullopt;
  }
};

}  // namespace detfuse::flce
