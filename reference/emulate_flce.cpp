// CPU emulation of the fp32 FLCE variants (engine `fma`, strategies owning and
// partials): kernels/flce/driver.cuh with gemm_fma.cuh, the fp32 row pass and
// loss reduction of rowwise.cu (arithmetic shared through
// kernels/flce/rowwise_portable.h) and the ordered partial sums, replayed
// operation for operation. Built with -ffp-contract=off.
//
// Per chunk of rows (the driver's plan):
//   logits  Z[i][j] = chain over k = 0..D-1 of fma(X[i][k], W[j][k], .) from
//           +0 (and + 0 when the chain's length is no multiple of BK: the
//           engine's zero padding), then softcap * tanh(Z / softcap)
//   row pass (rowwise_portable.h): LSE, loss row, gradient G over Z
//   dX      split s of dx_splits covers k in [s kps, (s+1) kps), kps =
//           round_up(ceil(V / splits), BK); each split an fma chain from +0;
//           with one split that is dX, else dX = ((0 + P_0) + P_1) + ...
//   dW      owning: the chunk's rows in order, one fma chain per element from
//           +0; dW = chunk 0 ? acc : dW + acc. partials: the chunk's rows in
//           sk splits (sk0: one per BM rows), kps = round_up(ceil(nc / sk),
//           BK), each an fma chain from +0; dW = ((first ? 0 : dW) + P_0) + ...
// and finally the loss reduction of rowwise_portable.h.
#include <algorithm>
#include <cstring>

#include "kernels/common/error.h"
#include "kernels/flce/plan_rules.h"
#include "kernels/flce/rowwise_portable.h"
#include "reference/emulate.h"
#include "reference/emulate_detail.h"
#include "reference/parallel.h"

