// Registration of the Hopper attention variants:
//   attention.bf16.wgmma.fwd.*       forward only (attention_wgmma.h); can_run
//                                    refuses the backward mode; `ps1`: the
//                                    persistent forward (fwd_tile_scheduler.h);
//                                    `br192`: three consumer warpgroups (d64);
//   attention.bf16.wgmma.owning.*    forward (the overlapped forward of the head
//   attention.bf16.wgmma.atomic.*    dim) and backward (attention_wgmma_bwd.h):
//   attention.bf16.wgmma.partials.*
//   attention.bf16.wgmma.ordered.*   D = rowsum(dO O) (bwd_common.h), the kv
//                                    kernel (dK, dV; atomic: + dQ by fp32
//                                    atomics and the convert pass; ordered:
//                                    + dQ added in key-block order behind a
//                                    semaphore per query block, and the
//                                    convert pass; `tma1`: dQ added by a
//                                    writer warp with TMA bulk reductions,
//                                    FlashAttention-3's path; `pds1`: P^T
//                                    and dS^T through shared memory; `pds2`:
//                                    dS^T double-buffered, LSE / D brought
//                                    by a producer thread; `pds3`: pds2
//                                    at 128 queries per step, d64; `sp1`:
//                                    pds2 with dQ before dK and dK left in
//                                    flight into the next query block; `sp2`:
//                                    sp1 with the dQ part handed over after
//                                    the next block's S^T; `dc1`: sp1 d128
//                                    with the consumer warpgroups decoupled,
//                                    dQ over each one's own keys, one dQ
//                                    tile each; `rs1`: pds3 / pds2 with dV
//                                    and dK from registers; `spt1`: ordered
//                                    pds2 / pds3 with FlashAttention-3's
//                                    order of the dQ adds, bwd_dq_order.h;
//                                    `ew1`: pds3 with the exp loop without
//                                    a branch per element and D read ahead
//                                    of the dS^T stores (and sp1 d128 with
//                                    them); `ew2`: ew1 with dQ
//                                    before dK, handed over while dK runs;
//                                    `wq1`: ew2 pds3 / ew1 sp1 with each
//                                    warpgroup's dQ part handed over alone;
//                                    `pb1`: ew2 pds3 (d64) / pds2 (d128) with P^T as dV's A
//                                    fragment in registers after the exp and
//                                    dS^T from the bf16 P^T, dK from registers;
//                                    `pb2` / `pb3`: pb1 d64 with descriptors in
//                                    uniform registers and dQ scaled by the
//                                    convert pass, pb3 in FlashAttention-4's
//                                    step order),
//                                    owning:
//                                    the dq kernel over query blocks.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/attention/bwd_common.h"
#include "kernels/attention/variants.h"
#include "kernels/attention/wgmma/attention_wgmma.h"
#include "kernels/attention/wgmma/attention_wgmma_bwd.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/strategy.h"
#include "kernels/registry.h"

