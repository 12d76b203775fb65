#include "kernels/attention/attention.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/run_variant.h"

namespace detfuse::attention {

const char* to_string(AttentionMode m) { return m == AttentionMode::forward ? "forward" : "backward"; }

namespace {
void require_ptr(const void* p, const char* name, AttentionMode mode) {
  if (!p) throw invalid_argument(std::string(name) + ": null pointer (required for " + to_string(mode) + ")");
}
}  // namespace

void validate_call(const AttentionProblem& p, AttentionMode mode, const AttentionArgs& a) {
  p.validate();
  require_ptr(a.Q, "Q", mode);
  require_ptr(a.K, "K", mode);
  require_ptr(a.V, "V", mode);
  if (mode == AttentionMode::forward) {
    require_ptr(a.O, "O", mode);
    require_ptr(a.lse, "lse", mode);
  } else {
    require_ptr(a.dO, "dO", mode);
    require_ptr(a.O_in, "O_in", mode);
    require_ptr(a.lse_in, "lse_in", mode);
    require_ptr(a.dQ, "dQ", mode);
    require_ptr(a.dK, "dK", mode);
    require_ptr(a.dV, "dV", mode);
  }
  if (!a.workspace && a.workspace_size > 0)
    throw invalid_argument("workspace: null pointer with workspace_size " + std::to_string(a.workspace_size));
}

void run(const AttentionVariant& v, const AttentionProblem& p, AttentionMode mode, const AttentionArgs& args,
         cudaStream_t stream) {
  validate_call(p, mode, args);
  if (v.desc.dtype != p.dtype)
    throw invalid_argument("dtype: variant " + v.desc.name + " runs " + detfuse::to_string(v.desc.dtype) +
                           ", the problem is " + detfuse::to_string(p.dtype));
  const size_t need = v.workspace_bytes(p, mode);
  if (args.workspace && args.workspace_size < need)
    throw invalid_argument("workspace_size: " + std::to_string(args.workspace_size) + " bytes given, variant " +
                           v.desc.name + " needs " + std::to_string(need));
  launch_checked(v, p, mode, args, stream);
}

const AttentionVariant& heuristic_variant(const AttentionProblem& p, AttentionMode mode, const DeviceInfo& dev) {
  // Before any tuning: the fastest deterministic variant measured for the head
  // dim, causal or not, and GQA or not, on the Hopper engine where it can run
  // (bf16, sm_90, built with wgmma); else the exact fma engine with 64x64
  // tiles; else the first deterministic variant that can run, else any.
  // Measured on the H200 at B=4, H=32, Sq=Sk=4096 (experiments/
  // attention_bench_log.md, 2026-12-02, sessions 7 and 8): forward: the
  // persistent forward (`ps1`) 573.2 TFLOP/s at d128 (causal 489.0) against
  // 549.7 (481.1), d64 430.5 against 414.4; session 8, beside FA4 in one
  // Python process: `ps1 rd1 ot1` (softmax reductions in four chains, O by a
  // TMA store) 567.7 at d128 (causal 476.6) against `ps1` 551.6 (468.6), d64
  // causal 285.2 against 257.4 (d64 non-causal not measured: `ps1` stayed;
  // session 16: `br192 ps1 rd1`, three consumer warpgroups, 1.119 ms against
  // `ps1`'s 1.262 at d64 non-causal, so br192 there; causal stays; session
  // 20: FlashAttention-4's launch, br192 rd1 ot1 not persistent, 0.692 / 0.695
  // ms at 4,32,32,4096,64 causal against `br128 ps1 rd1 ot1`'s 0.704 / 0.703,
  // `detfuse bench`, 5 repeats, both orders in one machine; so that at d64
  // causal; its ping-pong ring 0.700 / 0.691, at d128 no launch of FA4's
  // better than `ps1 rd1 ot1`);
  // backward (fwd+bwd TFLOP/s): `ordered` pds2 443.4 at d128 (causal 371.3)
  // against owning 411.2 (364.7), d64 304.7 (causal 249.5) against owning
  // 283.4 (248.9); session 8: `ordered` pds3 (128 queries a step) at d64
  // causal 263.3 against pds2 250.0; session 11, non-causal: pds3 331.4
  // against pds2 303.5 (one run of 3 repeats each), so pds3 at d64 either way;
  // session 9: d128 `ordered` sp1 (pds2 with dQ before dK, dK in flight into
  // the next query block; the same bits) 451.0 (causal 377.4) against pds2
  // 447.3 (373.5), one run of 3 repeats each: within the noise, never slower;
  // session 12, `spt1` (FlashAttention-3's order of the ordered dQ adds:
  // causal walks ascending from the diagonal with the diagonal key block
  // adding first, non-causal the shifted cyclic walk; other bits, one digest):
  // d64 pds3 spt1 356.6 (causal 305.8) against pds3 331.7 (262.4), d128 sp1
  // spt1 456.5 (402.1) against sp1 450.9 (374.7), so spt1 at both;
  // with GQA at d128, sp1 spt1 387.0 against owning 367.0 and sp1 306.7
  // (4,32,8,4096 causal, 3 repeats, one call, df5b3d6; 264 MiB of fp32 dQ
  // accumulator against owning's 2), so spt1 there too; d64 with GQA not
  // measured with spt1: owning. Before spt1:
  // with GQA the ordered dQ chain serialises a kv head's query heads
  // (4,32,8 causal, pds1: 282.1 against owning 352.4), so owning there.
  // Session 14, `ew1` / `ew2` (FlashAttention-4's elementwise code: exp2 over
  // the tile without a branch per element, the mask a pass of its own, D read
  // ahead; ew2 also issues dQ before dK and hands it over while dK runs; the
  // base's bits): bench, 3 repeats, one call (build 7437acc): d64 pds3 ew2 spt1
  // 410.8 (causal 352.5) against pds3 spt1 356.1 (307.6), ew1 404.1 (350.9);
  // d128 sp1 ew1 spt1 504.8 (435.6) against sp1 spt1 463.5 (403.6); so ew2 at
  // d64 and ew1 at d128 (with GQA too: 388.7 against 375.8 interleaved beside
  // FA4, 4,32,8,4096 causal). Session 15, `pb1` (ew2 pds3 d64 with P^T as dV's
  // wgmma A fragment in registers right after the exp and dS^T from the bf16
  // P^T; other bits than ew2): one Python process beside FA4, 6 interleaved
  // passes (build 58d73ac), d64 causal 348.3 against ew2's 335.9, non-causal
  // 415.9 against 397.3; bench 385.5 / 434.2 against 372.8 / 419.5. So pb1 at
  // d64. Softcap: pb1's softcap path (wrong in session 15, right since
  // session 16: the factor taken inside the dS^T loop) measured 213.1 against
  // ew2's 234.0 causal, so ew2 with softcap. Session 21, `pb3` (pb1 with the
  // descriptors in uniform registers, the dQ part scaled by the convert pass,
  // the A fragments as words, and FlashAttention-4's step order: dS^T from the
  // fp32 P^T, dV issued once dS^T is formed): bench, 3 repeats, both orders
  // in one call (experiments/device/s21.sh), fwd+bwd ms at 4,32,32,4096,64:
  // causal 2.473 / 2.456 against pb1's 2.523 / 2.525 (pb2, the same without
  // the order, 2.488 / 2.469), non-causal 4.379 / 4.376 against 4.518 /
  // 4.519 (pb2 4.406 / 4.406). So pb3 at d64. Session 22, `pb5` (pb3 with the
  // exp in the dS^T loop after the dP^T wait, the same bits): same bench
  // (experiments/device/s22-pb5.sh), causal 2.402 / 2.379 against pb3's 2.468 /
  // 2.472, non-causal 4.275 / 4.275 against 4.410 / 4.378. So pb5 at d64.
  const Registry& r = builtin_registry();
  std::vector<std::string> preferred;
  if (p.dtype == DType::bf16) {
    const bool gqa = p.Hkv > 0 && p.Hkv != p.H;
    const std::string d = std::to_string(p.d);
    // Session 24 (branch s24-ov2): ov2, the same forward with its loop rotated so that ptxas keeps the
    // softmax under the warpgroup's own P V (the same bits), `detfuse bench`, 5 repeats, both orders,
    // forward ms: 4,32,32,4096,128 1.815 / 1.812 against 1.868 / 1.883, causal 1.007 / 1.021 against
    // 1.044 / 1.041, 4,32,8,4096 1.810 / 1.795 against 1.859 / 1.853, 1,16,16,8192 causal 0.441 /
    // 0.438 against 0.471 / 0.446; at d64 (br128 only) slower, so d128 only. Session 25 (the same
    // comparison, build of e22dc83): 1.821 / 1.823 against 1.876 / 1.896, causal 1.018 / 1.034 against
    // 1.038 / 1.054, GQA 1.807 / 1.811 against 1.865 / 1.874; beside FA4 deterministic (two runs, one
    // process) the forward+backward at 4,32,32,4096,128 went 0.945x -> 0.954x (attention_bench_log.md).
    // Session 31 (H100 80GB HBM3; code of e7f87b6), d64 causal: the persistent br192 forwards ahead of the
    // non-persistent one that session 20 picked on the H200. `detfuse bench`, 5 repeats, both orders, two
    // rounds in one call (experiments/device/s31.sh): ov2 ps1 rd1 ls1 0.669 / 0.672 / 0.659 / 0.667 ms, ov1
    // ps1 rd1 0.683 / 0.681 / 0.675 / 0.662, against br192 rd1 ot1's 0.689 / 0.701 / 0.685 / 0.696 (ncu:
    // 0.646 against 0.689 ms, tensor pipe 53% against 49% active, though it reads 306 MB from DRAM against
    // 201); beside FA4 in one Python process (three runs, interleaved, fwd+bwd with the heuristic's
    // backward) 383.3 / 400.0 / 390.7 TFLOP/s against 379.8 / 393.3 / 380.8. On the H200 (session 25, on
    // the code before 29ba197) the persistent ov1 ps1 rd1 was 7% slower (0.736 against 0.688 ms), and no
    // H200 has been lent since; so ls1 ps1 on H100s only. The two give the same O and LSE bits
    // (HeuristicD64CausalForwardsBitsEqual), so the gradients do not depend on which GPU chose.
    // Session 39 (H100 80GB HBM3, the persistent order by search, fwd_causal_order): ls1 ps1 0.618-0.653 ms
    // against br192 rd1 ot1's 0.684-0.705 in the same calls; still no H200 to say whether it wins there.
    // Session 40 (H100): br192 rd1 ot1's tiles by groups of heads (fwd_lpt_group) 0.679-0.687 against 0.700-0.708
    // head after head; ls1 ps1 0.630-0.669 beside it: no change here.
    // Session 42 (an H200 at last, main at c09b610; experiments/results/h200-2026-12-07/s42): ls1 ps1 wins there
    // too. `detfuse bench`, both orders: ls1 ps1 0.659 / 0.646 ms against br192 rd1 ot1's 0.705 / 0.700; beside
    // FA4 deterministic (three one-process runs) row 4's fwd+bwd 1.001 / 0.980 / 0.970 of FA4 with it against
    // 0.978 / 0.951 / 0.934 with br192 rd1 ot1. So ls1 ps1 on every Hopper GPU.
    if (mode == AttentionMode::forward)
      preferred.push_back(p.d == 128   ? "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128"
                          : !p.causal ? "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_d64"
                                      : "attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64");
    // Session 27 (H100 80GB HBM3, `detfuse bench`, 3 repeats, both orders in one call, fwd+bwd ms):
    // d64 with GQA, which took owning here (never measured against spt1), 4,32,8,4096,64: pb5 spt1
    // 2.413 / 2.386 against owning 3.852 / 3.814 causal, 4.065 / 4.041 against 6.641 / 6.700
    // non-causal; so pb5 at d64 with GQA too (pds2 spt1, the fallback where a block has less shared
    // memory, not measured with GQA). Session 28 (H100 80GB HBM3, same bench): with softcap 50 at
    // 4,32,8,4096,64 causal, ew2 spt1 4.238 / 4.234 against owning 6.152 / 6.150 (31% less), so ew2
    // there too, non-causal included (not measured with softcap; without it pb5 took 39% less there).
    if (p.d == 64 && p.softcap <= 0)
      preferred.push_back("attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64");
    // Session 27 (same bench): hs2 on the pds4 pb5 step (BwdKvHsConfig) against sp1 ew1 hs2 at the
    // causal GQA rows: 4,32,8,4096 4.187 / 4.188 / 4.185 / 4.190 against 4.316 / 4.320 / 4.301 /
    // 4.345, 2,32,8,8192 7.557 / 7.547 / 7.564 / 7.559 against 7.830 / 7.969 / 7.894 / 7.900 (unsplit
    // pds4 pb5 4.54 / 8.38); non-causal GQA unsplit pds4 stays (6.776 / 6.815 against hs2's 6.952 /
    // 6.960). Softcap: sp1 ew1 hs2 (pds4 with softcap not measured).
    if (p.d == 128 && gqa && p.causal && p.softcap <= 0)
      preferred.push_back("attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_hs2_d128");
    // Session 18 (build c2f7908, one process beside FA4 deterministic, interleaved fwd+bwd
    // TFLOP/s): causal GQA at d128, hs2 (a kv head's query heads over 2 CTAs per key block)
    // 450.7 against 420.7 (4,32,8,4096) and 487.5 against 424.7 (2,32,8,8192); non-causal
    // 507.1 against 514.0, so causal only (its can_run refuses an odd H / Hkv).
    if (p.d == 128 && gqa && p.causal)
      preferred.push_back("attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_hs2_d128");
    // Session 19 (build 5bb0ec6, `detfuse bench`, 3 repeats, both orders in one call, fwd+bwd ms):
    // pb1 at d128 (ew2 pds2, FlashAttention-4's d128 step) against sp1 ew1 spt1: 4,32,32,4096
    // 7.411 / 7.405 against 7.518 / 7.457, causal 4.193 / 4.183 against 4.210 / 4.219, 4,32,8,4096
    // 7.226 / 7.152 against 7.324 / 7.261, 1,16,16,8192 causal 2.027 / 2.027 against 2.060 /
    // 2.072; causal GQA 4.409 / 4.394, behind hs2's 4.13. Softcap not measured on it: sp1 ew1 there
    // (d64's pb1 was 9% slower with softcap).
    // Session 21: pb3 at d128 (pb1's base, FlashAttention-4's step order, descriptors in uniform
    // registers, dQ scaled by the convert pass) against pb1, same bench, both orders: 4,32,32,4096
    // 7.202 / 7.252 against 7.440 / 7.437, causal 4.070 / 4.065 against 4.149 / 4.153, 4,32,8,4096
    // 7.148 / 7.143 against 7.250 / 7.251, 1,16,16,8192 causal 1.973 / 1.971 against 2.014 / 2.018.
    // Session 24: pds4 (80 queries a step, FlashAttention-3/4's non-causal d128 tile, dQ as
    // dQ^T = K^T dS^T; pb5's step) against pb3, same bench, both orders (experiments/device/s23.sh,
    // build of 433f945): 4,32,32,4096 7.150 / 7.100 against 7.271 / 7.289, causal 4.097 / 4.041
    // against 4.105 / 4.100, 4,32,8,4096 6.945 / 6.951 against 7.204 / 7.247 (pb7, its 128-bit
    // hand-off, 6.963 / 6.963), 1,16,16,8192 causal 1.939 / 1.932 against 1.985 / 1.987. So pds4
    // pb5 at d128 (it needs 226 KB of shared memory: pb3 where less is available).
    // Session 34 (H100 80GB HBM3, `detfuse bench`, 5 repeats, old / new binary in one call, fwd+bwd ms): dK / dV
    // staged through the K / V tiles (d64's epilogue since then) in the pds4 pb5 kernel, 4,32,32,4096,128 causal
    // 3.961 / 3.970 against the direct stores' 4.051 / 4.055, non-causal 6.996 / 6.987 against 6.902 / 6.877.
    // So the staged twin (se1, session 35: the same bits) causal, the direct kernel otherwise.
    if (p.d == 128 && p.softcap <= 0 && p.causal)
      preferred.push_back("attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_se1_d128");
    if (p.d == 128 && p.softcap <= 0) {
      preferred.push_back("attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128");
      preferred.push_back("attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_ew2_pb3_spt1_d128");
    }
    preferred.push_back(p.d == 128 ? "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128"
                                   : "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64");
    // pds3 takes the whole 227 KB of an H100/H200 block; where less is
    // available, pds2 (its can_run says which).
    if (p.d == 64) preferred.push_back("attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_spt1_d64");
    preferred.push_back(p.d == 128 ? "attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst2_d128"
                                   : "attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst3_d64");
  }
  preferred.push_back(VariantDesc::canonical_name(Family::attention, p.dtype, "fma", "owning",
                                                  {{"br", 64}, {"bc", 64}, {"w", 8}, {"d", p.d}}));
  for (const auto& name : preferred)
    if (const AttentionVariant* v = r.find_attention(name); v && !v->can_run(p, mode, dev)) return *v;
  for (const auto& v : r.attention())
    if (v.desc.deterministic && !v.can_run(p, mode, dev)) return v;
  for (const auto& v : r.attention())
    if (!v.can_run(p, mode, dev)) return v;
  throw invalid_argument("no registered attention variant can run " + p.key() +
                         " (head dims 64 and 128 are built)");
}

namespace {
void run_heuristic(const AttentionProblem& p, AttentionMode mode, const AttentionArgs& a, cudaStream_t s) {
  validate_call(p, mode, a);
  int dev = 0;
  DETFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  run(heuristic_variant(p, mode, cached_device(dev)), p, mode, a, s);
}
}  // namespace

void forward(const AttentionProblem& p, const AttentionArgs& a, cudaStream_t s) {
  run_heuristic(p, AttentionMode::forward, a, s);
}
void backward(const AttentionProblem& p, const AttentionArgs& a, cudaStream_t s) {
  run_heuristic(p, AttentionMode::backward, a, s);
}

}  // namespace detfuse::attention
