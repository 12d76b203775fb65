// Attention "variants" for the GPU tests of the tuner's attention side that
// do not depend on the attention kernels: each launch synchronises, reads its
// inputs back, computes the float64 reference on the host and writes the
// result to the outputs (rounded to the dtype). "exact" is correct and
// deterministic; "wrong" scales O by 1.1 (incorrect); "noisy" changes one dQ
// value on every other launch by 2^-7 relative (run-to-run digests differ;
// correct within bf16's tolerance); "fwd" is "exact" whose can_run refuses the
// backward (a forward-only kernel). Registered only in these tests.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/common/host_bf16.h"
#include "kernels/registry.h"
#include "reference/attention_ref.h"

namespace detfuse::testing {

namespace host_attention {

inline std::vector<float> read(const void* p, size_t n, DType t) {
  std::vector<float> out(n);
  if (t == DType::f32) {
    DETFUSE_CUDA_CHECK(cudaMemcpy(out.data(), p, n * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> b(n);
    DETFUSE_CUDA_CHECK(cudaMemcpy(b.data(), p, n * 2, cudaMemcpyDeviceToHost));
    out = from_bf16_bits(b);
  }
  return out;
}

inline void write(void* p, const std::vector<double>& v, DType t) {
  std::vector<float> f(v.begin(), v.end());
  if (t == DType::f32) {
    DETFUSE_CUDA_CHECK(cudaMemcpy(p, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
  } else {
    const std::vector<uint16_t> b = to_bf16_bits(f);
    DETFUSE_CUDA_CHECK(cudaMemcpy(p, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  }
}

}  // namespace host_attention

inline AttentionVariant host_attention_variant(const std::string& how, DType dtype) {
  AttentionVariant v;
  v.desc.family = Family::attention;
  v.desc.dtype = dtype;
  v.desc.engine = "host";
  v.desc.strategy = how == "noisy" ? "atomic" : "owning";
  v.desc.params = {{how == "exact" ? "ex" : how == "wrong" ? "wr" : how == "fwd" ? "fw" : "no", 1}};
  v.desc.name = VariantDesc::canonical_name(Family::attention, dtype, "host", v.desc.strategy, v.desc.params);
  v.desc.deterministic = how != "noisy";
  v.desc.summary = "host float64 reference written to the outputs (" + how + "), tuner GPU tests only";
  v.can_run = [how](const AttentionProblem& p, AttentionMode m, const DeviceInfo&) -> std::optional<std::string> {
    if (double(p.B) * p.H * p.Sq * p.Sk * p.d > 5e9) return "too large for the host reference";
    if (how == "fwd" && m == AttentionMode::backward) return "forward only (test)";
    return std::nullopt;
  };
  v.workspace_bytes = [](const AttentionProblem&, AttentionMode) { return size_t(256); };
  v.launch = [how](const AttentionProblem& p, AttentionMode m, const AttentionArgs& a, cudaStream_t) {
    static std::atomic<int> launches{0};
    if (!a.workspace || a.workspace_size < 256) throw invalid_argument("workspace_size: too small");
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    const size_t nq = size_t(p.B * p.H * p.Sq * p.d), nk = size_t(p.B * p.Hkv * p.Sk * p.d);
    const auto Q = host_attention::read(a.Q, nq, p.dtype), K = host_attention::read(a.K, nk, p.dtype),
               V = host_attention::read(a.V, nk, p.dtype);
    if (m == AttentionMode::forward) {
      auto r = reference::attention_reference<float>(p, Q.data(), K.data(), V.data(), nullptr, 2);
      if (how == "wrong")
        for (double& x : r.O) x *= 1.1;
      host_attention::write(a.O, r.O, p.dtype);
      std::vector<float> lse(r.lse.begin(), r.lse.end());
      DETFUSE_CUDA_CHECK(cudaMemcpy(a.lse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
      return;
    }
    const auto dO = host_attention::read(a.dO, nq, p.dtype);
    auto r = reference::attention_reference<float>(p, Q.data(), K.data(), V.data(), dO.data(), 2);
    if (how == "noisy" && (launches++ % 2)) {
      size_t big = 0;  // the largest |dQ| (never 0), changed by at least one bf16 ulp
      for (size_t i = 1; i < r.dQ.size(); ++i)
        if (std::fabs(r.dQ[i]) > std::fabs(r.dQ[big])) big = i;
      r.dQ[big] *= 1.0 + std::ldexp(1.0, -7);
    }
    host_attention::write(a.dQ, r.dQ, p.dtype);
    host_attention::write(a.dK, r.dK, p.dtype);
    host_attention::write(a.dV, r.dV, p.dtype);
  };
  return v;
}

// exact, wrong and noisy for bf16; exact for fp32.
inline Registry host_attention_registry() {
  Registry r;
  r.add(host_attention_variant("exact", DType::bf16));
  r.add(host_attention_variant("wrong", DType::bf16));
  r.add(host_attention_variant("noisy", DType::bf16));
  r.add(host_attention_variant("fwd", DType::bf16));
  r.add(host_attention_variant("exact", DType::f32));
  return r;
}

}  // namespace detfuse::testing
