// Host side of the `fma` attention engine: grid shapes, the backward's
// strategy passes (owning / atomic / partials) and registration of one block
// configuration for head dims 64 and 128. Included by one instantiation file
// per (dtype, block configuration).
#pragma once

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention/bwd_common.h"
#include "kernels/attention/engine_fma.cuh"
#include "kernels/attention/variants.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/strategy.h"
#include "kernels/registry.h"

namespace detfuse::attention::fma {

template <class T>
struct DtypeOf;
template <>
struct DtypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DtypeOf<__nv_bfloat16> {
  static constexpr DType value = DType::bf16;
};

using detfuse::Strategy;  // kernels/common/strategy.h

template <class T, class C>
struct Driver {
  static constexpr DType dtype = DtypeOf<T>::value;

  static Params params(const AttentionProblem& pr, const AttentionArgs& a) {
    Params p{};
    p.Q = a.Q;
    p.K = a.K;
    p.V = a.V;
    p.dO = a.dO;
    p.lse_in = a.lse_in;
    p.O = a.O;
    p.lse = a.lse;
    p.dQ = a.dQ;
    p.dK = a.dK;
    p.dV = a.dV;
    p.B = pr.B;
    p.H = pr.H;
    p.Hkv = pr.Hkv;
    p.Sq = pr.Sq;
    p.Sk = pr.Sk;
    p.scale = float(pr.softmax_scale());
    p.causal = pr.causal;
    p.softcap = float(pr.softcap);
    p.window = pr.window < pr.Sk ? pr.window : 0;  // >= Sk hides no key (problem.h)
    return p;
  }

  static std::optional<std::string> can_run(const AttentionProblem& p, AttentionMode m, const DeviceInfo& dev,
                                            Strategy st, int mb) {
    if (p.dtype != dtype) return std::string("dtype: this variant runs ") + detfuse::to_string(dtype);
    if (p.d != C::D)
      return "d: head dim " + std::to_string(p.d) + " is not this variant's " + std::to_string(C::D) +
             " (the attention engines are built for d = 64 and 128)";
    if (auto e = p.dim_error()) return e;
    const int64_t n_qb = (p.Sq + C::BR - 1) / C::BR, n_kb = (p.Sk + C::BC - 1) / C::BC;
    if (n_qb * p.B * p.H > INT_MAX || n_kb * p.B * p.Hkv > INT_MAX)
      return std::string("grid: more than 2^31-1 blocks");
    const size_t smem = m == AttentionMode::forward ? C::fwd_smem : C::bwd_smem;
    if (dev.max_smem_per_block_optin > 0 && size_t(dev.max_smem_per_block_optin) < smem)
      return "shared memory: needs " + std::to_string(smem) + " bytes per block, the device allows " +
             std::to_string(dev.max_smem_per_block_optin);
    if (m == AttentionMode::backward && st == Strategy::partials && !plan_partials(p, C::BC, size_t(mb) << 20))
      return "workspace bound: one key block's dQ partial of a kv-head group (" +
             std::to_string((p.H / p.Hkv) * p.Sq * p.d * 4) + " bytes) exceeds " + std::to_string(mb) + " MiB";
    return std::nullopt;
  }

  static size_t workspace_bytes(const AttentionProblem& p, AttentionMode m, Strategy st, int mb) {
    if (m == AttentionMode::forward) return 0;
    size_t n = d_bytes(p);
    if (st == Strategy::atomic) n += dq_acc_bytes(p);
    if (st == Strategy::partials) {
      auto pl = plan_partials(p, C::BC, size_t(mb) << 20);
      if (pl) n += pl->slab_bytes + pl->acc_bytes;
    }
    return n;
  }