namespace detfuse::attention::wg {
namespace {

// Whether the TMA dQ backward overlaps its convert with the kv kernel's tail
// (attention_wgmma_bwd.h dq_done_bytes): DETFUSE_ATTN_PDL=0 never, any other
// value always; unset, for causal or GQA problems. Measured on H100s (sessions
// 38 and 39, `detfuse bench`, the heuristic's variants, fwd+bwd, stream-ordered
// against overlapped in one build, medians of 5): the causal rows 0.6-1.8% less
// time (4,32,32,4096,64; 4,32,32,4096,128; 4,32,8,4096,128; 1,16,16,8192,128;
// 2,32,8,8192,128: the causal grid ends in a long tail, key block 0 of the
// last heads walking every query block), non-causal GQA 4,32,8,4096,128 0.3%
// and 0.9% less, non-causal 4,32,32,4096,128 0.4%, 0.7% and 0.8% more (4096
// equal kv CTAs: the convert's traffic falls on the last full wave; not
// profiled). The bits are the same either way.
bool dq_convert_overlaps(const AttentionProblem& p) {
  const char* e = std::getenv("DETFUSE_ATTN_PDL");
  if (e != nullptr && *e != 0) return std::atoi(e) != 0;
  return p.causal || (p.Hkv > 0 && p.Hkv != p.H);
}

constexpr const char* kForwardOnly =
    "forward only: the wgmma fwd variants have no backward (the wgmma owning, atomic, partials and ordered variants run both modes)";

// The checks every wgmma variant shares: dtype, head dim, device, sizes and
// shared memory (smem: the dynamic bytes of the largest kernel it launches).
std::optional<std::string> common_reason(const AttentionProblem& p, const DeviceInfo& dev, int D, size_t smem) {
  if (p.dtype != DType::bf16)
    return std::string("dtype: bf16 only, the wgmma attention has no ") + to_string(p.dtype) + " path";
  if (p.d != D)
    return "d: head dim " + std::to_string(p.d) + " is not this variant's " + std::to_string(D) +
           " (the wgmma attention is built for d=64 and d=128)";
  // sm_90a code runs on compute capability 9.0 exactly (H100, H200, GH200).
  if (dev.compute_capability() != 90)
    return "wgmma/TMA code is built for sm_90a and runs on compute capability 9.0 only, device has " +
           std::to_string(dev.compute_capability());
  if (auto e = p.dim_error()) return e;
  if (p.H > 65535 || p.B > 65535)
    return "H and B must be at most 65535 (grid y and z), got H=" + std::to_string(p.H) +
           " B=" + std::to_string(p.B);
  // TMA: a tensor map's strides must stay below 2^40 bytes (the batch stride is the largest).
  const int64_t lim = int64_t(1) << 40;
  if (p.H * p.Sq * p.d * 2 >= lim || p.Hkv * p.Sk * p.d * 2 >= lim)
    return std::string("H*Sq*d and Hkv*Sk*d bf16 bytes must stay below 2^40 (TMA stride limit)");
  // The dynamic SharedStorage plus the 1 KB of static shared memory the
  // kernels' 1024-byte aligned declaration reserves (cuobjdump -res-usage).
  smem += 1024;
  if (dev.max_smem_per_block_optin > 0 && smem > size_t(dev.max_smem_per_block_optin))
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, device allows " +
           std::to_string(dev.max_smem_per_block_optin);
  return std::nullopt;
}

template <class Dq>
constexpr int qbc_of() {
  if constexpr (std::is_void_v<Dq>)
    return 0;
  else
    return Dq::BC;
}

template <class Cfg>
std::optional<std::string> can_run(const AttentionProblem& p, AttentionMode mode, const DeviceInfo& dev) {
  if (mode == AttentionMode::backward) return std::string(kForwardOnly);
  if (Cfg::PERSISTENT || p.causal) {
    // The tile index of the persistent and the causal schedulers is an int.
    const int64_t tiles = (p.Sq + Cfg::BR - 1) / Cfg::BR * p.H * p.B;
    if (p.Sq > 0 && p.H > 0 && p.B > 0 && tiles > int64_t(INT32_MAX))
      return std::string(Cfg::PERSISTENT ? "persistent" : "causal") + " forward: " + std::to_string(tiles) +
             " tiles of " + std::to_string(Cfg::BR) + " query rows, at most 2^31 - 1";
  }
  return common_reason(p, dev, Cfg::D, fwd_smem_bytes<Cfg>());
}

template <class Cfg>
void add(Registry& r) {
  AttentionVariant v;
  v.desc.family = Family::attention;
  v.desc.dtype = DType::bf16;
  v.desc.engine = "wgmma";
  v.desc.strategy = to_string(Strategy::forward_only);
  v.desc.params = {{"br", Cfg::BR}, {"bc", Cfg::BC}, {"st", Cfg::STAGES}, {"ov", Cfg::OVERLAP},
                    {"pp", Cfg::PINGPONG ? 1 : 0}};
  if constexpr (Cfg::PERSISTENT) v.desc.params.push_back({"ps", 1});  // the older names stay as they were
  if constexpr (Cfg::QSTAGES > 1) v.desc.params.push_back({"qs", Cfg::QSTAGES});
  if constexpr (Cfg::TREE) v.desc.params.push_back({"rd", 1});
  if constexpr (Cfg::TMA_O) v.desc.params.push_back({"ot", Cfg::TMA_O});
  if constexpr (Cfg::SPLIT) v.desc.params.push_back({"ls", 1});
  v.desc.params.push_back({"d", Cfg::D});
  v.desc.name = VariantDesc::canonical_name(v.desc.family, v.desc.dtype, v.desc.engine, v.desc.strategy, v.desc.params);
  // Every output element is written once by one thread after a fixed sequence
  // of key blocks: no atomics, nothing depends on timing.
  v.desc.deterministic = true;
  v.desc.summary = "Hopper forward: TMA producer + " + std::to_string(Cfg::BR / 64) +
                   " consumer warpgroups (wgmma SS QK^T, RS PV), " +
                   std::to_string(Cfg::BR) + "x" + std::to_string(Cfg::BC) + " tiles, " +
                   std::to_string(Cfg::STAGES) + "-stage K/V ring" +
                   (Cfg::OVERLAP == 1 ? ", softmax overlapped with P V in each warpgroup" : "") +
                   (Cfg::OVERLAP == 2 ? ", softmax overlapped with P V in each warpgroup, the loop rotated so that "
                                        "the wait for P V follows the softmax"
                                      : "") +
                   (Cfg::PINGPONG ? ", warpgroups take turns on the tensor cores" : "") +
                   (Cfg::PERSISTENT ? ", persistent (one CTA per SM, longest tiles first when causal)" : "") +
                   (Cfg::QSTAGES > 1 ? ", two Q buffers" : "") +
                   (Cfg::TREE ? ", softmax reductions in four chains per row" : "") +
                   (Cfg::TMA_O ? ", O stored by TMA from shared memory" : "") +
                   (Cfg::TMA_O == 2 ? " (written there by stmatrix)" : "") +
                   (Cfg::SPLIT ? ", the key blocks without a mask walked in a loop of their own" : "") +
                   "; forward only";
  v.can_run = can_run<Cfg>;
  v.workspace_bytes = [](const AttentionProblem&, AttentionMode) -> size_t { return 0; };
  v.launch = [](const AttentionProblem& p, AttentionMode mode, const AttentionArgs& a, cudaStream_t s) {
    if (mode == AttentionMode::backward) throw Error(std::string("attention wgmma: ") + kForwardOnly);
    launch_fwd<Cfg>(p, a, s);
  };
  r.add(std::move(v));
}

// Forward and backward: Fwd is the forward configuration, Kv the kv kernel's
// (Kv::DQS, a DqStrategy: kNone owning, kAtomic, kPartials, kOrdered, kAtomicTma /
// kOrderedTma by TMA bulk reductions, param tma1), Dq the owning dq kernel's (void
// otherwise). Partials: slab bound kPartialsMiB (variants.h), as the portable family.
// kSpt (`spt1`, ordered pds2 / pds3): the same kv kernel with the dQ adds in
// FlashAttention-3's order (a run-time flag of the kernel, bwd_dq_order.h).
// kHs (`hs2`, `hs4`, spt1 only): the query heads of a kv head split over kHs
// CTAs per key block, their dK / dV parts added in split order
// (KvHeadSplit, attention_wgmma_bwd.h; a run-time parameter of the same kernel).
// kWs (`ws2`, with kHs = 2): the split is of each key block's walk instead
// (part p taking every other query block of it, causal only: KvHeadSplit).
template <class Fwd, class Kv, class Dq, bool kSpt = false, int kHs = 1, bool kWs = false>
void add_bwd(Registry& r, int kMiB = kPartialsMiB) {
  using enum DqStrategy;
  constexpr DqStrategy kDq = Kv::DQS;  // the dQ mechanism; its strategy:
  constexpr Strategy kStrategy = kDq == kNone       ? Strategy::owning
                                 : Kv::DQ_ATOMIC    ? Strategy::atomic
                                 : kDq == kPartials ? Strategy::partials
                                                    : Strategy::ordered;
  static_assert((kDq == kNone) == !std::is_void_v<Dq>, "owning: a dq kernel; atomic, partials, ordered: none");
  static_assert(Fwd::D == Kv::D, "one head dim");
  static_assert(!kSpt || (kDq == kOrderedTma && Kv::PDS >= 2 && Kv::RS == 0 && Kv::DC == 0 && Kv::SP <= 1),
                "spt1: the ordered pds2 / pds3 / sp1 kv kernels (BwdKv::kOrderRt; with or without ew)");
  AttentionVariant v;
  v.desc.family = Family::attention;
  v.desc.dtype = DType::bf16;
  v.desc.engine = "wgmma";
  v.desc.strategy = to_string(kStrategy);
  v.desc.params = {{"br", Kv::BR}, {"bc", Kv::BC}, {"st", Kv::STAGES}};
  if constexpr (Kv::DQ_TMA) v.desc.params.push_back({"tma", 1});
  if constexpr (Kv::PDS != 0) v.desc.params.push_back({"pds", Kv::PDS});
  if constexpr (Kv::SP != 0) v.desc.params.push_back({"sp", Kv::SP});
  if constexpr (Kv::DC != 0) v.desc.params.push_back({"dc", Kv::DC});
  if constexpr (Kv::RS != 0) v.desc.params.push_back({"rs", Kv::RS});
  if constexpr (Kv::EW != 0) v.desc.params.push_back({"ew", Kv::EW});
  if constexpr (Kv::WQ != 0) v.desc.params.push_back({"wq", Kv::WQ});
  if constexpr (Kv::PB != 0) v.desc.params.push_back({"pb", Kv::PB});
  if constexpr (kSpt) v.desc.params.push_back({"spt", 1});
  static_assert(kHs == 1 || (kSpt && Kv::D == 128 && ((Kv::EW == 1 && Kv::WQ == 0) || Kv::HS == 1)),
                "hs: the ew1 sp1 spt1 d128 kv kernel or the pds4 pb5 one built with it (BwdKv::kHs)");
  if constexpr (kHs > 1) v.desc.params.push_back({kWs ? "ws" : "hs", kHs});
  if constexpr (Kv::SE != 0) v.desc.params.push_back({"se", Kv::SE});
  if constexpr (kDq == kNone) {
    static_assert(Dq::D == Kv::D, "one head dim");
    v.desc.params.push_back({"qbc", Dq::BC});
    v.desc.params.push_back({"qst", Dq::STAGES});
  }
  v.desc.params.push_back({"d", Kv::D});
  if constexpr (kDq == kPartials) v.desc.params.push_back({"mb", kMiB});
  v.desc.name = VariantDesc::canonical_name(v.desc.family, v.desc.dtype, v.desc.engine, v.desc.strategy, v.desc.params);
  // dK, dV: each element written once by the CTA of its key block after a
  // fixed walk over (query head, query block); owning dQ: once by the CTA of
  // its query block after a fixed walk over key blocks; partials: each key
  // block's partial written once, summed in key order by one thread per
  // element; ordered: each key block's part added after those of the key
  // blocks before it (a semaphore per query block sets the order, not timing).
  // Atomic dQ: fp32 adds in arrival order.
  v.desc.deterministic = !Kv::DQ_ATOMIC;
  v.desc.summary = "Hopper forward (br" + std::to_string(Fwd::BR) + " bc" + std::to_string(Fwd::BC) +
                   " overlapped) + backward: kv kernel (TMA Q/dO ring of " + std::to_string(Kv::STAGES) + "x" +
                   std::to_string(Kv::BR) + " queries, 128 keys, dK dV in registers, GQA heads walked in order)" +
                   (kDq == kAtomic ? ", dQ by fp32 atomics of dS K + convert pass"
                    : kDq == kPartials
                        ? ", dQ partials of dS K per key block (" + std::to_string(kMiB) + " MiB slab) summed in fixed order"
                    : kDq == kOrdered
                        ? ", dQ: dS K added in key-block order behind a semaphore per query block + convert pass"
                    : kDq == kAtomicTma ? ", dQ: dS K handed to a writer warp, added by TMA bulk reductions (fp32, "
                                          "arrival order) + convert pass"
                    : kDq == kOrderedTma ? ", dQ: dS K handed to a writer warp, added by TMA bulk reductions in "
                                           "key-block order behind a semaphore per query block + convert pass"
                                         : ", dQ by a query-block kernel (128 rows, " + std::to_string(qbc_of<Dq>()) +
                                               "-key tiles) walking the key blocks in order") +
                   (Kv::PDS != 0 && Kv::RS == 0 ? "; P^T and dS^T through shared memory (dV, dK, dQ by wgmma SS)"
                                                : "") +
                   (Kv::RS == 1 ? "; P^T and dS^T as wgmma A fragments in registers (dV, dK by wgmma RS), dS^T "
                                  "also through shared memory for dQ (SS)"
                                : "") +
                   (Kv::PDS >= 2 ? ", dS^T double-buffered, LSE and D brought by the producer with Q and dO" : "") +
                   (Kv::PDS == 3 ? ", 128 queries per step (dQ = dS K split by queries over the warpgroups)" : "") +
                   (Kv::PDS == 4 ? ", 80 queries per step (dQ^T = K^T dS^T, split by columns over the warpgroups)" : "") +
                   (Kv::SP >= 1 ? ", dQ before dK and dK left in flight into the next query block" : "") +
                   (Kv::SP == 2 ? ", the dQ part handed over once the next block's S^T is issued" : "") +
                   (Kv::DC == 1 ? ", consumer warpgroups decoupled (dQ over each one's own 64 keys, one dQ tile and "
                                  "one bulk add each)"
                                : "") +
                   (Kv::EW >= 1 ? "; exp2 over the tile without a branch, the mask a pass of its own, D read "
                                  "ahead of the dS^T stores"
                                : "") +
                   (Kv::EW == 2 ? "; dQ before dK, the dQ part handed over while dK runs" : "") +
                   (Kv::WQ == 1 ? "; each warpgroup's dQ part handed to the writer warp alone (its own half of "
                                  "the dQ tile, barriers and bulk add)"
                                : "") +
                   (Kv::PB == 1 ? "; P^T as dV's wgmma A fragment in registers right after the exp (dV by wgmma "
                                  "RS, no P^T tile), dS^T from the bf16 P^T (dK by wgmma RS, dQ SS)"
                                : "") +
                   (Kv::PB == 7 || Kv::PB == 8 ? "; the dQ part handed over by 128-bit stores (tile and accumulator in groups of 4 "
                                  "values a thread)"
                                : "") +
                   (Kv::PB == 5 || Kv::PB == 7 ? "; the exp in the dS^T loop, after the dP^T wait, next to each chunk's dS^T "
                                  "arithmetic (the mask as -inf before it)"
                                : "") +
                   (Kv::PB == 10 ? "; the mask (-inf) and the exp's argument S^T scale log2 e - LSE formed before the dP^T "
                                   "wait, the EX2 in the dS^T loop next to each chunk's dS^T arithmetic"
                                 : "") +
                   (Kv::PB == 6 ? "; the exp of the first half of the queries before the dP^T wait and dV's first "
                                  "half issued from it, the second half's in the dS^T loop (the mask as -inf before the exp)"
                                : "") +
                   (Kv::PB == 3 || Kv::PB >= 5 ? "; FlashAttention-4's step: dS^T from the fp32 P^T, P^T and dS^T as the wgmma A "
                                  "fragments of dV and dK (RS, dV issued once dS^T is formed), dQ SS"
                                : "") +
                   (Kv::PB >= 2 ? "; wgmma descriptors in uniform registers, the dQ part handed over unscaled "
                                  "(the convert pass scales it)"
                                : "") +
                   (kSpt ? "; dQ adds in FlashAttention-3's order (causal: query blocks ascending from the "
                           "diagonal, the diagonal key block first; non-causal: each key block starting on its "
                           "own query block)"
                         : "") +
                   (kHs > 1 && !kWs ? "; a kv head's query heads split over " + std::to_string(kHs) +
                                          " CTAs per key block, their dK / dV parts added in split order through fp32"
                                    : "") +
                   (kWs ? "; causal: each key block's walk split over " + std::to_string(kHs) +
                              " CTAs (one query block in " + std::to_string(kHs) +
                              " each), their dK / dV parts added in split order through fp32"
                        : "") +
                   // (BwdKv::kStagedDkv: every d64 kernel since session 34, the d128 se1 twin since session 35)
                   (Kv::D == 64 || Kv::SE == 1 ? "; dK, dV staged through the K / V tiles and stored as 16-byte rows"
                                               : "; dK, dV stored from the accumulators as 4-byte pairs");
  v.can_run = [kMiB](const AttentionProblem& p, AttentionMode mode,
                     const DeviceInfo& dev) -> std::optional<std::string> {
    size_t smem = fwd_smem_bytes<Fwd>();
    if (mode == AttentionMode::backward) {
      smem = bwd_kv_smem_bytes<Kv>();
      if constexpr (kDq == kNone) smem = std::max(smem, bwd_dq_smem_bytes<Dq>());
    }
    if (auto e = common_reason(p, dev, Kv::D, smem)) return e;
    if (mode == AttentionMode::backward) {
      if (p.B * p.Hkv * kHs > 65535)
        return "B*Hkv" + std::string(kHs > 1 ? "*" + std::to_string(kHs) : "") +
               " must be at most 65535 (the kv kernel's grid y), got " + std::to_string(p.B * p.Hkv * kHs);
      if (kHs > 1 && !kWs && (p.H / p.Hkv) % kHs != 0)
        return "hs" + std::to_string(kHs) + ": the query heads per kv head (H / Hkv = " + std::to_string(p.H / p.Hkv) +
               ") must be a multiple of " + std::to_string(kHs);
      if (kDq == kPartials && !plan_partials(p, Kv::BC, size_t(kMiB) << 20))
        return "workspace bound: one key block's dQ partial of a kv-head group (" +
               std::to_string((p.H / p.Hkv) * p.Sq * p.d * 4) + " bytes) exceeds " + std::to_string(kMiB) + " MiB";
    }
    return std::nullopt;
  };
  v.workspace_bytes = [kMiB](const AttentionProblem& p, AttentionMode mode) -> size_t {
    if (mode == AttentionMode::forward) return 0;
    size_t n = d_bytes(p);
    if (kDq == kAtomic) n += dq_acc_bytes(p);
    if (kDq == kOrdered) n += dq_acc_bytes(p) + ordered_sem_bytes(p, Kv::BR);
    if (kDq == kAtomicTma) n += dq_tile_acc_bytes(p, Kv::BR);
    if (kDq == kOrderedTma) n += dq_tile_acc_bytes(p, Kv::BR) + ordered_sem_bytes(p, Kv::BR);
    if (Kv::DQ_TMA) n += dq_done_bytes(p, kHs);  // the overlapped convert's counts (attention_wgmma_bwd.h)
    n += dkv_split_sem_bytes(p, kHs, Kv::BC) + dkv_split_acc_bytes(p, kHs);  // hs: dK / dV parts (0 without)
    if (Kv::PDS >= 2) n += pds_stage_bytes(p, Kv::BR);  // pds2, pds3: the producer's LSE / D staging
    if (kDq == kPartials) {
      if (auto pl = plan_partials(p, Kv::BC, size_t(kMiB) << 20)) n += pl->slab_bytes + pl->acc_bytes;
    }
    return n;
  };
  v.launch = [kMiB](const AttentionProblem& p, AttentionMode mode, const AttentionArgs& a, cudaStream_t s) {
    if (mode == AttentionMode::forward) {
      launch_fwd<Fwd>(p, a, s);
      return;
    }
    if (a.workspace == nullptr) throw Error("attention wgmma backward: workspace is null");
    if (a.O_in == nullptr || a.dO == nullptr) throw Error("attention wgmma backward: O_in and dO must be set");
    if (a.dQ == nullptr) throw Error("attention wgmma backward: dQ is null");
    char* ws = static_cast<char*>(a.workspace);
    float* Dvec = reinterpret_cast<float*>(ws);
    char* rest = ws + d_bytes(p);
    launch_rowsum_do_o(DType::bf16, a.dO, a.O_in, Dvec, p.B * p.H * p.Sq, int(p.d), s);
    if constexpr (kDq == kAtomic) {
      float* acc = reinterpret_cast<float*>(rest);
      const int64_t n = p.B * p.H * p.Sq * p.d;
      DETFUSE_CUDA_CHECK(cudaMemsetAsync(acc, 0, size_t(n) * sizeof(float), s));
      launch_bwd_kv<Kv>(p, a, Dvec, acc, s);
      launch_convert_f32(DType::bf16, acc, a.dQ, n, s);
    } else if constexpr (kDq == kOrdered) {
      // The accumulator and the semaphores are contiguous: one memset.
      float* acc = reinterpret_cast<float*>(rest);
      int* sem = reinterpret_cast<int*>(rest + dq_acc_bytes(p));
      const int64_t n = p.B * p.H * p.Sq * p.d;
      DETFUSE_CUDA_CHECK(cudaMemsetAsync(acc, 0, dq_acc_bytes(p) + ordered_sem_bytes(p, Kv::BR), s));
      launch_bwd_kv<Kv>(p, a, Dvec, acc, s, 0, -1, 0, -1, sem);
      launch_convert_f32(DType::bf16, acc, a.dQ, n, s);
    } else if constexpr (Kv::DQ_TMA) {
      // The tile-blocked accumulator zeroed (atomic), or only the semaphores
      // (ordered: a tile's first write is a copy, and the convert writes zeros
      // where no key block wrote); launch_bwd_kv also writes dQ from it.
      float* acc = reinterpret_cast<float*>(rest);
      int* sem = kDq == kOrderedTma ? reinterpret_cast<int*>(rest + dq_tile_acc_bytes(p, Kv::BR)) : nullptr;
      // hs: the dK / dV semaphores right after the dQ ones, then the overlapped
      // convert's counts (one memset), the parts' fp32 sums after the LSE / D
      // staging (written before read).
      const size_t dkv_sems = dkv_split_sem_bytes(p, kHs, Kv::BC);
      const size_t sems = (kDq == kOrderedTma ? ordered_sem_bytes(p, Kv::BR) : 0) + dkv_sems + dq_done_bytes(p, kHs);
      const size_t used = dq_tile_acc_bytes(p, Kv::BR) + sems;
      if constexpr (kDq == kOrderedTma)
        DETFUSE_CUDA_CHECK(cudaMemsetAsync(sem, 0, sems, s));
      else
        DETFUSE_CUDA_CHECK(cudaMemsetAsync(acc, 0, used, s));
      // pds2, pds3: the padded LSE / D after them (written by launch_bwd_kv).
      float* stage = Kv::PDS >= 2 ? reinterpret_cast<float*>(rest + used) : nullptr;
      KvHeadSplit hs;
      if constexpr (kHs > 1) {
        hs.splits = kHs;
        hs.walk = kWs;
        hs.sem = reinterpret_cast<int*>(rest + dq_tile_acc_bytes(p, Kv::BR) + ordered_sem_bytes(p, Kv::BR));
        hs.acc = reinterpret_cast<float*>(rest + used + (Kv::PDS >= 2 ? pds_stage_bytes(p, Kv::BR) : 0));
      }
      int* done = reinterpret_cast<int*>(rest + used - dq_done_bytes(p, kHs));
      launch_bwd_kv<Kv>(p, a, Dvec, acc, s, 0, -1, 0, -1, sem, stage, kSpt, hs,
                        dq_convert_overlaps(p) ? done : nullptr);
    } else if constexpr (kDq == kPartials) {
      const auto plan = plan_partials(p, Kv::BC, size_t(kMiB) << 20);
      if (!plan) throw Error("attention wgmma backward: the partials slab bound is too small for this problem");
      const PartialsPlan& pl = *plan;
      float* slab = reinterpret_cast<float*>(rest);
      float* acc = reinterpret_cast<float*>(rest + pl.slab_bytes);
      const int64_t unit_elems = (p.H / p.Hkv) * p.Sq * p.d;
      for (int64_t u0 = 0; u0 < pl.units; u0 += pl.uc) {
        const int64_t uc = std::min(pl.uc, pl.units - u0);
        for (int64_t ri = 0; ri < pl.ranges; ++ri) {
          const int64_t kb0 = ri * pl.kc, kc = std::min(pl.kc, pl.n_kb - kb0);
          launch_bwd_kv<Kv>(p, a, Dvec, slab, s, kb0, kc, u0, uc);
          launch_partials_reduce(DType::bf16, slab, acc, a.dQ, u0, uc, kc, unit_elems, ri == 0,
                                 ri == pl.ranges - 1, s);
        }
      }
    } else {
      launch_bwd_kv<Kv>(p, a, Dvec, nullptr, s);
      launch_bwd_dq<Dq>(p, a, Dvec, s);
    }
  };
  r.add(std::move(v));
}

}  // namespace
}  // namespace detfuse::attention::wg

