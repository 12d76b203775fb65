// The Hopper wgmma/TMA engine as the FLCE driver sees it: element type, the
// gradient chunk kept in bf16, fused row statistics in the logits epilogue,
// the canonical parameters of a WgConfig and the engine's own can_run.
// Only the sm_90a variant translation units (DETFUSE_WGMMA_IMPL) include this file.
#pragma once

#include <cuda_bf16.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"
#include "kernels/flce/gemm_wgmma.cuh"

namespace detfuse::flce {

struct WgmmaEngine {
  using T = __nv_bfloat16;
  static constexpr DType dtype = DType::bf16;
  static constexpr bool split_dx = true;  // split dX along K when it has too few output tiles
  static constexpr bool grad_bf16 = true;
  static constexpr bool fused_row_stats = true;
  static constexpr bool owning_acc_in = true;  // owning dW: one fp32 chain whatever the chunk budget
  static constexpr const char* engine = "wgmma";
  static constexpr const char* summary =
      "bf16 wgmma fed by TMA (sm_90a, CUTLASS 4.2 mainloop), warp-specialized persistent kernel, fp32 accumulation";

  template <class Cfg, Major AM, Major BM, class Epi>
  static void gemm(const GemmParams& p, const Epi& e, int group_m, cudaStream_t s) {
    launch_gemm_wgmma<Cfg, AM, BM>(p, to_wg_epilogue(e), group_m, s);
  }

  template <class Cfg>
  static std::vector<std::pair<std::string, int64_t>> config_params() {
    // c: the cluster shape, CM alone for a CM x 1 cluster (c1, c2: the names
    // of the first configurations), the digits CM CN otherwise (c22 = 2x2).
    constexpr int c = Cfg::CLUSTER_N == 1 ? Cfg::CLUSTER_M : 10 * Cfg::CLUSTER_M + Cfg::CLUSTER_N;
    std::vector<std::pair<std::string, int64_t>> p = {{"bm", Cfg::BM}, {"bn", Cfg::BN}, {"bk", Cfg::BK},
                                                      {"c", c},         {"st", Cfg::STAGES}, {"pp", Cfg::PINGPONG ? 1 : 0}};
    // ot1: the bf16 epilogues through shared memory and a TMA store (EPI_TMA);
    // no token otherwise, so the earlier names stay.
    if (Cfg::EPI_TMA) p.push_back({"ot", 1});
    return p;
  }

  template <class Cfg>
  static std::optional<std::string> can_run(const FlceProblem& p, const DeviceInfo& dev) {
    // sm_90a code runs on compute capability 9.0 exactly (H100, H200, GH200).
    if (dev.compute_capability() != 90)
      return "wgmma/TMA code is built for sm_90a and runs on compute capability 9.0 only, device has " +
             std::to_string(dev.compute_capability());
    if (p.D % 8 != 0)
      return "D must be a multiple of 8 (TMA needs 16-byte aligned rows of X and W), got " + std::to_string(p.D);
    if (dev.max_smem_per_block_optin > 0 && Cfg::tile_smem_bytes() + 1024 > size_t(dev.max_smem_per_block_optin))
      return "needs " + std::to_string(Cfg::tile_smem_bytes()) + " bytes of shared memory per block, device allows " +
             std::to_string(dev.max_smem_per_block_optin);
    return std::nullopt;
  }
};

// The same engine with the chunk kept as bf16 exp(z - m_tile) (the `ex16`
// variants, kernels/flce/README.md): the logits epilogue writes e and the
// per-tile statistics with the target logit, the row pass forms the bf16
// gradient over e in place; 2 bytes a logit, so a budget holds twice the rows.
struct WgmmaExpEngine : WgmmaEngine {
  static constexpr bool logits_exp16 = true;
  static constexpr const char* summary =
      "bf16 wgmma fed by TMA (sm_90a, CUTLASS 4.2 mainloop), warp-specialized persistent kernel, fp32 accumulation; "
      "logits chunk as bf16 exp(z - tile max) with per-tile row statistics";
  template <class Cfg>
  static std::vector<std::pair<std::string, int64_t>> config_params() {
    auto p = WgmmaEngine::config_params<Cfg>();
    p.push_back({"ex", 16});
    return p;
  }
};

}  // namespace detfuse::flce
