// CPU emulation of the `fma` attention engine (kernels/attention/engine_fma.cuh
// and driver_fma.cuh, bwd_common.cu), strategies owning and partials, fp32 and
// bf16 storage (the same code: bf16 inputs widen exactly to fp32, outputs are
// rounded to nearest even once). Every fp32 step is the kernel's, in its
// order; the padding of partial tiles (zero rows of Q, K, V, dO; masked
// scores) is replayed too, so even the signs of zeros match. Built with
// -ffp-contract=off.
//
// Forward, per (b, h, query block of BR rows), per row, for each key block of
// BC keys the block's rows can see (causal: up to the block's last row's
// diagonal; window: from the block containing the first row's first key):
//   s_c = chain over k of fma(q_k, K_ck, .) from +0; s_c = cap(scale * s_c)
//   or -inf when masked; lane g of GR = 32 w / BR holds columns g + GR t:
//   its running max over t, then an xor butterfly of max over the GR lanes
//   m_new = max(m, mx); m_use = m_new or 0 if -inf; alpha = exp(m - m_use)
//   p_c = exp(s_c - m_use); per-lane sums over t, then an xor butterfly of +
//   l = fma(l, alpha, rowsum); acc_j = acc_j * alpha; acc_j = fma(p_c, V_cj, .) for c = 0..BC-1
//   O = acc * (1 / l), LSE = m + log(l) (rows that see nothing: 0, -inf).
// Backward: D_i = lane sums of fma(dO, O) over k = lane + 32 i, xor butterfly
// over 32 lanes; dK, dV per key block walking the heads of the kv group and
// the query blocks that can see it; dQ owning (a query block walks its key
// blocks: sum_kb fma-chain, times scale at the end) or partials (per key
// block scale * fma-chain, summed over all key blocks in order from 0).
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/common/error.h"
#include "kernels/common/host_bf16.h"
#include "kernels/common/portable_math.h"
#include "reference/emulate.h"
#include "reference/emulate_detail.h"
#include "reference/parallel.h"

