// FLCE driver: the chunked fused linear + cross-entropy shared by every
// variant, templated on the GEMM engine (fma, mma, wgmma or cublaslt) and its
// tile configuration; the dW strategy is a run-time choice so one
// instantiation file serves every strategy of a tile shape.
//
// Per chunk of Nc rows (Nc from the variant's memory budget, so extra memory is
// bounded whatever N is):
//   1. logits  Z_c = X_c W^T            GEMM, fp32 into the chunk buffer [Nc, Vp]
//      (bf16 with an engine that has logits_bf16, the `lg16` variants: 2 bytes a
//      logit, so a budget holds twice the rows; see kernels/flce/README.md for
//      the precision this gives)
//   2. row pass: LSE, row loss; then G_c = dL/dZ_c written over Z_c in place
//      (bf16 for the tensor-core engines: it is the next GEMMs' operand). With
//      an engine that fuses row statistics into the logits epilogue (wgmma),
//      LSE comes from the per-tile {max, sum exp, sum z} in a fixed order and
//      the row pass reads the logits once instead of twice
//   3. dX_c = G_c W                      GEMM, owned by output tile: deterministic
//      (K split in a fixed number of parts summed in order when the chunk has
//      too few output tiles to fill the GPU)
//   4. dW  += G_c^T X_c                  by strategy:
//        owning   each block owns a dW tile and walks the chunk's rows; chunks
//                 in order; no atomics, no extra memory (bitwise reproducible).
//                 With an engine that has owning_acc_in (mma, wgmma) the tile's
//                 running fp32 sum is loaded into the accumulators before the
//                 chunk's k-loop (EpiAccumulateIn) instead of added after it, so
//                 the sum over all N rows is one chain of tensor-core adds and
//                 the chunk budget changes no bit of dW (see make_plan for the
//                 row granularity this needs)
//        atomic   the chunk's rows are split sk ways; every split adds its
//                 contribution with fp32 atomics (order varies: not reproducible)
//        partials the rows are split sk ways; each split writes its partial of a
//                 vs-row vocabulary slab to the workspace, then a CUB pass sums
//                 the sk partials in fixed order (reproducible; costs memory+pass)
//      sk is the contention knob: sk adders per dW element per chunk. sk0 is
//      the article's kernel, where every row block of the chunk adds its
//      product (sk = ceil(chunk rows / bm)); partials sk0 (vs0) derives its slab
//      rows from the partials budget (the default's sk x vs, divided by sk,
//      a multiple of 8).
// Work: 2NDV (logits) + 2NDV (dX) + 2NDV (dW) = 6NDV, nothing recomputed; the
// price is the Nc x V chunk buffer (the tuning parameter `mb`, MiB).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/common/strategy.h"
#include "kernels/flce/gemm.cuh"
#include "kernels/flce/plan_rules.h"
#include "kernels/flce/rowwise.h"
#include "kernels/registry.h"

