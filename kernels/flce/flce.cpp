#include "kernels/flce/flce.h"

#include <cuda_runtime_api.h>

#include <array>
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

// The target check's scratch: 3 counters on the device, their pinned host
// copy and an event recorded after the copy, made once per thread and device
// and kept (a cudaMalloc/cudaFree pair per call cost ~0.3 ms of host time on
// the H200, and cudaFree synchronises the device). Per thread, so calls from
// several threads never share them; within a thread a call has waited for its
// copy (the event) before it returns, on every path, so the next call of the
// thread may overwrite them.
struct TargetScratch {
  int64_t* dev = nullptr;
  int64_t* host = nullptr;
  cudaEvent_t copied = nullptr;
};

TargetScratch& target_scratch() {
  struct Cache {
    TargetScratch by_device[64];
    ~Cache() {  // at thread exit; errors ignored (the context may be gone at process exit)
      for (auto& s : by_device) {
        if (s.dev) (void)cudaFree(s.dev);
        if (s.host) (void)cudaFreeHost(s.host);
        if (s.copied) (void)cudaEventDestroy(s.copied);
      }
    }
  };
  thread_local Cache cache;
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) throw Error("target check: device ordinal " + std::to_string(dev) + " out of range");
  TargetScratch& s = cache.by_device[dev];
  if (!s.dev) DETFUSE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.dev), 3 * sizeof(int64_t)));
  if (!s.host) DETFUSE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host), 3 * sizeof(int64_t)));
  if (!s.copied) DETFUSE_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  return s;
}

