// The cuBLASLt engine as the FLCE driver sees it (kernels/flce/flce_cublaslt.cu
// says what each product does and why the results are reproducible).
#pragma once

#include <cuda_bf16.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/device_info.h"
#include "kernels/common/error.h"
#include "kernels/common/problem.h"
#include "kernels/flce/gemm.cuh"

namespace detfuse::flce {

// The driver's tile constants for cuBLASLt variants: chunk rows are multiples
// of BM, row splits multiples of BK. cuBLASLt chooses its own tiles.
struct LtConfig {
  static constexpr int BM = 128, BN = 128, BK = 64;
};

struct CublasLtEngine {
  using T = __nv_bfloat16;
  static constexpr DType dtype = DType::bf16;
  static constexpr bool grad_bf16 = true;
  static constexpr bool fused_row_stats = false;
  static constexpr bool split_dx = false;  // cuBLASLt tiles the dX product itself
  static constexpr const char* engine = "cublaslt";
  static constexpr bool dw_bf16_direct = true;  // one chunk, bf16 gradients: cuBLASLt stores bf16 dW (driver.cuh)
  static constexpr const char* summary =
      "cuBLASLt (bf16 in, fp32 accumulation, no workspace: no split-K reduction), the vendor reference";

  template <class Cfg, Major AM, Major BM, class Epi>
  static void gemm(const GemmParams& p, const Epi& e, int /*group_m*/, cudaStream_t s) {
    gemm_impl<Cfg, AM, BM>(p, e, s);
  }

  template <class Cfg>
  static std::vector<std::pair<std::string, int64_t>> config_params() {
    return {};
  }

  template <class Cfg>
  static std::optional<std::string> can_run(const FlceProblem&, const DeviceInfo& dev) {
    if (dev.compute_capability() < 80) return "bf16 cuBLASLt matmul needs compute capability 8.0 or newer";
    return std::nullopt;
  }

  template <class Cfg, Major AM, Major BM>
  static void gemm_impl(const GemmParams& p, const EpiStoreLogits& e, cudaStream_t s);
  template <class Cfg, Major AM, Major BM>
  static void gemm_impl(const GemmParams& p, const EpiStoreLogits16& e, cudaStream_t s);
  template <class Cfg, Major AM, Major BM>
  static void gemm_impl(const GemmParams& p, const EpiStore<float>& e, cudaStream_t s);
  template <class Cfg, Major AM, Major BM>
  static void gemm_impl(const GemmParams& p, const EpiStore<__nv_bfloat16>& e, cudaStream_t s);
  template <class Cfg, Major AM, Major BM>
  static void gemm_impl(const GemmParams& p, const EpiAccumulate& e, cudaStream_t s);
  template <class Cfg, Major AM, Major BM>
  static void gemm_impl(const GemmParams& p, const EpiPartial& e, cudaStream_t s);
  template <class Cfg, Major AM, Major BM>
  static void gemm_impl(const GemmParams&, const EpiAtomic&, cudaStream_t) {
    throw Error("cuBLASLt engine: no atomic-accumulation epilogue (no such variant is registered)");
  }
};

// The same engine with the logits chunk in bf16 (the `lg16` token): cuBLASLt
// writes bf16 D from its fp32 accumulator, the row pass reads bf16 and
// recomputes the target and maximum logits exactly (kernels/flce/rowwise.h).
// Faster (2 bytes a logit, twice the rows per budget), less precise than the
// fp32-logits variants above (kernels/flce/README.md says by how much).
struct CublasLtLg16Engine : CublasLtEngine {
  static constexpr bool logits_bf16 = true;
  static constexpr const char* summary =
      "cuBLASLt (bf16 in, fp32 accumulation, no workspace: no split-K reduction), logits chunk in bf16";

  template <class Cfg>
  static std::vector<std::pair<std::string, int64_t>> config_params() {
    return {{"lg", 16}};
  }
};

}  // namespace detfuse::flce
