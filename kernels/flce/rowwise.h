// Row-owned FLCE passes (no GEMM): target checks and valid-row counts, the
// per-row softmax statistics / loss / in-place gradient over a chunk of
// materialised logits, the fixed-order loss reduction, the fixed-order sum of
// dW partials and the fp32 -> bf16 gradient conversion. Every reduction here
// has a fixed shape and order, so each is bitwise deterministic run to run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/problem.h"

namespace detfuse::flce {

// counts[0] = rows whose target is not ignore_index and lies in [0, V);
// counts[1] = targets outside [0, V) that are not ignore_index;
// counts[2] = smallest row index with a bad target (INT64_MAX if none).
// counts must hold 3 int64 and is overwritten.
void launch_count_targets(const FlceProblem& p, const int64_t* y, int64_t* counts, cudaStream_t stream);

// data[i] *= g for i in [0, n), with g = *scale read on the device, unless
// g == 1: then no element is read or written (each block reads g and leaves).
// bf16: the product in fp32, rounded to nearest even (the bits of PyTorch's
// bf16 tensor times a 0-d fp32 tensor); fp32: the fp32 product. The Python
// backward applies the loss's upstream gradient to the forward's dX and dW
// with it, without the host reading the gradient (no synchronisation).
void launch_scale_unless_one(void* data, int64_t n, DType dtype, const float* scale, cudaStream_t stream);

// One chunk of rows [row0, row0 + rows) whose logits z (softcap applied) sit in
// L [rows, ldl] fp32 (ldl a multiple of 8, >= V), or bf16 when logits_bf16.
//
// bf16 logits (the lg16 variants): each logit carries a rounding error of up
// to 2^-9 |z|. Three logits per row are recomputed exactly (an fp32 dot
// product of the bf16 rows of X and W, softcap applied), in the statistics and
// in the gradient: the target's (so the loss does not inherit its rounding)
// and the two best columns' (by bf16 value, ties to the first column), so a
// softmax peaked on one or two columns is exact. The other logits enter with
// their bf16 values (kernels/flce/README.md: the precision this gives).
struct RowPass {
  const float* L = nullptr;
  int64_t ldl = 0;
  int rows = 0;
  int64_t row0 = 0;
  const int64_t* y = nullptr;        // [N] global
  const int64_t* counts = nullptr;   // from launch_count_targets
  const float* dloss = nullptr;      // [N] for reduction none
  const float* lse_in = nullptr;     // [N]: use instead of computing statistics (backward mode)
  // Per-tile row statistics from the logits epilogue (EpiLogitsStats): [rows,
  // stats_cols] of {max, sum exp(z - max), sum z, 0}; when set, LSE and sum z
  // are combined from them in a fixed order and the logits are read once.
  const float* stats = nullptr;
  int64_t stats_cols = 0;
  float* lse_out = nullptr;          // [N] or nullptr
  float* loss_rows = nullptr;        // [N] per-row loss or nullptr
  // When write_grad: G = dL/dz overwrites L in place, as bf16 with leading
  // dimension 2*ldl (bf16 elements) or as fp32 with ldl; columns [V, ldl) are zeroed.
  bool write_grad = false;
  bool grad_bf16 = false;
  // bf16 logits [rows, ldl] (ldl bf16 elements); the gradient overwrites them
  // in place as bf16 with the same leading dimension (grad_bf16 must be set).
  // X [N, D] and W [V, D] (bf16) give the exact target and maximum logits.
  bool logits_bf16 = false;
  const void* X = nullptr;
  const void* W = nullptr;
  // The chunk holds bf16 e = exp(z - m_tile) [rows, ldl] (ldl bf16 elements)
  // from the wgmma logits epilogue (EpiLogitsExp16), and `stats` holds per
  // tile of stats_bn columns {m_tile, sum exp(z - m_tile), sum z, z_target}
  // (also in backward mode, where lse_in gives the LSE). The gradient
  // overwrites e in place as bf16: dz_j = c ((1 + 2 s lse) e_j exp(m_tile - lse)
  // - eps/V - [j = y](1 - eps)), the target's probability from its exact z.
  bool exp16 = false;
  int stats_bn = 0;
};
void launch_row_pass(const FlceProblem& p, const RowPass& r, cudaStream_t stream);

// loss[0] = sum_i loss_rows[i] (sum) or that / n_valid (mean; 0 when no valid row).
void launch_reduce_loss(const FlceProblem& p, const float* loss_rows, const int64_t* counts, float* loss,
                        cudaStream_t stream);

// dst[i] = (first ? 0 : dst[i]) + sum_{s < splits} partials[s * stride + i], s in order,
// for i < count. Built on cub::DeviceFor.
void launch_sum_partials(float* dst, const float* partials, int splits, int64_t stride, int64_t count, bool first,
                         cudaStream_t stream);

// Blocks of 256 threads for an elementwise grid-stride loop on the current
// device: 16 per SM (the SM count read once per device). Only for kernels whose
// result does not depend on the grid (no reduction across the partition).
int grid_stride_blocks();

// dst (bf16) = src (fp32), round to nearest even.
void launch_to_bf16(void* dst, const float* src, int64_t count, cudaStream_t stream);

}  // namespace detfuse::flce
