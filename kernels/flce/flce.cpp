#include "kernels/flce/flce.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/flce/rowwise.h"
#include "kernels/run_variant.h"

namespace detfuse::flce {

namespace {
void require_ptr(const void* p, const char* name, FlceMode mode) {
  if (!p) throw invalid_argument(std::string(name) + ": null pointer (required for " + to_string(mode) + ")");
}
}  // namespace

int64_t count_bad_targets(const FlceProblem& p, const int64_t* y, cudaStream_t stream) {
  DeviceBuffer<int64_t> counts(3);
  launch_count_targets(p, y, counts.data(), stream);
  return counts.download(stream)[1];
}

void validate_call(const FlceProblem& p, FlceMode mode, const FlceArgs& a, cudaStream_t stream) {
  p.validate();
  require_ptr(a.X, "X", mode);
  require_ptr(a.W, "W", mode);
  require_ptr(a.y, "y", mode);
  if (p.reduction == Reduction::none && mode != FlceMode::forward) require_ptr(a.dloss, "dloss", mode);
  if (mode != FlceMode::backward) {
    require_ptr(a.loss, "loss", mode);
    require_ptr(a.lse, "lse", mode);
  } else {
    require_ptr(a.lse_in, "lse_in", mode);
  }
  if (mode != FlceMode::forward) {
    require_ptr(a.dX, "dX", mode);
    require_ptr(a.dW, "dW", mode);
  }
  DeviceBuffer<int64_t> counts(3);
  launch_count_targets(p, a.y, counts.data(), stream);
  std::vector<int64_t> c = counts.download(stream);
  if (c[1] > 0) {
    int64_t row = c[2];
    int64_t value = 0;
    DETFUSE_CUDA_CHECK(cudaMemcpy(&value, a.y + row, sizeof value, cudaMemcpyDeviceToHost));
    throw invalid_argument("y: " + std::to_string(c[1]) + " target(s) outside [0, " + std::to_string(p.V) +
                           ") that are not ignore_index=" + std::to_string(p.ignore_index) + "; first at row " +
                           std::to_string(row) + " (value " + std::to_string(value) + ")");
  }
}

void run(const FlceVariant& v, const FlceProblem& p, FlceMode mode, const FlceArgs& args, cudaStream_t stream) {
  validate_call(p, mode, args, stream);
  launch_checked(v, p, mode, args, stream);
}

const FlceVariant& heuristic_variant(const FlceProblem& p, FlceMode mode, const DeviceInfo& dev) {
  // Built-in default before any tuning: a deterministic owning variant of the
  // fastest engine measured, at the 1024 MiB chunk budget.
  //
  // bf16: the cuBLASLt engine (any sm_80+ GPU), owning, mb1024. Measured on
  // an H200 (forward_backward, fp32 gradients; experiments/flce_bench_log.md,
  // experiments/results/h200-2026-12-01/run{2,4,6}_*.log), chunk workspace in
  // brackets:
  //                         Llama 16384,4096,128256   Gemma-2 8192,2304,256000
  //   cublaslt owning mb1024   88.2 / 90.0 ms (0.98 GiB)   56.5 / 61.6 ms (0.98 GiB)
  //   cublaslt owning mb2000   86.3 ms (1.90 GiB)          51.3 ms (1.96 GiB)
  //   wgmma ping128c2 mb1024   96.3 ms (1.07 GiB)          67.0 ms (1.07 GiB)
  //   wgmma ping128c2 mb1920   89.7 ms (1.89 GiB)          63.6 ms (1.94 GiB)
  //   wgmma coop256c2 mb1024   98.3 ms (1.12 GiB)          66.6 ms (1.06 GiB)
  //   mma 128x128 mb1024      201.6 ms (0.98 GiB)         141.8 ms (0.98 GiB)
  //   three cuBLAS GEMMs       75-76 ms                    42-43 ms
  // cuBLASLt is the fastest engine at every budget measured, so the wgmma
  // engine, even where built and on sm_90, is not the default. The budget is
  // the trade-off: mb2000 saves 2-4% at Llama and 10-17% at Gemma but holds
  // twice the workspace (about 1.9 GiB the caller did not ask for); mb1024
  // holds under 1 GiB (plus, with bf16 gradients, the V x D fp32 dW
  // accumulator every variant needs). Tuning (detfuse tune) picks the larger
  // budgets where they pay. On GPUs other than the H200 the order was not
  // measured; the mma engine is the fallback where cuBLASLt cannot run.
  // fp32: the exact FMA engine (cuBLASLt and mma are bf16 only), owning,
  // 128x128 tiles, mb1024 (1206.7 ms at Llama, 1.22x three cuBLAS SGEMMs).
  const Registry& r = builtin_registry();
  const std::vector<std::string> preferred =
      p.dtype == DType::bf16 ? std::vector<std::string>{"flce.bf16.cublaslt.owning.mb1024",
                                                        "flce.bf16.mma.owning.bm128_bn128_bk32_wm2_wn4_st4_mb1024"}
                             : std::vector<std::string>{"flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb1024"};
  for (const std::string& name : preferred)
    for (const auto& v : r.flce())
      if (v.desc.name == name && !v.can_run(p, mode, dev)) return v;
  for (const auto& v : r.flce())
    if (v.desc.deterministic && !v.can_run(p, mode, dev)) return v;
  for (const auto& v : r.flce())
    if (!v.can_run(p, mode, dev)) return v;
  throw invalid_argument("no registered FLCE variant can run " + p.key());
}

namespace {
void run_heuristic(const FlceProblem& p, FlceMode mode, const FlceArgs& a, cudaStream_t s) {
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  p.validate();
  run(heuristic_variant(p, mode, cached_device(dev)), p, mode, a, s);
}
}  // namespace

void forward(const FlceProblem& p, const FlceArgs& a, cudaStream_t s) { run_heuristic(p, FlceMode::forward, a, s); }
void forward_backward(const FlceProblem& p, const FlceArgs& a, cudaStream_t s) {
  run_heuristic(p, FlceMode::forward_backward, a, s);
}
void backward(const FlceProblem& p, const FlceArgs& a, cudaStream_t s) { run_heuristic(p, FlceMode::backward, a, s); }

}  // namespace detfuse::flce