namespace detfuse::flce {

using detfuse::Strategy;  // kernels/common/strategy.h

struct StrategyParams {
  Strategy strategy = Strategy::owning;
  int chunk_mib = 1024;  // budget of the logits chunk buffer
  int splits = 1;        // atomic / partials: row splits of the dW GEMM; 0: one per row block (sk0)
  int slab_rows = 0;     // partials: vocabulary rows per partial slab; 0: partial_rows / splits
  int partial_rows = 0;  // partials with slab_rows 0: rows of partials in all (splits x slab)
  // owning, measurement only (never registered): add each chunk's sum to dW
  // after its k-loop (EpiAccumulate) even where the engine carries the running
  // sum in its accumulators; the cost of the budget-invariant dW against this.
  bool owning_rmw = false;
};

// Row splits of a chunk of nc rows: sp.splits, or one per row block (sk0).
inline int dw_splits(const StrategyParams& sp, int64_t nc, int block_m) {
  return sp.splits > 0 ? sp.splits : int(std::max<int64_t>(1, (nc + block_m - 1) / block_m));
}

// Partials slab rows for `splits` splits (vs, or derived from the budget), at most V.
inline int64_t partial_slab_rows(const StrategyParams& sp, int splits, int64_t V) {
  const int64_t rows = sp.slab_rows > 0 ? sp.slab_rows : std::max<int64_t>(8, sp.partial_rows / splits / 8 * 8);
  return std::min<int64_t>(rows, V);
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Engine::logits_bf16 when the engine declares it, else false: the logits GEMM
// writes the chunk in bf16 (EpiStoreLogits16) and the row pass reads bf16.
template <class E, class = void>
struct engine_logits_bf16 : std::false_type {};
template <class E>
struct engine_logits_bf16<E, std::void_t<decltype(E::logits_bf16)>> : std::bool_constant<E::logits_bf16> {};

// Engine::logits_exp16 when the engine declares it, else false: the logits
// GEMM's epilogue writes the chunk as bf16 exp(z - m_tile) with per-tile row
// statistics that carry the target logit (EpiLogitsExp16), also in backward
// mode, and the row pass forms the gradient from them (RowPass::exp16).
template <class E, class = void>
struct engine_logits_exp16 : std::false_type {};
template <class E>
struct engine_logits_exp16<E, std::void_t<decltype(E::logits_exp16)>> : std::bool_constant<E::logits_exp16> {};

// Engine::owning_acc_in when the engine declares it, else false: the owning dW
// GEMM starts each chunk's k-loop from the running sum (EpiAccumulateIn)
// instead of adding the chunk's sum to it afterwards (EpiAccumulate).
template <class E, class = void>
struct engine_owning_acc_in : std::false_type {};
template <class E>
struct engine_owning_acc_in<E, std::void_t<decltype(E::owning_acc_in)>> : std::bool_constant<E::owning_acc_in> {};

// Engine::dw_bf16_direct when the engine declares it, else false: with bf16
// gradients and ONE chunk, the owning dW product stores bf16 dW straight into
// the caller's buffer (EpiStore<T>) instead of an fp32 V x D accumulator that
// a conversion pass then reads (the accumulator is 2 GiB at V=128256, D=4096;
// the pass reads it and writes the bf16 copy). Declared by the engines whose
// dW product is cuBLASLt's (its bf16 D is the fp32 accumulator rounded to
// nearest); the chunk boundaries, and so the bits of multi-chunk calls, are
// unchanged.
template <class E, class = void>
struct engine_dw_bf16_direct : std::false_type {};
template <class E>
struct engine_dw_bf16_direct<E, std::void_t<decltype(E::dw_bf16_direct)>> : std::bool_constant<E::dw_bf16_direct> {};

// Byte layout of one call's workspace.
struct Plan {
  int64_t Vp = 0;          // V rounded up to 8: leading dimension of the chunk buffer
  int64_t chunk_rows = 0;  // Nc
  int dx_splits = 1;       // K splits of the dX GEMM (fixed by the shape, summed in order)
  int dw_splits = 1;       // row splits of the dW GEMM of a full chunk (atomic, partials)
  int64_t slab_rows = 0;   // partials: vocabulary rows per slab
  int64_t stats_cols = 0;  // column tiles of the logits GEMM when its epilogue writes row statistics
  size_t counts = 0, loss_rows = 0, logits = 0, stats = 0, dw_acc = 0, partials = 0, dx_partials = 0, total = 0;
  bool need_loss_rows = false, need_dw_acc = false, need_partials = false;
  bool dw_direct = false;  // bf16 dW stored straight by the one chunk's owning product (engine_dw_bf16_direct)
};

// The dX split and the chunk rows: kernels/flce/plan_rules.h (shared with the CPU emulation).

// Chunk boundaries: every chunk but the last holds a multiple of block_m rows,
// so each boundary falls on a multiple of block_m. For the owning dW chain to
// be one chain whatever the budget (owning_acc_in), a boundary must fall on a
// multiple of the dW GEMM's k-tile (its K is the chunk's rows): BK = 64 rows
// for wgmma, 32 for mma.sync; every block_m registered is a multiple of its
// BK (the driver asserts it). Why the k-tile and not less: one wgmma (mma.sync)
// instruction sums its K = 16 slice of products and adds the result to the
// accumulator with the hardware's own internal precision and rounding, so a
// boundary inside a 16-row slice would split one instruction's sum in two;
// and the engines load whole k-tiles with rows past the chunk's end zero
// filled, so a boundary at a multiple of 16 inside a k-tile would add
// instructions of zero products (which keep a finite sum but are not
// guaranteed to keep the sign of a zero). On the k-tile grid the chunks'
// k-loops issue exactly the instruction sequence of one k-loop over all rows.
//
// row_stats: the engine's logits epilogue writes per-tile row statistics;
// split_dx: the dX GEMM may be split along K when it has too few output tiles;
// logit_bytes: 4 (fp32 logits chunk) or 2 (bf16: the lg16 and ex16 variants);
// stats_always: the statistics are written in backward mode too (ex16);
// dw_bf16_direct: the engine may store a one-chunk owning dW as bf16 (above).
inline Plan make_plan(const FlceProblem& p, FlceMode mode, const StrategyParams& sp, int block_m, int block_n,
                      bool row_stats = false, bool split_dx = true, int logit_bytes = 4, bool stats_always = false,
                      bool dw_bf16_direct = false) {
  Plan pl;
  pl.Vp = round_up(p.V, 8);
  pl.chunk_rows = plan_chunk_rows(p.N, pl.Vp, sp.chunk_mib, block_m, logit_bytes);
  const bool fwd = mode != FlceMode::backward, bwd = mode != FlceMode::forward;
  pl.need_loss_rows = fwd && p.reduction != Reduction::none;
  const bool bf16_dw = bwd && p.grad_dtype != DType::f32 && !p.accumulate_dW;
  pl.dw_direct = bf16_dw && dw_bf16_direct && sp.strategy == Strategy::owning && pl.chunk_rows >= p.N;
  pl.need_dw_acc = bf16_dw && !pl.dw_direct;
  pl.need_partials = bwd && sp.strategy == Strategy::partials;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    size_t at = off;
    off += round_up(int64_t(bytes), 256);
    return at;
  };
  pl.counts = take(3 * sizeof(int64_t));
  pl.loss_rows = take(pl.need_loss_rows ? size_t(p.N) * 4 : 0);
  pl.logits = take(size_t(pl.chunk_rows) * size_t(pl.Vp) * size_t(logit_bytes));
  if (row_stats && (fwd || stats_always)) pl.stats_cols = (p.V + block_n - 1) / block_n;
  pl.stats = take(size_t(pl.chunk_rows) * size_t(pl.stats_cols) * 16);
  pl.dw_acc = take(pl.need_dw_acc ? size_t(p.V) * size_t(p.D) * 4 : 0);
  pl.dw_splits = sp.strategy == Strategy::owning ? 1 : dw_splits(sp, pl.chunk_rows, block_m);
  pl.slab_rows = pl.need_partials ? partial_slab_rows(sp, pl.dw_splits, p.V) : 0;
  pl.partials = take(pl.need_partials ? size_t(pl.dw_splits) * size_t(pl.slab_rows) * size_t(p.D) * 4 : 0);
  if (bwd && split_dx) {
    pl.dx_splits = plan_dx_splits(p.N, p.D, p.V, pl.Vp, block_m, block_n);  // rows of kDxRefMiB, not of the chunk
  }
  pl.dx_partials = take(pl.dx_splits > 1 ? size_t(pl.dx_splits) * size_t(pl.chunk_rows) * size_t(p.D) * 4 : 0);
  pl.total = off;
  return pl;
}

template <class Engine, class Cfg>
struct FlceDriver {
  using T = typename Engine::T;  // input element type
  static constexpr bool logits_bf16 = engine_logits_bf16<Engine>::value;
  static constexpr bool owning_acc_in = engine_owning_acc_in<Engine>::value;
  static constexpr bool exp16 = engine_logits_exp16<Engine>::value;
  static_assert(!exp16 || (Engine::fused_row_stats && Engine::grad_bf16 && !logits_bf16),
                "bf16 exp(z - m_tile): fused statistics, the gradient in place as bf16");
  static_assert(!exp16 || Cfg::BN % 8 == 0, "the exp16 row pass reads 8 columns of one tile at a time");
  static_assert(!owning_acc_in || Cfg::BM % Cfg::BK == 0,
                "owning_acc_in: chunk boundaries (multiples of BM) must fall on the dW GEMM's k-tile grid (BK)");
  static_assert(!logits_bf16 || (Engine::grad_bf16 && !Engine::fused_row_stats),
                "bf16 logits: the gradient is written in place as bf16, and no fused statistics");