namespace detfuse::reference {

namespace emu {

FlceChunking flce_chunking(const FlceProblem& p, const ParsedName& n) {
  const int64_t bm = n.params.at("bm"), bn = n.params.at("bn"), mb = n.params.at("mb");
  FlceChunking c;
  const int64_t Vp = round_up(p.V, 8);
  // The driver's rules themselves (make_plan): fp32 logits, dX split from the shape.
  c.chunk_rows = flce::plan_chunk_rows(p.N, Vp, mb, bm, 4);
  c.dx_splits = flce::plan_dx_splits(p.N, p.D, p.V, Vp, bm, bn);
  return c;
}

}  // namespace emu

namespace {

using emu::ceil_div;
using emu::fma_row;
using emu::round_up;
namespace pp = flce::portable;

template <class T>
void append_bytes(std::vector<EmulatedOutput>& out, const std::string& name, const std::vector<T>& v) {
  EmulatedOutput o;
  o.name = name;
  o.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
  out.push_back(std::move(o));
}

// Softcap of the logits epilogue, then the row pass of rowwise.cu
// (row_kernel_f32) over one row z[0, V) in place: its LSE, loss row and
// gradient (zeros in [V, Vp)). A function of its own so that the x86-64-v3
// clone inlines the portable math's fmas.
DETFUSE_EMU_CLONES void row_pass(float* z, int64_t V, int64_t Vp, int64_t t, const pp::RowOptions& o, int red,
                                 int64_t n_valid, float dloss, float* lse_out, float* loss_out) {
  if (o.softcap > 0.f)
    for (int64_t j = 0; j < V; ++j) z[j] = pm::mul(o.softcap, pm::tanh(pm::div(z[j], o.softcap)));
  const bool valid = t >= 0 && t < V;
  constexpr int NT = pp::kRowThreads;
  pp::RowStat st[NT];
  for (int th = 0; th < NT; ++th) {
    st[th] = pp::row_init();
    for (int64_t j = int64_t(th) * 4; j < V; j += NT * 4)
      for (int64_t q = 0; q < 4 && j + q < V; ++q) pp::row_push(st[th], z[j + q]);
  }
  for (int stride = NT / 2; stride > 0; stride >>= 1)
    for (int th = 0; th < stride; ++th) st[th] = pp::row_combine(st[th], st[th + stride]);
  const float l = pp::row_lse(st[0]);
  *lse_out = l;
  *loss_out = valid ? pp::row_loss(o, l, z[t], st[0].sz) : 0.f;
  const float coef = pp::row_coef(o, valid, red, n_valid, dloss);
  for (int64_t j = 0; j < Vp; ++j) z[j] = (coef != 0.f && j < V) ? pp::row_grad(o, z[j], j == t, l, coef) : 0.f;
}

void check_inputs(const FlceProblem& p, const FlceInputs& in) {
  auto need = [](const char* what, size_t got, int64_t want) {
    if (int64_t(got) != want)
      throw invalid_argument(std::string(what) + ": " + std::to_string(got) + " values, the problem needs " +
                             std::to_string(want));
  };
  need("X", in.X.size(), p.N * p.D);
  need("W", in.W.size(), p.V * p.D);
  need("y", in.y.size(), p.N);
  if (p.reduction == Reduction::none) need("dloss", in.dloss.size(), p.N);
  for (int64_t i = 0; i < p.N; ++i) {
    const int64_t t = in.y[static_cast<size_t>(i)];
    if ((t < 0 || t >= p.V) && t != p.ignore_index)
      throw invalid_argument("y: value " + std::to_string(t) + " at row " + std::to_string(i) +
                             " is outside [0, V) and not ignore_index");
  }
}

}  // namespace

std::vector<EmulatedOutput> emulate_flce(const std::string& variant, const FlceProblem& p, const FlceInputs& in) {
  const auto n = emu::emulated(variant);
  if (!n || n->family != "flce") throw invalid_argument("emulate_flce: '" + variant + "' has no CPU emulation");
  p.validate();
  if (p.dtype != DType::f32) throw invalid_argument("emulate_flce: variant is for fp32 inputs");
  if (auto why = p.dim_error()) throw invalid_argument("emulate_flce: " + *why);
  check_inputs(p, in);
  const int64_t N = p.N, D = p.D, V = p.V;
  const int64_t bm = n->params.at("bm"), bk = n->params.at("bk");
  const bool partials = n->strategy == Strategy::partials;
  const int64_t sk = partials ? n->params.at("sk") : 1;
  const emu::FlceChunking plan = emu::flce_chunking(p, *n);
  const int64_t Nc = plan.chunk_rows, Vp = round_up(V, 8);
  if (partials) {
    // driver.cuh can_run: slab rows a multiple of 8; sk0's derived slabs need
    // 8 rows per split within the default's budget, kSplits * kSlabRows =
    // 4 * 8192 rows (kernels/flce/variants.h).
    const int64_t vs = n->params.at("vs");
    if (vs % 8 != 0) throw invalid_argument("emulate_flce: partials slab rows must be a multiple of 8");
    if (vs == 0) {
      const int64_t splits = sk > 0 ? sk : std::max<int64_t>(1, ceil_div(Nc, bm));
      if (splits * 8 > 4 * 8192)
        throw invalid_argument("emulate_flce: partials sk0: " + std::to_string(splits) +
                               " row splits need more slab rows than the partials budget");
    }
  }

  int64_t n_valid = 0;
  for (int64_t t : in.y) n_valid += t >= 0 && t < V;
  const pp::RowOptions o{float(p.label_smoothing), float(p.lse_square_scale), float(p.softcap), float(p.grad_output),
                         float(V)};
  const int red = p.reduction == Reduction::mean ? 0 : p.reduction == Reduction::sum ? 1 : 2;
  // gemm_fma.cuh reads a split's k range in BK slices, zeros past its end: a
  // chain of len terms not a multiple of BK ends with fma(0, 0, acc) = acc + 0,
  // which turns a -0 (an fma result that underflowed from below) into +0.
  auto pad = [bk](float* acc, int64_t n, int64_t len) {
    if (len > 0 && len % bk != 0)
      for (int64_t j = 0; j < n; ++j) acc[j] = pm::add(acc[j], 0.f);
  };

  std::vector<float> loss_rows(static_cast<size_t>(N), 0.f), lse(static_cast<size_t>(N)),
      dX(static_cast<size_t>(N * D)), dW(static_cast<size_t>(V * D), 0.f);
  // W transposed [D][V]: the logits GEMM as fma rows over the vocabulary.
  std::vector<float> Wt(static_cast<size_t>(D * V));
  for (int64_t j = 0; j < V; ++j)
    for (int64_t k = 0; k < D; ++k) Wt[static_cast<size_t>(k * V + j)] = in.W[static_cast<size_t>(j * D + k)];
  std::vector<float> Z(static_cast<size_t>(Nc * Vp));

  for (int64_t r0 = 0, chunk = 0; r0 < N; r0 += Nc, ++chunk) {
    const int64_t nc = std::min(Nc, N - r0);
    const float* Xc = in.X.data() + r0 * D;
    // 1+2. logits and the row pass, row by row.
    detail::parallel_for(nc, 0, [&](int64_t i, int) {
      float* z = Z.data() + i * Vp;
      std::fill(z, z + Vp, 0.f);
      for (int64_t k = 0; k < D; ++k) fma_row(z, Xc[i * D + k], Wt.data() + k * V, V);
      pad(z, V, D);
      const int64_t gi = r0 + i, t = in.y[static_cast<size_t>(gi)];
      const float dl = t >= 0 && t < V && red == 2 ? in.dloss[static_cast<size_t>(gi)] : 0.f;
      row_pass(z, V, Vp, t, o, red, n_valid, dl, &lse[static_cast<size_t>(gi)], &loss_rows[static_cast<size_t>(gi)]);
    });
    // 3. dX = G W, K = V split dx_splits ways.
    const int S = plan.dx_splits;
    const int64_t kps = S > 1 ? round_up(ceil_div(V, S), bk) : V;
    detail::parallel_for(nc, 0, [&](int64_t i, int) {
      const float* g = Z.data() + i * Vp;
      float* out = dX.data() + (r0 + i) * D;
      std::vector<float> part(static_cast<size_t>(D));
      if (S > 1) std::fill(out, out + D, 0.f);
      for (int s = 0; s < S; ++s) {
        std::fill(part.begin(), part.end(), 0.f);
        const int64_t kb = std::min<int64_t>(int64_t(s) * kps, V), ke = std::min<int64_t>(kb + kps, V);
        for (int64_t k = kb; k < ke; ++k) fma_row(part.data(), g[k], in.W.data() + k * D, D);
        pad(part.data(), D, ke - kb);
        if (S == 1)
          std::copy(part.begin(), part.end(), out);
        else
          for (int64_t d = 0; d < D; ++d) out[d] = pm::add(out[d], part[static_cast<size_t>(d)]);
      }
    });
    // 4. dW += G^T Xc by strategy, in blocks of vocabulary rows.
    const int64_t splits = partials ? (sk > 0 ? sk : std::max<int64_t>(1, ceil_div(nc, bm))) : 1;
    const int64_t rps = splits > 1 ? round_up(ceil_div(nc, splits), bk) : nc;
    constexpr int64_t kVB = 32;
    detail::parallel_for(ceil_div(V, kVB), 0, [&](int64_t vb, int) {
      const int64_t v0 = vb * kVB, nv = std::min(V, v0 + kVB) - v0;
      std::vector<float> part(static_cast<size_t>(kVB * D));
      if (partials && chunk == 0) std::fill(dW.begin() + v0 * D, dW.begin() + (v0 + nv) * D, 0.f);
      for (int64_t s = 0; s < splits; ++s) {
        std::fill(part.begin(), part.end(), 0.f);
        const int64_t ib = std::min(s * rps, nc), ie = std::min(ib + rps, nc);
        for (int64_t i = ib; i < ie; ++i)  // rows in order; each (v, d) its own chain
          for (int64_t vv = 0; vv < nv; ++vv)
            fma_row(part.data() + vv * D, Z[static_cast<size_t>(i * Vp + v0 + vv)], Xc + i * D, D);
        pad(part.data(), nv * D, ie - ib);
        float* w = dW.data() + v0 * D;
        if (!partials && chunk == 0)
          std::copy(part.begin(), part.begin() + nv * D, w);
        else
          for (int64_t e = 0; e < nv * D; ++e) w[e] = pm::add(w[e], part[static_cast<size_t>(e)]);
      }
    });
  }

  std::vector<EmulatedOutput> out;
  if (p.reduction == Reduction::none) {
    append_bytes(out, "loss", loss_rows);
  } else {
    constexpr int NT = pp::kLossThreads;
    double acc[NT];
    for (int t = 0; t < NT; ++t) {
      acc[t] = 0.0;
      for (int64_t i = t; i < N; i += NT) acc[t] += double(loss_rows[static_cast<size_t>(i)]);
    }
    for (int stride = NT / 2; stride > 0; stride >>= 1)
      for (int t = 0; t < stride; ++t) acc[t] = acc[t] + acc[t + stride];
    double total = acc[0];
    if (red == 0) total = n_valid > 0 ? total / double(n_valid) : 0.0;
    append_bytes(out, "loss", std::vector<float>{float(total)});
  }
  append_bytes(out, "lse", lse);
  append_bytes(out, "dX", dX);
  append_bytes(out, "dW", dW);
  return out;
}

}  // namespace detfuse::reference
