// The exact-fp32 SIMT engine as the FLCE driver sees it (high-precision mode:
// fp32 FMA only, no TF32, no tensor cores). Any D works: the engine falls back
// to scalar loads where rows are not 16-byte aligned.
//
// Portable (the `portable` determinism level): with this engine every step of
// FLCE is a named IEEE operation in a documented order (the GEMMs' fma chains,
// the logits softcap through kernels/common/portable_math.h, the fp32 row pass
// and loss reduction of rowwise.cu, the ordered dX / dW partial sums), so the
// CPU emulation reference/emulate_flce.cpp gives the same bits for the owning
// and partials strategies; atomic is not portable (its adds land in any order).
#pragma once

#include <optional>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"
#include "kernels/flce/gemm_fma.cuh"

namespace detfuse::flce {

struct F32Engine {
  using T = float;
  static constexpr DType dtype = DType::f32;
  static constexpr bool fused_row_stats = false;  // the row pass computes LSE from the logits
  static constexpr bool split_dx = true;  // split dX along K when it has too few output tiles
  static constexpr bool grad_bf16 = false;
  static constexpr const char* engine = "fma";
  static constexpr const char* summary = "exact fp32 FMA (no TF32), register-blocked SIMT tiles";

  template <class Cfg, Major AM, Major BM, class Epi>
  static void gemm(const GemmParams& p, const Epi& e, int /*group_m*/, cudaStream_t s) {
    if constexpr (std::is_same_v<Epi, EpiStoreLogits>)  // portable softcap (gemm_fma.cuh)
      launch_gemm_f32<Cfg, AM, BM, EpiStoreLogitsPortable>(p, EpiStoreLogitsPortable{e.C, e.ldc, e.softcap}, s);
    else
      launch_gemm_f32<Cfg, AM, BM, Epi>(p, e, s);
  }

  template <class Cfg>
  static std::vector<std::pair<std::string, int64_t>> config_params() {
    return {{"bm", Cfg::BM}, {"bn", Cfg::BN}, {"bk", Cfg::BK}, {"tm", Cfg::TM}, {"tn", Cfg::TN}};
  }

  template <class Cfg>
  static std::optional<std::string> can_run(const FlceProblem&, const DeviceInfo& dev) {
    if (dev.compute_capability() < 70) return "needs compute capability 7.0 or newer";
    return std::nullopt;
  }
};

}  // namespace detfuse::flce