namespace detfuse::reference {

namespace {

using emu::ceil_div;
using emu::fma_row;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Geo {
  int64_t B, H, Hkv, G, Sq, Sk, d;
  int64_t BR, BC, GR;
  bool causal;
  float scale, softcap;
  int64_t window;

  int64_t visible_keys(int64_t q0, int64_t rows) const {
    if (!causal) return Sk;
    const int64_t last = q0 + rows - 1 + (Sk - Sq) + 1;
    return last < 0 ? 0 : (last < Sk ? last : Sk);
  }
  int64_t first_key_block(int64_t q0) const {
    if (window <= 0) return 0;
    const int64_t k = q0 + (Sk - Sq) - window + 1;
    return k <= 0 ? 0 : k / BC * BC;
  }
  bool sees(int64_t i, int64_t j) const {
    const int64_t diag = i + (Sk - Sq);
    return (!causal || j <= diag) && (window <= 0 || j > diag - window);
  }
  float cap(float s) const { return softcap > 0.f ? pm::mul(softcap, pm::tanh(pm::div(s, softcap))) : s; }
};

// Lane 0's value after an xor butterfly over G lanes (offsets G/2 .. 1).
template <class Op>
float butterfly(std::vector<float> v, Op op) {
  const size_t G = v.size();
  for (size_t o = G / 2; o > 0; o >>= 1) {
    std::vector<float> w(G);
    for (size_t i = 0; i < G; ++i) w[i] = op(v[i], v[i ^ o]);
    v.swap(w);
  }
  return v[0];
}

// rows x d of src (row stride d) from row `first`, zero rows at or beyond `valid`.
void load_tile(std::vector<float>& dst, const float* src, int64_t rows, int64_t valid, int64_t d) {
  dst.assign(static_cast<size_t>(rows * d), 0.f);
  for (int64_t r = 0; r < std::min(rows, valid); ++r) std::copy(src + r * d, src + (r + 1) * d, dst.data() + r * d);
}

// The score phase of the backward (engine_fma.cuh bwd_scores) for one query
// tile and one key tile: P and dS [BR][BC].
void bwd_scores(const Geo& g, const std::vector<float>& Qs, const std::vector<float>& dOs, const std::vector<float>& Ks,
                const std::vector<float>& Vs, const std::vector<float>& lse_s, const std::vector<float>& D_s,
                int64_t q0, int64_t k0, std::vector<float>& P, std::vector<float>& dS) {
  const int64_t BR = g.BR, BC = g.BC, d = g.d;
  std::vector<float> Kt(static_cast<size_t>(d * BC)), Vt(static_cast<size_t>(d * BC)), s(static_cast<size_t>(BC)),
      dp(static_cast<size_t>(BC));
  for (int64_t c = 0; c < BC; ++c)
    for (int64_t k = 0; k < d; ++k) {
      Kt[static_cast<size_t>(k * BC + c)] = Ks[static_cast<size_t>(c * d + k)];
      Vt[static_cast<size_t>(k * BC + c)] = Vs[static_cast<size_t>(c * d + k)];
    }
  P.assign(static_cast<size_t>(BR * BC), 0.f);
  dS.assign(static_cast<size_t>(BR * BC), 0.f);
  for (int64_t r = 0; r < BR; ++r) {
    std::fill(s.begin(), s.end(), 0.f);
    std::fill(dp.begin(), dp.end(), 0.f);
    for (int64_t k = 0; k < d; ++k) {
      fma_row(s.data(), Qs[static_cast<size_t>(r * d + k)], Kt.data() + k * BC, BC);
      fma_row(dp.data(), dOs[static_cast<size_t>(r * d + k)], Vt.data() + k * BC, BC);
    }
    const int64_t qi = q0 + r;
    const float lse = lse_s[static_cast<size_t>(r)], Dr = D_s[static_cast<size_t>(r)];
    for (int64_t c = 0; c < BC; ++c) {
      const int64_t kj = k0 + c;
      const bool ok = qi < g.Sq && kj < g.Sk && g.sees(qi, kj) && lse != kNegInf;
      float sc = pm::mul(s[static_cast<size_t>(c)], g.scale), dcap = 1.f;
      if (g.softcap > 0.f) {
        const float th = pm::tanh(pm::div(sc, g.softcap));
        sc = pm::mul(g.softcap, th);
        dcap = pm::fma(-th, th, 1.f);
      }
      const float pv = ok ? pm::exp(pm::sub(sc, lse)) : 0.f;
      P[static_cast<size_t>(r * BC + c)] = pv;
      dS[static_cast<size_t>(r * BC + c)] = pm::mul(pm::mul(pv, pm::sub(dp[static_cast<size_t>(c)], Dr)), dcap);
    }
  }
}

void append(std::vector<EmulatedOutput>& out, const std::string& name, const std::vector<float>& v, bool bf16) {
  EmulatedOutput o;
  o.name = name;
  if (bf16) {
    o.bytes.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = float_to_bf16_bits(v[i]);
      std::memcpy(o.bytes.data() + 2 * i, &h, 2);
    }
  } else {
    o.bytes.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
  }
  out.push_back(std::move(o));
}

}  // namespace