  static std::optional<std::string> can_run(const FlceProblem& p, FlceMode mode, const DeviceInfo& dev,
                                            const StrategyParams& sp) {
    if (p.dtype != Engine::dtype) return std::string("variant is for ") + to_string(Engine::dtype) + " inputs";
    if (auto why = Engine::template can_run<Cfg>(p, dev)) return why;
    if (auto why = p.dim_error()) return why;  // the one size rule, kMaxDim (kernels/common/problem.h)
    if (mode != FlceMode::forward && sp.strategy == Strategy::partials && sp.slab_rows % 8 != 0)
      return "partials slab rows must be a multiple of 8";
    if (mode != FlceMode::forward && sp.strategy == Strategy::partials && sp.slab_rows == 0) {
      const Plan pl = plan(p, mode, sp);
      if (int64_t(pl.dw_splits) * 8 > sp.partial_rows)
        return "partials sk0: " + std::to_string(pl.dw_splits) + " row splits of " + std::to_string(pl.chunk_rows) +
               " chunk rows need at least 8 slab rows each, beyond the partials budget of " +
               std::to_string(sp.partial_rows) + " rows";
    }
    return std::nullopt;
  }

  static Plan plan(const FlceProblem& p, FlceMode mode, const StrategyParams& sp) {
    return make_plan(p, mode, sp, Cfg::BM, Cfg::BN, Engine::fused_row_stats, Engine::split_dx,
                     logits_bf16 || exp16 ? 2 : 4, exp16, engine_dw_bf16_direct<Engine>::value);
  }