  static void forward(const AttentionProblem& pr, const AttentionArgs& a, cudaStream_t s) {
    Params p = params(pr, a);
    p.n_blocks = (pr.Sq + C::BR - 1) / C::BR;
    auto kern = fwd_kernel<T, C>;
    DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::fwd_smem)));
    kern<<<unsigned(p.n_blocks * pr.B * pr.H), C::NT, C::fwd_smem, s>>>(p);
    DETFUSE_CUDA_CHECK(cudaGetLastError());
  }

  template <DqMode M>
  static void launch_kv(const Params& p, int64_t kb_begin, int64_t kb_count, int64_t unit_begin, int64_t units,
                        cudaStream_t s) {
    Params q = p;
    q.kb_begin = kb_begin;
    q.kb_count = kb_count;
    q.unit_begin = unit_begin;
    auto kern = bwd_kv_kernel<T, C, M>;
    DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::bwd_smem)));
    kern<<<unsigned(kb_count * units), C::NT, C::bwd_smem, s>>>(q);
    DETFUSE_CUDA_CHECK(cudaGetLastError());
  }

  static void backward(const AttentionProblem& pr, const AttentionArgs& a, Strategy st, int mb, cudaStream_t s) {
    Params p = params(pr, a);
    char* ws = static_cast<char*>(a.workspace);
    float* D = reinterpret_cast<float*>(ws);
    char* rest = ws + d_bytes(pr);
    p.Dvec = D;
    launch_rowsum_do_o(dtype, a.dO, a.O_in, D, pr.B * pr.H * pr.Sq, C::D, s);
    const int64_t n_kb = (pr.Sk + C::BC - 1) / C::BC, units = pr.B * pr.Hkv;
    if (st == Strategy::owning) {
      launch_kv<DqMode::none>(p, 0, n_kb, 0, units, s);
      p.n_blocks = (pr.Sq + C::BR - 1) / C::BR;
      auto kern = bwd_dq_kernel<T, C>;
      DETFUSE_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::bwd_smem)));
      kern<<<unsigned(p.n_blocks * pr.B * pr.H), C::NT, C::bwd_smem, s>>>(p);
      DETFUSE_CUDA_CHECK(cudaGetLastError());
    } else if (st == Strategy::atomic) {
      p.dq_acc = reinterpret_cast<float*>(rest);
      const int64_t n = pr.B * pr.H * pr.Sq * pr.d;
      DETFUSE_CUDA_CHECK(cudaMemsetAsync(p.dq_acc, 0, size_t(n) * sizeof(float), s));
      launch_kv<DqMode::atomic>(p, 0, n_kb, 0, units, s);
      launch_convert_f32(dtype, p.dq_acc, a.dQ, n, s);
    } else {
      const PartialsPlan pl = *plan_partials(pr, C::BC, size_t(mb) << 20);
      p.slab = reinterpret_cast<float*>(rest);
      float* acc = reinterpret_cast<float*>(rest + pl.slab_bytes);
      const int64_t unit_elems = (pr.H / pr.Hkv) * pr.Sq * pr.d;
      for (int64_t u0 = 0; u0 < units; u0 += pl.uc) {
        const int64_t uc = std::min(pl.uc, units - u0);
        for (int64_t ri = 0; ri < pl.ranges; ++ri) {
          const int64_t kb0 = ri * pl.kc, kc = std::min(pl.kc, n_kb - kb0);
          launch_kv<DqMode::partials>(p, kb0, kc, u0, uc, s);
          launch_partials_reduce(dtype, p.slab, acc, a.dQ, u0, uc, kc, unit_elems, ri == 0, ri == pl.ranges - 1, s);
        }
      }
    }
  }
};

// Registers owning, partials (slab bound partials_mib MiB) and atomic for head
// dims 64 and 128 of the block configuration (BR, BC, WARPS). Tests register a
// tiny bound in a registry of their own to exercise the chunked partials path.
template <class T, int BR, int BC, int WARPS>
void register_config(Registry& r, int partials_mib = kPartialsMiB) {
  auto add_d = [&r, partials_mib]<int D>() {
    using C = FmaConfig<BR, BC, WARPS, D>;
    using Drv = Driver<T, C>;
    for (Strategy st : {Strategy::owning, Strategy::partials, Strategy::atomic}) {
      const int mb = st == Strategy::partials ? partials_mib : 0;
      AttentionVariant v;
      v.desc.family = Family::attention;
      v.desc.dtype = Drv::dtype;
      v.desc.engine = "fma";
      v.desc.strategy = to_string(st);
      v.desc.params = {{"br", BR}, {"bc", BC}, {"w", WARPS}, {"d", D}};
      if (st == Strategy::partials) v.desc.params.push_back({"mb", mb});
      v.desc.name =
          VariantDesc::canonical_name(v.desc.family, v.desc.dtype, v.desc.engine, v.desc.strategy, v.desc.params);
      v.desc.deterministic = st != Strategy::atomic;
      v.desc.summary = "CUDA-core fp32 tiles " + std::to_string(BR) + "x" + std::to_string(BC) + ", " +
                       std::to_string(WARPS) + " warps, d=" + std::to_string(D) + "; dQ " +
                       (st == Strategy::owning  ? "by a query-block grid walking the key blocks"
                        : st == Strategy::atomic ? "by fp32 atomics from the key blocks"
                                                 : "partials per key block (" + std::to_string(mb) +
                                                       " MiB slab) summed in fixed order");
      v.can_run = [st, mb](const AttentionProblem& p, AttentionMode m, const DeviceInfo& d) {
        return Drv::can_run(p, m, d, st, mb);
      };
      v.workspace_bytes = [st, mb](const AttentionProblem& p, AttentionMode m) {
        return Drv::workspace_bytes(p, m, st, mb);
      };
      v.launch = [st, mb](const AttentionProblem& p, AttentionMode m, const AttentionArgs& a, cudaStream_t s) {
        if (m == AttentionMode::forward)
          Drv::forward(p, a, s);
        else
          Drv::backward(p, a, st, mb, s);
      };
      r.add(std::move(v));
    }
  };
  add_d.template operator()<64>();
  add_d.template operator()<128>();
}

}  // namespace detfuse::attention::fma