std::vector<EmulatedOutput> emulate_attention(const std::string& variant, const AttentionProblem& p,
                                              const AttentionInputs& in) {
  const auto n = emu::emulated(variant);
  if (!n || n->family != "attention")
    throw invalid_argument("emulate_attention: '" + variant + "' has no CPU emulation");
  p.validate();
  const bool bf16 = n->dtype == "bf16";
  if (p.dtype != (bf16 ? DType::bf16 : DType::f32))
    throw invalid_argument(std::string("emulate_attention: dtype: this variant runs ") + (bf16 ? "bf16" : "fp32"));
  if (p.d != n->params.at("d"))
    throw invalid_argument("emulate_attention: d: head dim " + std::to_string(p.d) + " is not this variant's " +
                           std::to_string(n->params.at("d")));
  if (auto why = p.dim_error()) throw invalid_argument("emulate_attention: " + *why);
  Geo g{p.B,
        p.H,
        p.Hkv,
        p.H / p.Hkv,
        p.Sq,
        p.Sk,
        p.d,
        n->params.at("br"),
        n->params.at("bc"),
        0,
        p.causal,
        float(p.softmax_scale()),
        float(p.softcap),
        p.window < p.Sk ? p.window : 0};
  g.GR = n->params.at("w") * 32 / g.BR;
  const bool partials = n->strategy == Strategy::partials;
  // driver_fma.cuh can_run (bwd_common.cu plan_partials): one key block's
  // partial of one kv-head group, G * Sq * d floats, must fit in mb MiB.
  if (partials && (n->params.at("mb") << 20) / (g.G * p.Sq * p.d * 4) < 1)
    throw invalid_argument(
        "emulate_attention: workspace bound: one key block's dQ partial of a kv-head group exceeds " +
        std::to_string(n->params.at("mb")) + " MiB");
  const int64_t d = g.d, BR = g.BR, BC = g.BC;
  const size_t nq = static_cast<size_t>(p.B * p.H * p.Sq * d), nk = static_cast<size_t>(p.B * p.Hkv * p.Sk * d);
  auto need = [](const char* what, size_t got, size_t want) {
    if (got != want)
      throw invalid_argument(std::string(what) + ": " + std::to_string(got) + " values, the problem needs " +
                             std::to_string(want));
  };
  need("Q", in.Q.size(), nq);
  need("K", in.K.size(), nk);
  need("V", in.V.size(), nk);
  need("dO", in.dO.size(), nq);
  auto store = [bf16](float v) { return bf16 ? bf16_bits_to_float(float_to_bf16_bits(v)) : v; };

  // ------------------------------------------------------------- forward
  std::vector<float> O(nq), lse(static_cast<size_t>(p.B * p.H * p.Sq));
  const int64_t n_qb = ceil_div(p.Sq, BR), n_kb = ceil_div(p.Sk, BC);
  // The unit of a task over (batch, head, query block), as the forward and dq kernels' grids.
  struct QueryBlock {
    int64_t bh, q0, rows;
    const float *K, *V;  // the kv head's keys and values
  };
  auto query_block = [&](int64_t task) {
    const int64_t qb = task % n_qb, bh = task / n_qb;
    const int64_t b = bh / p.H, hkv = (bh % p.H) / g.G;
    const int64_t q0 = qb * BR, kv = (b * p.Hkv + hkv) * p.Sk * d;
    return QueryBlock{bh, q0, std::min(BR, p.Sq - q0), in.K.data() + kv, in.V.data() + kv};
  };
  detail::parallel_for(p.B * p.H * n_qb, 0, [&](int64_t task, int) {
    const auto [bh, q0, rows, K, V] = query_block(task);
    const int64_t n_keys = g.visible_keys(q0, rows), kfirst = g.first_key_block(q0);
    std::vector<float> Ks, Vs, Kt(static_cast<size_t>(d * BC)), s(static_cast<size_t>(BC)), acc(static_cast<size_t>(d)),
        lane(static_cast<size_t>(g.GR));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t qi = q0 + r;
      const float* q = in.Q.data() + (bh * p.Sq + qi) * d;
      float m = kNegInf, l = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t k0 = kfirst; k0 < n_keys; k0 += BC) {
        load_tile(Ks, K + k0 * d, BC, p.Sk - k0, d);
        load_tile(Vs, V + k0 * d, BC, p.Sk - k0, d);
        for (int64_t c = 0; c < BC; ++c)
          for (int64_t k = 0; k < d; ++k) Kt[static_cast<size_t>(k * BC + c)] = Ks[static_cast<size_t>(c * d + k)];
        std::fill(s.begin(), s.end(), 0.f);
        for (int64_t k = 0; k < d; ++k) fma_row(s.data(), q[k], Kt.data() + k * BC, BC);
        for (int64_t c = 0; c < BC; ++c) {
          const int64_t kj = k0 + c;
          const bool ok = kj < p.Sk && g.sees(qi, kj);
          s[static_cast<size_t>(c)] = ok ? g.cap(pm::mul(s[static_cast<size_t>(c)], g.scale)) : kNegInf;
        }
        for (int64_t ln = 0; ln < g.GR; ++ln) {  // lane ln: columns ln + GR t in t order
          float mx = kNegInf;
          for (int64_t c = ln; c < BC; c += g.GR) mx = pm::max(mx, s[static_cast<size_t>(c)]);
          lane[static_cast<size_t>(ln)] = mx;
        }
        const float mx = butterfly(lane, [](float a, float b) { return pm::max(a, b); });
        const float m_new = pm::max(m, mx);
        const float m_use = m_new == kNegInf ? 0.f : m_new;
        const float alpha = pm::exp(pm::sub(m, m_use));
        for (int64_t c = 0; c < BC; ++c)
          s[static_cast<size_t>(c)] = pm::exp(pm::sub(s[static_cast<size_t>(c)], m_use));  // now P
        for (int64_t ln = 0; ln < g.GR; ++ln) {
          float rs = 0.f;
          for (int64_t c = ln; c < BC; c += g.GR) rs = pm::add(rs, s[static_cast<size_t>(c)]);
          lane[static_cast<size_t>(ln)] = rs;
        }
        const float rs = butterfly(lane, [](float a, float b) { return pm::add(a, b); });
        l = pm::fma(l, alpha, rs);
        m = m_new;
        for (auto& a : acc) a = pm::mul(a, alpha);
        for (int64_t c = 0; c < BC; ++c) fma_row(acc.data(), s[static_cast<size_t>(c)], Vs.data() + c * d, d);
      }
      const bool any = l > 0.f;
      const float inv = any ? pm::div(1.f, l) : 0.f;
      float* o = O.data() + (bh * p.Sq + qi) * d;
      for (int64_t j = 0; j < d; ++j) o[j] = store(any ? pm::mul(acc[static_cast<size_t>(j)], inv) : 0.f);
      lse[static_cast<size_t>(bh * p.Sq + qi)] = any ? pm::add(m, pm::log(l)) : kNegInf;
    }
  });

  // ------------------------------------------------------------- backward
  // D = rowsum(dO * O) over the stored O (bwd_common.cu: one warp per row).
  const int64_t nrows = p.B * p.H * p.Sq;
  std::vector<float> Dv(static_cast<size_t>(nrows));
  detail::parallel_for(nrows, 0, [&](int64_t row, int) {
    std::vector<float> lanes(32, 0.f);
    for (int64_t ln = 0; ln < 32; ++ln)
      for (int64_t k = ln; k < d; k += 32)
        lanes[static_cast<size_t>(ln)] = pm::fma(in.dO[static_cast<size_t>(row * d + k)],
                                                 O[static_cast<size_t>(row * d + k)], lanes[static_cast<size_t>(ln)]);
    Dv[static_cast<size_t>(row)] = butterfly(lanes, [](float a, float b) { return pm::add(a, b); });
  });

  // Query-side tiles of (bh, q0): Q, dO [BR][d] zero-padded, lse (-inf) and D (0) padded.
  auto query_side = [&](int64_t bh, int64_t q0, std::vector<float>& Qs, std::vector<float>& dOs,
                        std::vector<float>& lse_s, std::vector<float>& D_s) {
    const int64_t rows = p.Sq - q0;
    load_tile(Qs, in.Q.data() + (bh * p.Sq + q0) * d, BR, rows, d);
    load_tile(dOs, in.dO.data() + (bh * p.Sq + q0) * d, BR, rows, d);
    lse_s.assign(static_cast<size_t>(BR), kNegInf);
    D_s.assign(static_cast<size_t>(BR), 0.f);
    for (int64_t r = 0; r < std::min(BR, rows); ++r) {
      lse_s[static_cast<size_t>(r)] = lse[static_cast<size_t>(bh * p.Sq + q0 + r)];
      D_s[static_cast<size_t>(r)] = Dv[static_cast<size_t>(bh * p.Sq + q0 + r)];
    }
  };

  // dK, dV (and the partials of dQ) per (unit, key block).
  const int64_t units = p.B * p.Hkv;
  std::vector<float> dK(nk), dV(nk);
  std::vector<float> slab;  // partials: [unit][kb][G*Sq*d]
  const int64_t unit_elems = g.G * p.Sq * d;
  if (partials) slab.assign(static_cast<size_t>(units * n_kb * unit_elems), 0.f);
  detail::parallel_for(units * n_kb, 0, [&](int64_t task, int) {
    const int64_t kb = task % n_kb, unit = task / n_kb;
    const int64_t b = unit / p.Hkv, hkv = unit % p.Hkv;
    const int64_t k0 = kb * BC;
    std::vector<float> Ks, Vs, Qs, dOs, lse_s, D_s, P, dS, v(static_cast<size_t>(d));
    load_tile(Ks, in.K.data() + (unit * p.Sk + k0) * d, BC, p.Sk - k0, d);
    load_tile(Vs, in.V.data() + (unit * p.Sk + k0) * d, BC, p.Sk - k0, d);
    std::vector<float> dk(static_cast<size_t>(BC * d), 0.f), dv(static_cast<size_t>(BC * d), 0.f);
    int64_t qb_first = 0;
    if (p.causal) {
      const int64_t qmin = k0 - (p.Sk - p.Sq);
      qb_first = qmin <= 0 ? 0 : (qmin >= p.Sq ? n_qb : qmin / BR);
    }
    int64_t qb_end = n_qb;
    if (g.window > 0) {
      const int64_t kmax = std::min(k0 + BC, p.Sk) - 1;
      const int64_t qmax = kmax - (p.Sk - p.Sq) + g.window - 1;
      qb_end = qmax < 0 ? 0 : std::min(qmax / BR + 1, n_qb);
    }
    float* sl = partials ? slab.data() + (unit * n_kb + kb) * unit_elems : nullptr;  // zero outside the rows written
    for (int64_t hl = 0; hl < g.G; ++hl) {
      const int64_t bh = b * p.H + hkv * g.G + hl;
      for (int64_t qb = qb_first; qb < qb_end; ++qb) {
        const int64_t q0 = qb * BR;
        query_side(bh, q0, Qs, dOs, lse_s, D_s);
        bwd_scores(g, Qs, dOs, Ks, Vs, lse_s, D_s, q0, k0, P, dS);
        for (int64_t c = 0; c < BC; ++c)
          for (int64_t rr = 0; rr < BR; ++rr) {
            fma_row(dv.data() + c * d, P[static_cast<size_t>(rr * BC + c)], dOs.data() + rr * d, d);
            fma_row(dk.data() + c * d, dS[static_cast<size_t>(rr * BC + c)], Qs.data() + rr * d, d);
          }
        if (partials) {
          for (int64_t r = 0; r < BR && q0 + r < p.Sq; ++r) {
            std::fill(v.begin(), v.end(), 0.f);
            for (int64_t cc = 0; cc < BC; ++cc)
              fma_row(v.data(), dS[static_cast<size_t>(r * BC + cc)], Ks.data() + cc * d, d);
            float* dst = sl + (hl * p.Sq + q0 + r) * d;
            for (int64_t j = 0; j < d; ++j) dst[j] = pm::mul(v[static_cast<size_t>(j)], g.scale);
          }
        }
      }
    }
    for (int64_t c = 0; c < BC && k0 + c < p.Sk; ++c)
      for (int64_t j = 0; j < d; ++j) {
        dK[static_cast<size_t>((unit * p.Sk + k0 + c) * d + j)] =
            store(pm::mul(dk[static_cast<size_t>(c * d + j)], g.scale));
        dV[static_cast<size_t>((unit * p.Sk + k0 + c) * d + j)] = store(dv[static_cast<size_t>(c * d + j)]);
      }
  });

  std::vector<float> dQ(nq);
  if (partials) {
    // bwd_common.cu SumPartials: every element summed over all key blocks in
    // order from 0 (across launches through the fp32 accumulator).
    detail::parallel_for(units, 0, [&](int64_t unit, int) {
      for (int64_t e = 0; e < unit_elems; ++e) {
        float s = 0.f;
        for (int64_t kb = 0; kb < n_kb; ++kb)
          s = pm::add(s, slab[static_cast<size_t>((unit * n_kb + kb) * unit_elems + e)]);
        dQ[static_cast<size_t>(unit * unit_elems + e)] = store(s);
      }
    });
  } else {
    // bwd_dq_kernel: each query block walks its key blocks.
    detail::parallel_for(p.B * p.H * n_qb, 0, [&](int64_t task, int) {
      const auto [bh, q0, rows, K, V] = query_block(task);
      std::vector<float> Ks, Vs, Qs, dOs, lse_s, D_s, P, dS, v(static_cast<size_t>(d)),
          acc(static_cast<size_t>(BR * d), 0.f);
      query_side(bh, q0, Qs, dOs, lse_s, D_s);
      const int64_t n_keys = g.visible_keys(q0, rows);
      for (int64_t k0 = g.first_key_block(q0); k0 < n_keys; k0 += BC) {
        load_tile(Ks, K + k0 * d, BC, p.Sk - k0, d);
        load_tile(Vs, V + k0 * d, BC, p.Sk - k0, d);
        bwd_scores(g, Qs, dOs, Ks, Vs, lse_s, D_s, q0, k0, P, dS);
        for (int64_t r = 0; r < rows; ++r) {
          std::fill(v.begin(), v.end(), 0.f);
          for (int64_t cc = 0; cc < BC; ++cc)
            fma_row(v.data(), dS[static_cast<size_t>(r * BC + cc)], Ks.data() + cc * d, d);
          for (int64_t j = 0; j < d; ++j)
            acc[static_cast<size_t>(r * d + j)] =
                pm::add(acc[static_cast<size_t>(r * d + j)], v[static_cast<size_t>(j)]);
        }
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < d; ++j)
          dQ[static_cast<size_t>((bh * p.Sq + q0 + r) * d + j)] =
              store(pm::mul(acc[static_cast<size_t>(r * d + j)], g.scale));
    });
  }

  std::vector<EmulatedOutput> out;
  append(out, "O", O, bf16);
  append(out, "lse", lse, false);
  append(out, "dQ", dQ, bf16);
  append(out, "dK", dK, bf16);
  append(out, "dV", dV, bf16);
  return out;
}

}  // namespace detfuse::reference
