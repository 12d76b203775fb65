// The hybrid engine (the `wgmmalt` variants, issue 17): the logits GEMM is
// ours, wgmma with the ex16 epilogue (bf16 exp(z - m_tile) and per-tile row
// statistics, so the row pass reads 2 bytes a logit once and writes the bf16
// gradient in place, row_kernel_exp16), the two backward products go to
// cuBLASLt (no workspace: one k-loop per output element, flce_cublaslt.cu):
//   dX = G W           beta 0, never split along K (cuBLASLt tiles it)
//   dW (+)= G^T X_c    beta 0 on the first chunk, beta 1 after (owning, chunks
//                      in order): dW read and written once per chunk, as the
//                      cuBLASLt owning variants do.
// What the mix gives up: the chunk boundaries show in dW's bits (one rounding
// of the beta-1 add per chunk), so unlike the wgmma owning variants the budgets
// are separate bit classes, as they are for cuBLASLt.
// Only the sm_90a variant translation units (DETFUSE_WGMMA_IMPL) include this
// file; the wgmma launchers are those of flce_wgmma_*.cu (wgmma_configs.h),
// the cuBLASLt products the explicit instances of flce_cublaslt.cu.
#pragma once

#include <type_traits>

#include "kernels/flce/engine_cublaslt.h"
#include "kernels/flce/engine_wgmma.cuh"

namespace detfuse::flce {

struct WgmmaExpLtEngine : WgmmaExpEngine {
  static constexpr bool split_dx = false;       // cuBLASLt tiles the dX product itself
  static constexpr bool owning_acc_in = false;  // owning dW by beta = 1 per chunk
  static constexpr bool dw_bf16_direct = true;  // one chunk, bf16 gradients: cuBLASLt stores bf16 dW (driver.cuh)
  static constexpr const char* engine = "wgmmalt";
  static constexpr const char* summary =
      "logits by bf16 wgmma fed by TMA (sm_90a, CUTLASS 4.2 mainloop), the chunk kept as bf16 exp(z - tile max) "
      "with per-tile row statistics; dX and dW by cuBLASLt (no workspace: no split-K reduction), dW by beta = 1 in "
      "chunk order";

  template <class Cfg, Major AM, Major BM, class Epi>
  static void gemm(const GemmParams& p, const Epi& e, int group_m, cudaStream_t s) {
    if constexpr (std::is_same_v<Epi, EpiLogitsExp16>) {
      launch_gemm_wgmma<Cfg, AM, BM>(p, to_wg_epilogue(e), group_m, s);
    } else {
      CublasLtEngine::gemm_impl<LtConfig, AM, BM>(p, e, s);
    }
  }
};

}  // namespace detfuse::flce