  static size_t workspace_bytes(const FlceProblem& p, FlceMode mode, const StrategyParams& sp) {
    return plan(p, mode, sp).total;
  }

  static void launch(const FlceProblem& p, FlceMode mode, const FlceArgs& a, const StrategyParams& sp,
                     cudaStream_t s) {
    const Plan pl = plan(p, mode, sp);
    if (a.workspace_size < pl.total || (pl.total && !a.workspace))
      throw invalid_argument("workspace: variant needs " + std::to_string(pl.total) + " bytes, got " +
                             std::to_string(a.workspace_size));
    auto* ws = static_cast<unsigned char*>(a.workspace);
    auto* counts = reinterpret_cast<int64_t*>(ws + pl.counts);
    auto* L = reinterpret_cast<float*>(ws + pl.logits);
    const bool fwd = mode != FlceMode::backward, bwd = mode != FlceMode::forward;
    float* loss_rows = p.reduction == Reduction::none ? a.loss : reinterpret_cast<float*>(ws + pl.loss_rows);
    float* dw = bwd ? (pl.need_dw_acc ? reinterpret_cast<float*>(ws + pl.dw_acc) : static_cast<float*>(a.dW)) : nullptr;
    auto* partials = reinterpret_cast<float*>(ws + pl.partials);
    const T* X = static_cast<const T*>(a.X);
    const T* W = static_cast<const T*>(a.W);
    const int D = int(p.D), V = int(p.V);

    launch_count_targets(p, a.y, counts, s);
    if (bwd && sp.strategy == Strategy::atomic && !p.accumulate_dW)
      DETFUSE_CUDA_CHECK(cudaMemsetAsync(dw, 0, size_t(p.V) * size_t(p.D) * 4, s));

    // G overwrites Z in place: bf16 with twice the element leading dimension
    // over fp32 logits, the same one over bf16 logits, or fp32.
    const int64_t ldg = Engine::grad_bf16 && !logits_bf16 && !exp16 ? 2 * pl.Vp : pl.Vp;
    for (int64_t r0 = 0, chunk = 0; r0 < p.N; r0 += pl.chunk_rows, ++chunk) {
      const int nc = int(std::min<int64_t>(pl.chunk_rows, p.N - r0));
      const T* Xc = X + r0 * p.D;
      const bool fresh = chunk == 0 && !p.accumulate_dW;  // dW written, not summed onto

      GemmParams g1;  // Z = Xc W^T : [nc, V], K = D
      g1.M = nc; g1.N = V; g1.K = D;
      g1.A = Xc; g1.lda = p.D;
      g1.B = W; g1.ldb = p.D;
      float* stats = pl.stats_cols ? reinterpret_cast<float*>(ws + pl.stats) : nullptr;
      constexpr int kLogitsGroup = 1 << 30;  // one W column tile meets every row tile: the X chunk stays in L2
      bool fused = false;
      if constexpr (exp16) {
        // e = exp(z - m_tile) in bf16 and the statistics; forward only: the
        // statistics alone (LSE and loss), no chunk is written.
        Engine::template gemm<Cfg, Major::K, Major::K>(
            g1,
            EpiLogitsExp16{bwd ? reinterpret_cast<__nv_bfloat16*>(L) : nullptr, pl.Vp, float(p.softcap), stats,
                           pl.stats_cols, a.y + r0},
            kLogitsGroup, s);
        fused = true;
      } else if constexpr (Engine::fused_row_stats) {
        if (stats) {
          Engine::template gemm<Cfg, Major::K, Major::K>(
              g1, EpiLogitsStats{L, pl.Vp, float(p.softcap), stats, pl.stats_cols}, kLogitsGroup, s);
          fused = true;
        }
      }
      if constexpr (logits_bf16) {
        Engine::template gemm<Cfg, Major::K, Major::K>(
            g1, EpiStoreLogits16{reinterpret_cast<__nv_bfloat16*>(L), pl.Vp, float(p.softcap)}, kLogitsGroup, s);
      } else if (!fused) {
        Engine::template gemm<Cfg, Major::K, Major::K>(g1, EpiStoreLogits{L, pl.Vp, float(p.softcap)}, kLogitsGroup, s);
      }
      (void)fused;

      RowPass rp;
      rp.L = L; rp.ldl = pl.Vp; rp.rows = nc; rp.row0 = r0;
      rp.y = a.y; rp.counts = counts; rp.dloss = a.dloss;
      rp.lse_in = fwd ? nullptr : a.lse_in;
      rp.stats = stats;
      rp.stats_cols = pl.stats_cols;
      rp.lse_out = fwd ? a.lse : nullptr;
      rp.loss_rows = fwd ? loss_rows : nullptr;
      rp.write_grad = bwd;
      rp.grad_bf16 = Engine::grad_bf16;
      if constexpr (exp16) {
        rp.exp16 = true;
        rp.stats_bn = Cfg::BN;
      }
      if constexpr (logits_bf16) {
        rp.logits_bf16 = true;
        rp.X = a.X;
        rp.W = a.W;
      }
      launch_row_pass(p, rp, s);
      if (!bwd) continue;

      GemmParams g3;  // dXc = G W : [nc, D], K = V
      g3.M = nc; g3.N = D; g3.K = V;
      g3.A = L; g3.lda = ldg;
      g3.B = W; g3.ldb = p.D;
      if (pl.dx_splits > 1) {
        // Split K; slice s of the partials holds split s; summed in order into
        // slice 0 (each element read fully before it is written), then stored.
        auto* dxp = reinterpret_cast<float*>(ws + pl.dx_partials);
        const int64_t slice = int64_t(nc) * p.D;
        g3.splits = pl.dx_splits;
        g3.k_per_split = int(round_up((V + pl.dx_splits - 1) / pl.dx_splits, Cfg::BK));
        Engine::template gemm<Cfg, Major::K, Major::MN>(g3, EpiPartial{dxp, p.D, slice}, 8, s);
        if (p.grad_dtype == DType::f32) {
          launch_sum_partials(static_cast<float*>(a.dX) + r0 * p.D, dxp, pl.dx_splits, slice, slice, true, s);
        } else {
          launch_sum_partials(dxp, dxp, pl.dx_splits, slice, slice, true, s);
          launch_to_bf16(static_cast<T*>(a.dX) + r0 * p.D, dxp, slice, s);
        }
      } else if (p.grad_dtype == DType::f32) {
        Engine::template gemm<Cfg, Major::K, Major::MN>(g3, EpiStore<float>{static_cast<float*>(a.dX) + r0 * p.D, p.D}, 8, s);
      } else {
        Engine::template gemm<Cfg, Major::K, Major::MN>(
            g3, EpiStore<T>{static_cast<T*>(a.dX) + r0 * p.D, p.D}, 8, s);
      }

      GemmParams g4;  // dW += G^T Xc : [V, D], K = nc
      g4.M = V; g4.N = D; g4.K = nc;
      g4.A = L; g4.lda = ldg;
      g4.B = Xc; g4.ldb = p.D;
      switch (sp.strategy) {
        case Strategy::owning:
          if constexpr (engine_dw_bf16_direct<Engine>::value) {
            if (pl.dw_direct) {  // the one chunk: bf16 dW, no fp32 accumulator
              Engine::template gemm<Cfg, Major::MN, Major::MN>(g4, EpiStore<T>{static_cast<T*>(a.dW), p.D}, 1, s);
              break;
            }
          }
          if constexpr (owning_acc_in) {
            if (!sp.owning_rmw) {
              Engine::template gemm<Cfg, Major::MN, Major::MN>(g4, EpiAccumulateIn{dw, p.D, fresh ? 1 : 0}, 1, s);
              break;
            }
          }
          Engine::template gemm<Cfg, Major::MN, Major::MN>(g4, EpiAccumulate{dw, p.D, fresh ? 1 : 0}, 1, s);
          break;
        case Strategy::atomic: {
          const int splits = dw_splits(sp, nc, Cfg::BM);
          g4.splits = splits;
          g4.k_per_split = int(round_up((nc + splits - 1) / splits, Cfg::BK));
          Engine::template gemm<Cfg, Major::MN, Major::MN>(g4, EpiAtomic{dw, p.D}, 1, s);
          break;
        }
        case Strategy::partials: {
          // A short last chunk has fewer row splits than the plan's; the slab
          // is the plan's, so the workspace holds them.
          const int splits = dw_splits(sp, nc, Cfg::BM);
          const int64_t slab = pl.slab_rows;
          g4.splits = splits;
          g4.k_per_split = int(round_up((nc + splits - 1) / splits, Cfg::BK));
          for (int64_t v0 = 0; v0 < p.V; v0 += slab) {
            const int64_t rows = std::min<int64_t>(slab, p.V - v0);
            GemmParams gs = g4;
            gs.M = int(rows);
            gs.A = Engine::grad_bf16 ? static_cast<const void*>(reinterpret_cast<const unsigned short*>(L) + v0)
                                     : static_cast<const void*>(L + v0);
            Engine::template gemm<Cfg, Major::MN, Major::MN>(gs, EpiPartial{partials, p.D, slab * p.D}, 1, s);
            launch_sum_partials(dw + v0 * p.D, partials, splits, slab * p.D, rows * p.D, fresh, s);
          }
          break;
        }
      }
    }
    if (fwd && p.reduction != Reduction::none) launch_reduce_loss(p, loss_rows, counts, a.loss, s);
    if (bwd && pl.need_dw_acc) launch_to_bf16(a.dW, dw, p.V * p.D, s);
  }
};

// The contention study's row-split levels (DESIGN.md, "Gradient-accumulation
// strategies"): sk adders per dW element per chunk, 0 for every row block.
// The levels other than a tile configuration's default are registered as
// study variants (VariantDesc::study_only): `detfuse tune` skips them unless
// named, `detfuse study contention` measures them. Partials keep the default's
// workspace at every level: splits x slab rows = the default's sk x vs.
inline const std::vector<int> kStudySplits = {1, 2, 4, 16, 64, 0};

// Registers one variant of an engine/tile configuration with strategy sp.
template <class Engine, class Cfg>
void register_flce_variant(Registry& r, const StrategyParams& sp, bool study_only = false) {
  FlceVariant v;
  v.desc.family = Family::flce;
  v.desc.dtype = Engine::dtype;
  v.desc.engine = Engine::engine;
  v.desc.strategy = to_string(sp.strategy);
  v.desc.params = Engine::template config_params<Cfg>();
  v.desc.params.push_back({"mb", sp.chunk_mib});
  if (sp.strategy != Strategy::owning) v.desc.params.push_back({"sk", sp.splits});
  if (sp.strategy == Strategy::partials) v.desc.params.push_back({"vs", sp.slab_rows});
  v.desc.name = VariantDesc::canonical_name(v.desc.family, v.desc.dtype, v.desc.engine, v.desc.strategy, v.desc.params);
  v.desc.deterministic = sp.strategy != Strategy::atomic;
  v.desc.study_only = study_only;
  const std::string split = sp.splits > 0 ? std::to_string(sp.splits) + "-way row split"
                                          : std::string("row split per row block (every row block adds)");
  const std::string slab = sp.slab_rows > 0 ? std::to_string(sp.slab_rows) + "-row slabs"
                                            : std::to_string(sp.partial_rows) + "/sk-row slabs";
  v.desc.summary = std::string(Engine::summary) + "; logits chunk " + std::to_string(sp.chunk_mib) + " MiB; dW " +
                   (sp.strategy == Strategy::owning ? "owned tiles walk the rows in order"
                    : sp.strategy == Strategy::atomic ? split + ", fp32 atomics"
                                                      : split + ", partials of " + slab + " summed in order (CUB)");
  v.can_run = [sp](const FlceProblem& p, FlceMode m, const DeviceInfo& d) {
    return FlceDriver<Engine, Cfg>::can_run(p, m, d, sp);
  };
  v.workspace_bytes = [sp](const FlceProblem& p, FlceMode m) {
    return FlceDriver<Engine, Cfg>::workspace_bytes(p, m, sp);
  };
  v.launch = [sp](const FlceProblem& p, FlceMode m, const FlceArgs& a, cudaStream_t s) {
    FlceDriver<Engine, Cfg>::launch(p, m, a, sp, s);
  };
  r.add(std::move(v));
}

// Registers the owning variants of one engine/tile configuration, one per
// chunk budget (the engines whose other strategies are not offered).
template <class Engine, class Cfg>
void register_owning(Registry& r, const std::vector<int>& owning_mib) {
  for (int mb : owning_mib) register_flce_variant<Engine, Cfg>(r, {Strategy::owning, mb, 1, 0});
}

// Registers the three strategies of one engine/tile configuration:
// owning at each chunk budget in `owning_mib`, atomic (unless the engine has no
// atomic epilogue) and partials at `mib`, `splits` row splits; and the study's
// other row-split levels of atomic and partials (study_only).
template <class Engine, class Cfg>
void register_tile_config(Registry& r, const std::vector<int>& owning_mib, int mib, int splits, int slab_rows,
                          bool with_atomic = true) {
  auto add = [&](const StrategyParams& sp, bool study_only = false) {
    register_flce_variant<Engine, Cfg>(r, sp, study_only);
  };
  for (int mb : owning_mib) add({Strategy::owning, mb, 1, 0});
  if (with_atomic) add({Strategy::atomic, mib, splits, 0});
  add({Strategy::partials, mib, splits, slab_rows});
  const int partial_rows = splits * slab_rows;  // the default's workspace, in slab rows x splits
  for (int sk : kStudySplits) {
    if (sk == splits) continue;
    if (with_atomic) add({Strategy::atomic, mib, sk, 0}, true);
    add({Strategy::partials, mib, sk, sk > 0 ? partial_rows / sk : 0, partial_rows}, true);
  }
}

}  // namespace detfuse::flce