// Enqueues the count of y's targets on `stream`, its copy to the pinned host
// counters and the event after it; nothing waits. The caller must
// cudaEventSynchronize(s.copied) before it returns (wait_target_counts).
TargetScratch& enqueue_target_counts(const FlceProblem& p, const int64_t* y, cudaStream_t stream) {
  TargetScratch& s = target_scratch();
  launch_count_targets(p, y, s.dev, stream);
  DETFUSE_CUDA_CHECK(cudaMemcpyAsync(s.host, s.dev, 3 * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  DETFUSE_CUDA_CHECK(cudaEventRecord(s.copied, stream));
  return s;
}

std::array<int64_t, 3> wait_target_counts(const TargetScratch& s) {
  DETFUSE_CUDA_CHECK(cudaEventSynchronize(s.copied));
  return {s.host[0], s.host[1], s.host[2]};
}

std::array<int64_t, 3> target_counts(const FlceProblem& p, const int64_t* y, cudaStream_t stream) {
  return wait_target_counts(enqueue_target_counts(p, y, stream));
}

// The pointers `mode` needs (p validated first).
void check_pointers(const FlceProblem& p, FlceMode mode, const FlceArgs& a) {
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
}

// Throws the bad-target error when the counts c of y found any.
void throw_if_bad_targets(const FlceProblem& p, const int64_t* y, const std::array<int64_t, 3>& c) {
  if (c[1] <= 0) return;
  int64_t row = c[2];
  int64_t value = 0;
  DETFUSE_CUDA_CHECK(cudaMemcpy(&value, y + row, sizeof value, cudaMemcpyDeviceToHost));
  throw invalid_argument("y: " + std::to_string(c[1]) + " target(s) outside [0, " + std::to_string(p.V) +
                         ") that are not ignore_index=" + std::to_string(p.ignore_index) + "; first at row " +
                         std::to_string(row) + " (value " + std::to_string(value) + ")");
}
}  // namespace

int64_t count_bad_targets(const FlceProblem& p, const int64_t* y, cudaStream_t stream) {
  return target_counts(p, y, stream)[1];
}

void validate_call(const FlceProblem& p, FlceMode mode, const FlceArgs& a, cudaStream_t stream) {
  check_pointers(p, mode, a);
  throw_if_bad_targets(p, a.y, target_counts(p, a.y, stream));
}

void run(const FlceVariant& v, const FlceProblem& p, FlceMode mode, const FlceArgs& args, cudaStream_t stream) {
  check_pointers(p, mode, args);
  // The target check, deferred (issue 17): its count and copy go first on the
  // stream, then the whole computation, and only then does the host wait for
  // the copy (done by then unless the stream had queued work before the
  // call), so the host never waits for the GPU before the launches. Safe because no kernel indexes by a target outside [0, V)
  // (kernels/flce/README.md, "Deferred target check"): such a row computes as
  // an ignored one, and the call then throws with outputs unspecified.
  const TargetScratch& s = enqueue_target_counts(p, args.y, stream);
  try {
    launch_checked(v, p, mode, args, stream);
  } catch (...) {
    // The copy must land before the scratch is reused; bad targets keep their
    // precedence over a refusal (can_run) or a launch error, as when they were
    // checked first.
    if (cudaEventSynchronize(s.copied) == cudaSuccess)
      throw_if_bad_targets(p, args.y, {s.host[0], s.host[1], s.host[2]});
    throw;
  }
  throw_if_bad_targets(p, args.y, wait_target_counts(s));
}

const FlceVariant& heuristic_variant(const FlceProblem& p, FlceMode mode, const DeviceInfo& dev) {
  // Built-in default before any tuning: a deterministic owning variant of the
  // fastest engine measured, at the 1024 MiB chunk budget.
  //
  // bf16 on compute capability 9.0 (sm_90a built): the hybrid engine
  // `wgmmalt` (ex16 logits and row statistics on wgmma, dX and dW on
  // cuBLASLt), cooperative 256x128 tiles in 1x2 clusters, owning, mb1024, with
  // the logits stored through shared memory and a TMA store (`ot1`; session
  // 10, `detfuse bench flce`, 3 repeats, one H200 call: 79.40 / 47.82 / 19.78 ms
  // at the Llama / Gemma-2 / 4096-row heads against session 9's ping-pong
  // 128x128 `ot1` 82.82 / 48.09 / 20.26 and the 128x256 `ot1` 80.11 / 48.03 /
  // 19.84). Session 9's `ot1` gave 81.32 / 48.48 against the register
  // epilogue's 85.26 / 51.78 in the same H200 call. Before that, measured on
  // an H200 (forward_backward, fp32 dW; experiments/flce_bench_log.md,
  // sessions 7 and 8), ms at 4096,4096,128256 / 16384,4096,128256 /
  // 8192,2304,256000:
  //   wgmmalt ping mb1024   20.76-20.89 / 85.97-87.02 / 51.81-52.53 (1.04 GiB)
  //   cublaslt owning mb2000    21.71 / 85.99 / 53.07 (1.9 GiB)
  //   and through Python with main_grad= (one process, session 7): wgmmalt
  //   22.23 / 87.93 / 55.89 against cublaslt mb1024 23.71 / 91.54 / 62.03.
  // Elsewhere (sm_80+ other than 9.0, or D % 8 != 0): the cuBLASLt engine,
  // owning, mb1024 (88.2 / 56.5 ms at the Llama / Gemma-2 heads, fp32 dW;
  // the hand-written wgmma engine alone took 96-98 / 67 ms). The budget is the
  // trade-off: mb2000/mb1920 save 1-4% at Llama and 2-10% at Gemma but hold
  // about 1.9 GiB the caller did not ask for; mb1024 holds about 1 GiB (plus,
  // with bf16 gradients, the V x D fp32 dW accumulator every variant needs).
  // Tuning (detfuse tune) picks the larger budgets where they pay. The mma
  // engine is the fallback where cuBLASLt cannot run.
  // fp32: the exact FMA engine (cuBLASLt and mma are bf16 only), owning,
  // 128x128 tiles, mb1024 (1206.7 ms at Llama, 1.22x three cuBLAS SGEMMs).
  const Registry& r = builtin_registry();
  const std::vector<std::string> preferred =
      p.dtype == DType::bf16 ? std::vector<std::string>{kHybridDefault, "flce.bf16.cublaslt.owning.mb1024",
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
