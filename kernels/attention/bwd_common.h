// Backward pieces shared by every attention engine (fma and mma here; a Hopper
// engine can call them too): the D = rowsum(dO * O) preprocessing pass, the
// fp32 -> problem-dtype dQ convert pass of the `atomic` strategy, the
// fixed-order reduction of the `partials` strategy, the workspace layout and
// the partials chunk plan. Host functions; each enqueues one kernel on `stream`.
//
// Gradient dtypes (decided for the whole family): O, dQ, dK, dV are returned
// in the problem dtype (as FlashAttention returns them); LSE and D are fp32;
// every accumulation is fp32 (registers, or fp32 workspace for atomic/partials).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/common/problem.h"

namespace detfuse::attention {

// D[row] = sum_k dO[row, k] * O[row, k] (fp32, fixed order) for rows = B*H*Sq
// rows of d elements in `dtype`: one warp per row, or (bf16 at d = 64, 128,
// 16-byte aligned) d / 8 lanes a row with 16-byte loads; the same bits either way.
void launch_rowsum_do_o(DType dtype, const void* dO, const void* O, float* D, int64_t rows, int d,
                        cudaStream_t stream);

// dst[i] = (dtype) src[i] for n elements (round to nearest even for bf16; float4
// loads where n % 4 == 0 and the pointers allow).
void launch_convert_f32(DType dtype, const float* src, void* dst, int64_t n, cudaStream_t stream);

// The partials reduction. slab holds, for `units` consecutive units (a unit is
// one (b, kv head) pair, its dQ rows are `unit_elems` = (H/Hkv)*Sq*d
// contiguous floats of dQ starting at unit_begin*unit_elems), `kc` partials
// each: slab[(u*kc + j)*unit_elems + e]. Every element e is summed over j = 0..kc-1
// in that order (plus acc[u*unit_elems + e] first unless `first`), then stored
// to acc (fp32, unless `last`) or to dQ (dtype, when `last`). Fixed order, so the
// result is bitwise the same on every run. Built on cub::DeviceFor::Bulk (one
// call per element, as FLCE's launch_sum_partials) rather than
// cub::DeviceSegmentedReduce: every segment here is a strided column of kc
// values, which one call per element sums coalesced in one pass, in order.
void launch_partials_reduce(DType dtype, const float* slab, float* acc, void* dQ, int64_t unit_begin,
                            int64_t units, int64_t kc, int64_t unit_elems, bool first, bool last,
                            cudaStream_t stream);

// How the partials strategy cuts the backward into launches under a slab
// bound of `bound_bytes`: key blocks [kb0, kb0+kc) of units [u0, u0+uc).
struct PartialsPlan {
  int64_t n_kb = 0;        // key blocks of Bc keys
  int64_t units = 0;       // B * Hkv
  int64_t unit_bytes = 0;  // one key block's dQ partial of one unit: (H/Hkv)*Sq*d*4
  int64_t kc = 0;          // key blocks per launch
  int64_t uc = 0;          // units per launch
  int64_t ranges = 0;      // key ranges per unit chunk (> 1 needs the fp32 accumulator)
  size_t slab_bytes = 0;   // uc * kc * unit_bytes <= bound
  size_t acc_bytes = 0;    // uc * unit_bytes when ranges > 1, else 0
};
// nullopt when one key block's partial of one unit exceeds the bound (can_run refuses).
std::optional<PartialsPlan> plan_partials(const AttentionProblem& p, int bc, size_t bound_bytes);

// Workspace of a backward call: D (fp32, B*H*Sq) first, then the strategy's
// buffers, each 256-byte aligned.
inline size_t align256(size_t n) { return (n + 255) / 256 * 256; }
inline size_t d_bytes(const AttentionProblem& p) { return align256(size_t(p.B * p.H * p.Sq) * sizeof(float)); }
inline size_t dq_acc_bytes(const AttentionProblem& p) {
  return align256(size_t(p.B * p.H * p.Sq) * size_t(p.d) * sizeof(float));
}
// The semaphores of an ordered dQ: one int per (batch, head, query block of br rows).
inline size_t ordered_sem_bytes(const AttentionProblem& p, int br) {
  return align256(size_t(p.B * p.H * ((p.Sq + br - 1) / br)) * sizeof(int));
}

}  // namespace detfuse::attention
