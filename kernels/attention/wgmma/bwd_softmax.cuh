// The backward's probabilities (FlashAttention-3's softmax.h role for the
// backward, read to learn, not copied): the softcap's factor on P^T.
// P^T (kv kernel) and P (dq kernel) are recomputed from the scores and the
// forward's LSE: softcap (detail::softcap_raw) before P, P = exp2(scale log2 e
// S - LSE log2 e), the mask (keys >= Sk, causal, window) and, once P has been
// used (dV, in bf16), P times 1 - t^2 with t = tanh recovered from P itself,
// so dS = (P (1 - t^2)) (dP - D) comes out of the unchanged dS code.
// The mask is NOT one function here: written as one (a BwdKvMask::apply like
// the forward's FwdMask, inlined), it changed the kv kernels' PTX and SASS
// (a bool phi, register numbering, 8 to 66 more instructions), and the dq
// kernel's as well, so it stays written out where it was on main: the kv
// kernel's loop (attention_wgmma_bwd.cuh), consume_pds (bwd_mainloop_kv.cuh)
// and the dq kernel (README "Structure: the backward in role files").
// Value v of a thread's 64 x BR fragment is key key0 + 8 ((v / 2) % 2) and
// query q0 + 8 (v / 4) + col_lane + v % 2 (attention_wgmma.cuh).
#pragma once

#include "kernels/attention/wgmma/wgmma_helpers.cuh"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

namespace detfuse::attention::wg {

using namespace cute;

template <int BR>
struct BwdKvSoftmax {
  // Softcap: P^T (used in bf16 for dV already) times 1 - t^2, t recovered
  // from P^T and the LSE (lse2: the query block's BR values in log2 units).
  template <class Params, class TS>
  __device__ __forceinline__ static void softcap_grad(const Params& p, TS& tSrS, const float* lse2, int col_lane) {
    if (p.softcap) {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < BR / 2; ++v)
        tSrS(v) *= detail::softcap_grad(tSrS(v), lse2[8 * (v / 4) + col_lane + (v % 2)], p.cap_t);
    }
  }
};

}  // namespace detfuse::attention::wg
