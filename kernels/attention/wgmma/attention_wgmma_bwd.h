// Hopper (sm_90a) attention backward: configurations and launchers, without
// CUTLASS. The kernels are in attention_wgmma_bwd.cuh (built only in the
// variant translation units of this folder, with DETFUSE_ATTN_WGMMA_IMPL).
//
// Two kernels:
//   kv kernel  CTA per (key block of BC = 128 keys, kv head, batch); two
//              consumer warpgroups of 64 keys each hold dK and dV in fp32
//              registers over every query block of every query head of the GQA
//              group, walked in a fixed order (heads, then query blocks), so dK
//              and dV are deterministic without atomics or workspace.
//              DQ_ATOMIC: it also forms dS K per query block (dS through shared
//              memory) and adds it with fp32 atomics into the dQ accumulator.
//   dq kernel  (the `owning` strategy) CTA per (query block of 128 rows, head,
//              batch); recomputes S and dP per key block in key order and
//              accumulates dQ = scale * sum_n dS_n K_n in registers.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/registry.h"

namespace detfuse::attention::wg {

// kv kernel: BR queries per pipeline stage (Q and dO tiles), BC = 128 keys per
// CTA (64 per consumer warpgroup), STAGES-deep Q/dO rings.
template <int D_, int BR_, int STAGES_, bool DQ_ATOMIC_>
struct BwdKvConfig {
  static constexpr int D = D_, BR = BR_, BC = 128, STAGES = STAGES_;
  static constexpr bool DQ_ATOMIC = DQ_ATOMIC_;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BR % 16 == 0 && BR >= 16 && BR <= 128, "BR: the wgmma N of K Q^T and the K of P^T dO (16s)");
  static_assert(!DQ_ATOMIC || BR == 64, "atomic dQ: dS K is one wgmma M = 64 tile of queries");
  static_assert(STAGES >= 2, "at least a double-buffered Q/dO ring");
  // K, V (BC x D), STAGES Q and dO tiles (BR x D), dS (BR x BC) when atomic; bf16.
  static constexpr int kSmemTiles = 2 * (2 * BC * D + 2 * STAGES * BR * D + (DQ_ATOMIC ? BR * BC : 0));
  static_assert(kSmemTiles + 1024 <= 227 * 1024, "shared memory above the 227 KB of an sm_90 block");
};

// dq kernel (owning): BR = 128 query rows (64 per consumer warpgroup), BC keys
// per K/V tile, STAGES-deep K/V rings.
template <int D_, int BC_, int STAGES_>
struct BwdDqConfig {
  static constexpr int D = D_, BR = 128, BC = BC_, STAGES = STAGES_;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BC % 16 == 0 && BC >= 16 && BC <= 256, "BC: the wgmma N of Q K^T and the K of dS K");
  static_assert(STAGES >= 2, "at least a double-buffered K/V ring");
  static constexpr int kSmemTiles = 2 * (2 * BR * D + 2 * STAGES * BC * D);
  static_assert(kSmemTiles + 1024 <= 227 * 1024, "shared memory above the 227 KB of an sm_90 block");
};

// The registered configurations (one .cu each).
using KvD128Br64St2 = BwdKvConfig<128, 64, 2, false>;
using KvD128Br64St3 = BwdKvConfig<128, 64, 3, false>;
using KvD128Br64St2A = BwdKvConfig<128, 64, 2, true>;
using KvD128Br64St3A = BwdKvConfig<128, 64, 3, true>;
using KvD64Br64St2 = BwdKvConfig<64, 64, 2, false>;
using KvD64Br128St2 = BwdKvConfig<64, 128, 2, false>;
using KvD64Br64St2A = BwdKvConfig<64, 64, 2, true>;
using KvD64Br64St4A = BwdKvConfig<64, 64, 4, true>;
using DqD128Bc64St2 = BwdDqConfig<128, 64, 2>;
using DqD64Bc128St2 = BwdDqConfig<64, 128, 2>;

template <class Cfg>
size_t bwd_kv_smem_bytes();
template <class Cfg>
size_t bwd_dq_smem_bytes();

// Enqueues the kv kernel: writes args.dK, args.dV (bf16) from Q, K, V, dO,
// lse_in and Dvec (rowsum(dO * O), fp32 [B*H*Sq]); with DQ_ATOMIC also adds
// scale * dS K into dq_acc (fp32 [B, H, Sq, d], zeroed by the caller).
template <class Cfg>
void launch_bwd_kv(const AttentionProblem& p, const AttentionArgs& args, const float* Dvec, float* dq_acc,
                   cudaStream_t stream);
// Enqueues the dq kernel: writes args.dQ (bf16).
template <class Cfg>
void launch_bwd_dq(const AttentionProblem& p, const AttentionArgs& args, const float* Dvec, cudaStream_t stream);

#define DETFUSE_ATTN_WGMMA_KV_INSTANCES(PREFIX, CFG)                                                      \
  PREFIX template size_t bwd_kv_smem_bytes<CFG>();                                                        \
  PREFIX template void launch_bwd_kv<CFG>(const AttentionProblem&, const AttentionArgs&, const float*, float*, \
                                          cudaStream_t);
#define DETFUSE_ATTN_WGMMA_DQ_INSTANCES(PREFIX, CFG) \
  PREFIX template size_t bwd_dq_smem_bytes<CFG>();   \
  PREFIX template void launch_bwd_dq<CFG>(const AttentionProblem&, const AttentionArgs&, const float*, cudaStream_t);

DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St3)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St2A)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD128Br64St3A)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br128St2)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St2A)
DETFUSE_ATTN_WGMMA_KV_INSTANCES(extern, KvD64Br64St4A)
DETFUSE_ATTN_WGMMA_DQ_INSTANCES(extern, DqD128Bc64St2)
DETFUSE_ATTN_WGMMA_DQ_INSTANCES(extern, DqD64Bc128St2)

}  // namespace detfuse::attention::wg