namespace detfuse {

// The forward-only configurations (forward tuning; the family's tests check
// their forward and skip their backward).
void register_attention_wgmma_forward_only(Registry& r) {
  using namespace attention::wg;
  add<FwdD128Bc128St2>(r);
  add<FwdD128Bc176St2>(r);
  add<FwdD128Bc80St3>(r);
  add<FwdD64Bc128St3>(r);
  add<FwdD64Bc192St2>(r);
  add<FwdD64Bc64St4>(r);
  add<FwdD128Bc128St2Ov>(r);
  add<FwdD64Bc128St3Ov>(r);
  add<FwdD128Bc128St2OvPp>(r);
  // Persistent (ps1): grid = SMs, static tile scheduler (fwd_tile_scheduler.h).
  add<FwdD128Bc128St2OvPs>(r);
  add<FwdD128Bc128St2OvPpPs>(r);
  add<FwdD128Bc176St2Ps>(r);
  add<FwdD64Bc128St3OvPs>(r);
  add<FwdD128Bc128St2OvPsQ2>(r);
  add<FwdD128Bc128St2OvPpPsQ2>(r);
  add<FwdD64Bc128St3OvPsQ2>(r);
  // Session 8: tree softmax reductions (rd1), O by TMA store (ot1), bc160 ov1.
  add<FwdD128Bc128St2OvPsRd>(r);
  add<FwdD128Bc128St2OvPsRdOt>(r);
  add<FwdD128Bc128St2OvPpPsRdOt>(r);
  add<FwdD128Bc128St2OvRdOt>(r);
  add<FwdD128Bc160St2OvPsRdOt>(r);
  add<FwdD128Bc176St2OvPsRd>(r);  // session 23 (branch s23-br80): FlashAttention-3's d128 non-causal tile
  add<FwdD64Bc128St3OvPsRdOt>(r);
  // Session 15 (issue 16 item 2): three consumer warpgroups, 192 x 128 tiles
  // at d64 (FlashAttention-3 / -4's sm90 tile at d <= 64; README "Three
  // consumer warpgroups"), the two d64 heuristic forwards' options: last
  // until the H200 has measured them (experiments/device/s15-fwd192.sh).
  add<FwdD64Br192Bc128St3OvPsRd>(r);
  add<FwdD64Br192Bc128St3OvPsRdOt>(r);
  // Session 20: FlashAttention-4's forward launches, not persistent (attention_wgmma.h).
  add<FwdD64Br192Bc128St3OvRdOt>(r);
  add<FwdD64Bc128St3OvRdOt>(r);
  add<FwdD128Bc128St2OvPpRdOt>(r);
  add<FwdD64Br192Bc128St3OvPpRdOt>(r);
  // Session 24: ov2 (the overlapped loop rotated; attention_wgmma.h).
  add<FwdD128Bc128St2Ov2PsRdOt>(r);
  add<FwdD128Bc128St2Ov2PpRdOt>(r);
  add<FwdD64Bc128St3Ov2RdOt>(r);
  add<FwdD64Bc128St3Ov2PsRdOt>(r);
  // Session 28: ls1, the split walk (attention_wgmma.h), on the three heuristic forwards.
  add<FwdD64Br192Bc128St3Ov2RdOtLs>(r);
  add<FwdD64Br192Bc128St3Ov2PsRdLs>(r);
  add<FwdD128Bc128St2Ov2PsRdOtLs>(r);
  // Session 30: ot2, the O tile by stmatrix (attention_wgmma.h), on the d128 and d64 causal heuristics' forwards.
  add<FwdD128Bc128St2Ov2PsRdOt2>(r);
  add<FwdD64Br192Bc128St3OvRdOt2>(r);
}

// Forward-only, then forward + backward (deterministic owning dQ first).
void register_attention_wgmma(Registry& r) {
  using namespace attention::wg;
  register_attention_wgmma_forward_only(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2, DqD128Bc64St2>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St3, DqD128Bc64St2>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2, DqD64Bc128St2>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br96St2, DqD64Bc128St2>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St3, DqD128Bc64St3>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2, DqD64Bc64St3>(r);
  // The TMA dQ variants first in their strategies: the fastest of each (H200),
  // and the contention study's --quick takes a strategy's first block shape.
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2AT, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2AT, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2A, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St3A, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2A, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St4A, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2P, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St3P, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St4P, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OT, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2OT, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2O, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St3O, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2O, void>(r);
  // P^T and dS^T through shared memory (`pds1`, TMA dQ; d128 without spills):
  // last until the H200 has measured them (experiments/device/s6-attnbwd.sh).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2OTS, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St3OTS, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2ATS, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St3ATS, void>(r);
  // pds2 (dS^T double-buffered, LSE / D by the producer; d128: one dQ tile):
  // beside pds1, last until measured (experiments/device/s7-attnbwd.sh).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2OTS2, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2ATS2, void>(r);
  // pds3 (d64 at 128 queries per step, pds2's protocol; 227 KB of shared
  // memory): last until measured (experiments/device/s8-attn64.sh).
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3, void>(r);
  // sp1 (pds2 d128, dQ before dK, dK in flight across query blocks): last
  // until measured (experiments/device/s9-attnbwd.sh).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2P, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2P, void>(r);
  // sp2 (sp1, and the dQ part of block m handed to the writer warp in block
  // m + 1 behind S^T (m + 1)): ordered only, last until measured.
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2P2, void>(r);
  // dc1 (sp1 d128 with the consumer warpgroups decoupled: dQ over each one's
  // own keys, two bulk adds per query block): last until measured
  // (experiments/device/s10-attndec.sh).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2PD, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2PD, void>(r);
  // rs1 (pds3 at d64, pds2 at d128, with dV += P^T dO and dK += dS^T Q from
  // registers, no P^T tile; d64: two LSE / D stages): last until measured
  // (experiments/device/s11-attnrs.sh).
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3R, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3R, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2R, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2R, void>(r);
  // spt1 (issue 16: FlashAttention-3's order of the ordered dQ adds, a
  // run-time flag of the same kv kernels): last until measured
  // (experiments/device/s12-attnorder.sh).
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2P, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br64St2OTS2, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2, void, true>(r);
  // ew1, ew2 (issue 16, session 14: pds3's elementwise code and, ew2, the
  // step's end as FlashAttention-4's sm90 backward; ew1 on sp1 d128 too;
  // ordered with spt1): registered last; measured on the H200 (s14-attn-helper.sh:
  // +15% at d64, +8-9% at d128), the heuristic's backwards since
  // (attention.cpp names them).
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E1, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E1, void>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E2, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2PE1, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2PE1, void>(r);
  // wq1 (issue 16, session 14: each consumer warpgroup's dQ part handed to
  // the writer warp alone, FlashAttention-4's per-warpgroup dQ barriers) on
  // ew2 pds3 d64 and ew1 sp1 d128: registered last; measured flat against
  // ew2 / ew1 on the H200 (experiments/device/s14-dq.sh), kept as a strategy
  // variant.
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2W, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E2W, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2PE1W, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2PE1W, void>(r);
  // pb1 (issue 16, session 15: ew2 pds3 d64 with P^T as dV's A fragment in
  // registers right after the exp, dS^T from the bf16 P^T, dK from
  // registers; ordered with spt1): registered last until measured
  // (experiments/device/s15-pb1.sh).
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2B, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E2B, void>(r);
  // pb1 at d128 (issue 16, session 19: ew2 pds2 with FlashAttention-4's d128
  // order, dV and dK from registers): registered last until measured
  // (experiments/device/s19-pb128.sh).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2E2B, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2E2B, void>(r);
  // pb3 (issue 16, session 21: the d64 step with FlashAttention-4's
  // instruction count: descriptors in uniform registers, dQ scaled by the
  // convert pass, the A fragments written as words, and its step order;
  // pb2, the same without the step order, measured slower (s21.sh) and retired in session 32).
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2B3, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E2B3, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2E2B3, void, true>(r);  // pb3 at d128 (ew2 pds2)
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2E2B3, void>(r);
  // pb5 (session 22): pb3 with the exp in the dS^T loop (d64; at d128 it measured slower).
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2B5, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E2B5, void>(r);
  // pb6 (session 22; measured in session 24, flat): pb5 with the first half's exp and dV before the dP^T wait.
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2B6, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E2B6, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2E2B6, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2E2B6, void>(r);
  // pb7 (session 22; measured in session 24, flat): pb5 with 128-bit dQ hand-off stores.
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2B7, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2ATS3E2B7, void>(r);
  // pb8 (session 23; measured in session 24, flat): pb3 at d128 with pb7's 128-bit dQ hand-off.
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2E2B8, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2ATS2E2B8, void>(r);
  // (pb9, pb6 at d64 with pb7's hand-off: measured in session 24 not faster than pb5, retired in session 32.)
  // pds4 (session 23; the d128 heuristic since session 24): 80 queries per step at d128 (FlashAttention's
  // non-causal hdim-128 tile), the dQ product transposed; pb5 and pb7.
  add_bwd<FwdD128Bc128St2Ov, KvD128Br80St2OTS4E2B5, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br80St2ATS4E2B5, void>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br80St2OTS4E2B7, void, true>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br80St2ATS4E2B7, void>(r);
  // hs2, hs4 (issue 16, session 17: GQA's query heads of a kv head over 2 or 4
  // CTAs per key block, dK / dV parts added in split order) and ws2 (session
  // 18: causal, each key block's walk over 2 CTAs, every other query block
  // each) on the heuristic's d128 spt1 kernel (ew1 sp1; BwdKv::kHs says why
  // only there): registered last (experiments/device/s18-split.sh).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2PE1, void, true, 2>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2PE1, void, true, 4>(r);
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2OTS2PE1, void, true, 2, true>(r);
  // hs2 on the d128 heuristic's pds4 pb5 kernel (session 27, BwdKvHsConfig: the causal GQA heuristic).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br80St2OTS4E2B5H, void, true, 2>(r);
  // se1 on the d128 heuristic's pds4 pb5 kernel (session 35, BwdKvSeConfig: dK / dV staged through the K / V
  // tiles as at d64; the causal heuristic, attention.cpp).
  add_bwd<FwdD128Bc128St2Ov, KvD128Br80St2OTS4E2B5S, void, true>(r);
  // pb10 (session 32: pb5 with the exp's argument formed before the dP^T wait, FlashAttention-4's split)
  // and wq1 (the per-warpgroup dQ hand-off) over pb5, d64; ordered spt1 only (the heuristic's strategy;
  // atomic twins would add build time, not a finding). Measured on an H100 (experiments/device/s32.sh):
  // pb10 2% slower than pb5, wq1 pb5 flat; so neither in the heuristic. (Built and measured once, then
  // dropped for CI time: wq1 over pb10, flat, and pb10 on pds4 d128, 1.5% slower non-causal.)
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2B10, void, true>(r);
  add_bwd<FwdD64Bc128St3Ov, KvD64Br128St2OTS3E2B5W, void, true>(r);
}

void register_attention_wgmma_partials(Registry& r, int partials_mib) {
  using namespace attention::wg;
  add_bwd<FwdD128Bc128St2Ov, KvD128Br64St2P, void>(r, partials_mib);
}

}  // namespace detfuse
