// The Hopper attention forward variants (kernels/attention/wgmma/) against the
// float64 reference, run directly through their registry entries:
//   - random problems with Sq != Sk, causal with Sq > Sk (rows and whole query
//     blocks that see no key: O = 0, LSE = -inf), GQA, lengths that are not
//     multiples of any block, Sq = 1, large-magnitude scores, d = 64 and 128;
//   - relative norm error <= 2e-2 for O (bf16) and <= 1e-4 for LSE, against the
//     reference computed on the same bf16-rounded inputs;
//   - 5 repeats with identical digests of O and LSE (O prefilled with NaN bytes
//     before the first run, so an unwritten element fails the error check);
//   - can_run refusals (backward, fp32, head dims, devices) without a GPU.
// GPU cases skip with the reason when there is no device or it is not sm_90.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/attention/bwd_common.h"
#include "kernels/attention/wgmma/attention_wgmma.h"
#include "kernels/attention/wgmma/attention_wgmma_bwd.h"
#include "kernels/common/buffer.h"
#include "kernels/common/device_info.h"
#include "kernels/common/digest.h"
#include "kernels/common/error.h"
#include "kernels/common/host_bf16.h"
#include "kernels/registry.h"
#include "reference/attention_ref.h"
#include "reference/compare.h"
#include "reference/inputs.h"
#include "tests/gpu_test.h"

namespace {

using namespace detfuse;

// The forward-only configurations (strategy token `fwd`).
std::vector<const AttentionVariant*> wgmma_variants() {
  std::vector<const AttentionVariant*> out;
  for (const auto& v : builtin_registry().attention())
    if (v.desc.engine == "wgmma" && v.desc.strategy == "fwd") out.push_back(&v);
  return out;
}

// The forward+backward wgmma variants (owning, atomic, partials).
std::vector<const AttentionVariant*> wgmma_bwd_variants() {
  std::vector<const AttentionVariant*> out;
  for (const auto& v : builtin_registry().attention())
    if (v.desc.engine == "wgmma" && v.desc.strategy != "fwd") out.push_back(&v);
  return out;
}

// An H200's DeviceInfo as can_run sees it (cc 9.0, 227 KB of shared memory a block).
DeviceInfo h200_info() {
  DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.max_smem_per_block_optin = 232448;
  return d;
}

int64_t param(const AttentionVariant& v, const std::string& key) {
  for (const auto& [k, val] : v.desc.params)
    if (k == key) return val;
  return -1;
}

// The kv kernels with P^T and dS^T through shared memory (param pds = 1;
// pds_variants(2): dS^T double-buffered, LSE / D by the producer), without
// the sp token (sp = 0) or with it (sp_variants), without the rs token
// (rs_variants), without the spt token (spt_variants), without the ew token
// (ew_variants).
std::vector<const AttentionVariant*> pds_variants(int pds = 1, int sp = 0) {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if (param(*v, "pds") == pds && std::max<int64_t>(param(*v, "sp"), 0) == sp && param(*v, "rs") < 1 &&
        param(*v, "spt") < 1 && param(*v, "ew") < 1)
      out.push_back(v);
  return out;
}

// sp1: pds2 with dQ before dK and dK left in flight into the next query
// block; sp2: sp1 with block m's dQ part handed over in block m + 1. sp = 0:
// both. Without the dc token (dc_variants), the spt token (spt_variants) and
// the ew token (ew_variants).
std::vector<const AttentionVariant*> sp_variants(int sp = 0) {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if ((sp == 0 ? param(*v, "sp") >= 1 : param(*v, "sp") == sp) && param(*v, "dc") < 1 && param(*v, "spt") < 1 &&
        param(*v, "ew") < 1)
      out.push_back(v);
  return out;
}

// dc1: sp1 d128 with the consumer warpgroups decoupled (dQ over each one's
// own keys, one dQ tile per warpgroup, two bulk adds per query block).
std::vector<const AttentionVariant*> dc_variants() {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if (param(*v, "dc") == 1) out.push_back(v);
  return out;
}

// rs1: pds3 d64 and pds2 d128 with dV and dK from registers (P^T, dS^T as
// wgmma A fragments).
std::vector<const AttentionVariant*> rs_variants() {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if (param(*v, "rs") == 1) out.push_back(v);
  return out;
}

// spt1: ordered pds3 d64, pds2 d64 / d128 and sp1 d128 with the dQ adds in
// FlashAttention-3's order (kernels/attention/wgmma/bwd_dq_order.h). Without
// the ew token (ew_variants).
std::vector<const AttentionVariant*> spt_variants() {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if (param(*v, "spt") == 1 && param(*v, "ew") < 1) out.push_back(v);
  return out;
}

// ew1, ew2 (issue 16, session 14): pds3 d64 with the exp loop without a branch
// per element (the mask a pass of its own) and D read ahead of the dS^T
// stores; ew2 also dQ issued before dK and handed over while dK runs
// (BwdKvEwConfig). Ordered with spt1, and atomic; ew1 also on sp1 d128.
// With them, wq1 (the same session: each warpgroup's dQ part handed to the
// writer warp alone, BwdKvWqConfig) on ew2 pds3 d64 and ew1 sp1 d128.
// ew = 0: all.
// Without the hs / ws tokens (hs_variants, ws_variants).
bool split_variant(const AttentionVariant& v) { return param(v, "hs") >= 2 || param(v, "ws") >= 2; }
// hs / ws: the CTAs per (batch, kv head, key block); 1 without.
int splits_of(const AttentionVariant& v) { return int(std::max<int64_t>({1, param(v, "hs"), param(v, "ws")})); }
std::vector<const AttentionVariant*> ew_variants(int ew = 0) {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if ((ew == 0 ? param(*v, "ew") >= 1 : param(*v, "ew") == ew) && !split_variant(*v)) out.push_back(v);
  return out;
}

// hs2, hs4 (issue 16, session 17: a kv head's query heads over 2 or 4 CTAs
// per key block) and ws2 (session 18: each causal key block's walk over 2
// CTAs), the dK / dV parts added in split order (KvHeadSplit): hs_variants,
// ws_variants (below, with their tests).
std::vector<const AttentionVariant*> hs_variants();
std::vector<const AttentionVariant*> ws_variants();

// A name without its "_<token><digit>" part: the variant a schedule
// variant reorders (sp: the pds2 one; dc: the sp1 one).
std::string without_token(const std::string& n, const std::string& token) {  // "_" token and its value's digits
  std::string b = n;
  const size_t at = b.find("_" + token);
  if (at != std::string::npos) b.erase(at, b.find('_', at + 1) - at);
  return b;
}
std::string sp_base_name(const std::string& n) { return without_token(n, "sp"); }
std::string dc_base_name(const std::string& n) { return without_token(n, "dc"); }
std::string rs_base_name(const std::string& n) { return without_token(n, "rs"); }
std::string spt_base_name(const std::string& n) { return without_token(n, "spt"); }
// ew: the name without its ew token; wq1: the ew variant it is built on.
std::string ew_base_name(const std::string& n) {
  if (n.find("_pb") != std::string::npos) {  // pb1: its ew2 variant (other bits)
    // d128: ew2 pds2 is not registered alone; sp1 ew1 has pds2's storage and workspace as well.
    std::string b = without_token(n, "pb");
    const size_t at = b.find("_pds2_ew2");
    return at == std::string::npos ? b : b.replace(at, 9, "_pds2_sp1_ew1");
  }
  return n.find("_wq") != std::string::npos ? without_token(n, "wq") : without_token(n, "ew");
}
// pb1 (issue 16, session 15: ew2 pds3 d64 with P^T as dV's A fragment in
// registers after the exp, dS^T from the bf16 P^T; BwdKvPbConfig; session 19:
// ew2 pds2 at d128 too): in the ew
// lists (float64 reference, sanitizer-sized, 20 repeats), not in the bitwise
// comparisons with the base (dS^T from the rounded P: other bits than ew2).
bool is_pb(const AttentionVariant* v) { return param(*v, "pb") >= 1; }
std::vector<const AttentionVariant*> without_pb(std::vector<const AttentionVariant*> vs) {
  std::erase_if(vs, is_pb);
  return vs;
}

// check_bits_equal_base's dq_equal beside false (dQ not compared) and true.
constexpr int kDqBitsDiffer = 2;

#define REQUIRE_SM90()                                                                        \
  do {                                                                                        \
    DETFUSE_REQUIRE_GPU();                                                                    \
    const DeviceInfo& dev_ = cached_device(0);                                                \
    if (dev_.compute_capability() != 90)                                                      \
      GTEST_SKIP() << "the wgmma attention forward needs an sm_90 device, device 0 is "       \
                   << dev_.name << " (cc " << dev_.cc_string() << ")";                        \
  } while (0)

TEST(AttentionWgmma, ThirtyEightVariantsRegisteredWithCanonicalNames) {
  const auto vs = wgmma_variants();
  ASSERT_EQ(vs.size(), 38u);  // session 23: bc176 ov1 ps1 rd1 (d128); session 24: four ov2; session 28: three ls1;
                              // session 30: two ot2
  int d64 = 0, d128 = 0;
  for (const auto* v : vs) {
    EXPECT_EQ(v->desc.name, VariantDesc::canonical_name(Family::attention, DType::bf16, "wgmma", "fwd", v->desc.params));
    EXPECT_TRUE(v->desc.deterministic);
    (param(*v, "d") == 64 ? d64 : d128) += 1;
  }
  EXPECT_EQ(d64, 17);
  EXPECT_EQ(d128, 21);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.fwd.br128_bc128_st2_ov0_pp0_d128"), nullptr);
  // The persistent ones (ps1); the older names carry no ps token.
  for (const char* n : {"attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_ps1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp1_ps1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc176_st2_ov0_pp0_ps1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov1_pp0_ps1_d64",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_ps1_qs2_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp1_ps1_qs2_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov1_pp0_ps1_qs2_d64",
                        // session 8: rd1 (tree reductions), ot1 (O by TMA store)
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp1_ps1_rd1_ot1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_rd1_ot1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc160_st2_ov1_pp0_ps1_rd1_ot1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc176_st2_ov1_pp0_ps1_rd1_d128",  // session 23
                        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64",
                        // session 15: three consumer warpgroups (192 query rows, d64)
                        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_d64",
                        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64",
                        // session 20: FlashAttention-4's launches, one CTA a tile
                        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64",
                        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov1_pp0_rd1_ot1_d64",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp1_rd1_ot1_d128",
                        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp1_rd1_ot1_d64",
                        // session 24: ov2, the overlapped loop rotated
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp1_rd1_ot1_d128",
                        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov2_pp0_rd1_ot1_d64",
                        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov2_pp0_ps1_rd1_ot1_d64",
                        // session 28: ls1, the split walk
                        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_rd1_ot1_ls1_d64",
                        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64",
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_ls1_d128",
                        // session 30: ot2, the O tile by stmatrix
                        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot2_d128",
                        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_rd1_ot2_d64"})
    EXPECT_NE(builtin_registry().find_attention(n), nullptr) << n;
  int ps = 0, rd = 0, ot = 0, ot2 = 0, br192 = 0;
  for (const auto* v : vs) {
    ps += param(*v, "ps") == 1;
    rd += param(*v, "rd") == 1;
    ot += param(*v, "ot") == 1;
    ot2 += param(*v, "ot") == 2;
    if (param(*v, "br") == 192) {
      ++br192;
      EXPECT_EQ(param(*v, "d"), 64) << v->desc.name;
      EXPECT_NE(v->desc.summary.find("3 consumer warpgroups"), std::string::npos) << v->desc.summary;
    } else {
      EXPECT_EQ(param(*v, "br"), 128) << v->desc.name;
      EXPECT_NE(v->desc.summary.find("2 consumer warpgroups"), std::string::npos) << v->desc.summary;
    }
  }
  EXPECT_EQ(ps, 20);  // session 23: bc176 ov1 ps1 rd1; session 24: ov2 ps1 at d64 and d128; session 28: ls1 ps1;
                      // session 30: ot2 ps1 d128
  EXPECT_EQ(rd, 22);
  EXPECT_EQ(ot, 16);
  EXPECT_EQ(ot2, 2);
  EXPECT_EQ(br192, 7);
}

TEST(AttentionWgmma, CanRunRefusesWithReasons) {
  DeviceInfo h200 = h200_info();
  DeviceInfo a100 = h200;
  a100.cc_major = 8;
  a100.max_smem_per_block_optin = 166912;
  for (const auto* v : wgmma_variants()) {
    SCOPED_TRACE(v->desc.name);
    AttentionProblem p;
    p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 1000, p.d = param(*v, "d");
    EXPECT_FALSE(v->can_run(p, AttentionMode::forward, h200).has_value());
    auto why = v->can_run(p, AttentionMode::backward, h200);
    ASSERT_TRUE(why.has_value());
    EXPECT_NE(why->find("forward only"), std::string::npos) << *why;
    why = v->can_run(p, AttentionMode::forward, a100);
    ASSERT_TRUE(why.has_value());
    EXPECT_NE(why->find("compute capability 9.0"), std::string::npos) << *why;
    AttentionProblem f = p;
    f.dtype = DType::f32;
    why = v->can_run(f, AttentionMode::forward, h200);
    ASSERT_TRUE(why.has_value());
    EXPECT_NE(why->find("bf16 only"), std::string::npos) << *why;
    for (int64_t d : {32, 96, 256, p.d == 64 ? 128 : 64}) {
      AttentionProblem q = p;
      q.d = d;
      why = v->can_run(q, AttentionMode::forward, h200);
      ASSERT_TRUE(why.has_value()) << "d=" << d;
      EXPECT_NE(why->find("head dim"), std::string::npos) << *why;
    }
  }
}

struct Case {
  int64_t B, H, Hkv, Sq, Sk;
  bool causal;
  double scale;  // 0: 1/sqrt(d)
  const char* what;
  double softcap = 0.0;
  int64_t window = 0;
};

// One forward into O and LSE prefilled with NaN bytes (any element the kernel
// does not write fails), `repeats` times with one digest of both, against the
// float64 reference; rows that see no key: O exactly 0 and LSE exactly -inf
// (never NaN). Fatal failures return from here: callers wrap it in
// ASSERT_NO_FATAL_FAILURE.
void expect_forward(const std::function<void()>& launch, const DeviceBuffer<uint16_t>& dOut,
                    const DeviceBuffer<float>& dL, const reference::AttentionResult& ref, int64_t d, int repeats) {
  ASSERT_EQ(cudaMemset(dOut.data(), 0xff, dOut.bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemset(dL.data(), 0xff, dL.bytes()), cudaSuccess);
  Digest first;
  for (int rep = 0; rep < repeats; ++rep) {
    launch();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "repeat " << rep;
    Digester dg;
    dg.add_device(dOut.data(), dOut.bytes());
    dg.add_device(dL.data(), dL.bytes());
    const Digest got = dg.finish();
    if (rep == 0) {
      first = got;
    } else {
      EXPECT_EQ(got, first) << "repeat " << rep << " differs: " << got.hex() << " vs " << first.hex();
    }
  }
  const std::vector<float> O = from_bf16_bits(dOut.download());
  const std::vector<float> L = dL.download();
  EXPECT_LE(reference::rel_norm_error(O, ref.O), 2e-2) << "O relative norm error";
  EXPECT_LE(reference::rel_norm_error(L, ref.lse), 1e-4) << "LSE relative norm error";
  for (size_t i = 0; i < L.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      ASSERT_TRUE(std::isinf(L[i]) && L[i] < 0) << "row " << i << " LSE " << L[i];
      for (int64_t k = 0; k < d; ++k) ASSERT_EQ(O[i * d + k], 0.f) << "row " << i;
    } else {
      ASSERT_TRUE(std::isfinite(L[i])) << "row " << i;
    }
  }
}

// The bf16 problem of a case at head dim d, validated.
AttentionProblem problem_of(const Case& c, int64_t d) {
  AttentionProblem p;
  p.B = c.B, p.H = c.H, p.Hkv = c.Hkv, p.Sq = c.Sq, p.Sk = c.Sk, p.d = d;
  p.causal = c.causal;
  p.scale = c.scale;
  p.dtype = DType::bf16;
  p.softcap = c.softcap;
  p.window = c.window;
  p.validate();
  return p;
}

const Case kCases[] = {
    {1, 2, 2, 128, 128, false, 0.0, "one block each way"},
    {2, 4, 2, 200, 333, false, 0.0, "GQA 2:1, Sq != Sk, odd lengths"},
    {1, 4, 1, 77, 300, true, 0.0, "causal Sq < Sk, GQA 4:1"},
    {2, 2, 1, 300, 129, true, 0.0, "causal Sq > Sk: a whole query block and part of another see no key"},
    {1, 3, 3, 1, 1000, false, 0.0, "a single query row"},
    {1, 2, 2, 1000, 17, true, 0.0, "causal, keys fewer than one block"},
    {1, 2, 1, 513, 513, true, 1.0, "large-magnitude scores (scale 1)"},
    {1, 1, 1, 700, 1500, false, 1.0, "large-magnitude scores, non-causal"},
    {1, 2, 1, 513, 513, true, 1.0, "softcap 5 on large-magnitude scores, causal", 5.0},
    {2, 4, 2, 200, 333, false, 0.0, "softcap 0.5 (every score bent), GQA 2:1", 0.5},
    {1, 4, 2, 300, 1000, false, 0.0, "window 200, Sq < Sk: keys 0..500 seen by nobody, blocks skipped", 0.0, 200},
    {1, 2, 2, 1000, 300, false, 0.0, "window 77, Sq > Sk, non-causal", 0.0, 77},
    {2, 2, 1, 300, 129, true, 0.0, "window 40, causal Sq > Sk: rows that see no key", 0.0, 40},
    {1, 4, 1, 700, 700, true, 1.0, "softcap 3 and window 150, causal, GQA 4:1", 3.0, 150},
    {1, 2, 2, 257, 257, true, 0.0, "window 1: the diagonal key only", 0.0, 1},
};

std::vector<uint16_t> bf16_bits(const std::vector<float>& v) { return to_bf16_bits(v); }

// A case's inputs (bf16-rounded) on the device, O and LSE buffers, the launch's arguments and the
// float64 reference forward.
struct ForwardData {
  reference::AttentionInputs in;
  reference::AttentionResult ref;
  DeviceBuffer<uint16_t> dQ, dK, dV, dOut;
  DeviceBuffer<float> dL;
  AttentionArgs a;
  ForwardData(const AttentionProblem& p, uint64_t seed)
      : in(reference::make_attention_inputs(p, seed)),
        ref(reference::attention_reference(p, in, /*backward=*/false)),
        dQ(in.Q.size()),
        dK(in.K.size()),
        dV(in.K.size()),
        dOut(in.Q.size()),
        dL(size_t(p.B * p.H * p.Sq)) {
    dQ.upload(bf16_bits(in.Q));
    dK.upload(bf16_bits(in.K));
    dV.upload(bf16_bits(in.V));
    a.Q = dQ.data(), a.K = dK.data(), a.V = dV.data(), a.O = dOut.data(), a.lse = dL.data();
  }
};

TEST(AttentionWgmmaGpu, MatchesFloat64ReferenceAndIsDeterministic) {
  REQUIRE_SM90();
  const DeviceInfo& dev = cached_device(0);
  int checked = 0;
  for (int64_t d : {64, 128}) {
    for (const Case& c : kCases) {
      const AttentionProblem p = problem_of(c, d);
      const ForwardData f(p, 1000 + uint64_t(d) + uint64_t(&c - kCases));
      for (const auto* v : wgmma_variants()) {
        if (param(*v, "d") != d) continue;
        SCOPED_TRACE(v->desc.name + " on " + p.key() + " (" + c.what + ")");
        ASSERT_FALSE(v->can_run(p, AttentionMode::forward, dev).has_value());
        ASSERT_NO_FATAL_FAILURE(expect_forward([&] { v->launch(p, AttentionMode::forward, f.a, nullptr); }, f.dOut,
                                               f.dL, f.ref, d, 5));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 38 * int(std::size(kCases)));  // the 38 forward variants (the CPU count test lists them)
}

// MatchesFloat64ReferenceAndIsDeterministic's cases accepted by every forward variant (can_run on
// an H200's DeviceInfo), checked on any machine (AttentionWgmmaBwd's
// GpuTestsCasesRunOnTheirVariants says why).
TEST(AttentionWgmma, GpuTestsCasesRunOnTheirVariants) {
  DeviceInfo h200 = h200_info();
  for (const auto* v : wgmma_variants())
    for (const Case& c : kCases) {
      const AttentionProblem p = problem_of(c, param(*v, "d"));
      const auto why = v->can_run(p, AttentionMode::forward, h200);
      EXPECT_FALSE(why.has_value()) << v->desc.name << " on " << p.key() << ": " << why.value_or("");
    }
}

// ------------------------------------------------- persistent forward (ps1)

// The persistent configurations, launched with a capped grid (0: one CTA per
// SM, as the registry launches them).
struct PsEntry {
  const char* name;
  int64_t d;
  void (*launch)(const AttentionProblem&, const AttentionArgs&, cudaStream_t, int, int);
};
const PsEntry kPs[] = {
    {"d128 bc128 st2 ov1 ps1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2OvPs>},
    {"d128 bc128 st2 ov1 pp1 ps1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2OvPpPs>},
    {"d128 bc176 st2 ps1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc176St2Ps>},
    {"d64 bc128 st3 ov1 ps1", 64, &attention::wg::launch_fwd_ctas<attention::wg::FwdD64Bc128St3OvPs>},
    {"d128 bc128 st2 ov1 ps1 qs2", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2OvPsQ2>},
    {"d128 bc128 st2 ov1 pp1 ps1 qs2", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2OvPpPsQ2>},
    {"d64 bc128 st3 ov1 ps1 qs2", 64, &attention::wg::launch_fwd_ctas<attention::wg::FwdD64Bc128St3OvPsQ2>},
    // session 8: rd1 (tree softmax reductions), ot1 (O by TMA store)
    {"d128 bc128 st2 ov1 ps1 rd1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2OvPsRd>},
    {"d128 bc128 st2 ov1 ps1 rd1 ot1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2OvPsRdOt>},
    {"d128 bc128 st2 ov1 pp1 ps1 rd1 ot1", 128,
     &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2OvPpPsRdOt>},
    {"d128 bc160 st2 ov1 ps1 rd1 ot1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc160St2OvPsRdOt>},
    {"d128 bc176 st2 ov1 ps1 rd1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc176St2OvPsRd>},
    {"d64 bc128 st3 ov1 ps1 rd1 ot1", 64, &attention::wg::launch_fwd_ctas<attention::wg::FwdD64Bc128St3OvPsRdOt>},
    // session 15: three consumer warpgroups, 192 query rows per tile
    {"d64 br192 bc128 st3 ov1 ps1 rd1", 64, &attention::wg::launch_fwd_ctas<attention::wg::FwdD64Br192Bc128St3OvPsRd>},
    {"d64 br192 bc128 st3 ov1 ps1 rd1 ot1", 64,
     &attention::wg::launch_fwd_ctas<attention::wg::FwdD64Br192Bc128St3OvPsRdOt>},
    // session 24: ov2, the overlapped loop rotated
    {"d128 bc128 st2 ov2 ps1 rd1 ot1", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2Ov2PsRdOt>},
    {"d64 bc128 st3 ov2 ps1 rd1 ot1", 64, &attention::wg::launch_fwd_ctas<attention::wg::FwdD64Bc128St3Ov2PsRdOt>},
    // session 30: ot2 (the O tile by stmatrix)
    {"d128 bc128 st2 ov2 ps1 rd1 ot2", 128, &attention::wg::launch_fwd_ctas<attention::wg::FwdD128Bc128St2Ov2PsRdOt2>},
};

// One problem through every persistent configuration of its head dim, with
// each grid cap of `ctas` and each causal head group of `groups` (0: the L2
// rule): float64 reference, rows without keys, `repeats` identical digests
// (O and LSE prefilled with NaN bytes).
void check_persistent(const Case& c, int64_t d, std::initializer_list<int> ctas, std::initializer_list<int> groups,
                      int repeats, uint64_t seed, const char* only = nullptr) {
  const AttentionProblem p = problem_of(c, d);
  const reference::AttentionInputs in = reference::make_attention_inputs(p, seed);
  const reference::AttentionResult ref = reference::attention_reference(p, in, /*backward=*/false);
  const size_t nq = in.Q.size(), nk = in.K.size(), nl = size_t(p.B * p.H * p.Sq);
  DeviceBuffer<uint16_t> dQ(nq), dK(nk), dV(nk), dOut(nq);
  DeviceBuffer<float> dL(nl);
  dQ.upload(bf16_bits(in.Q));
  dK.upload(bf16_bits(in.K));
  dV.upload(bf16_bits(in.V));
  AttentionArgs a;
  a.Q = dQ.data(), a.K = dK.data(), a.V = dV.data(), a.O = dOut.data(), a.lse = dL.data();
  int ran = 0;
  for (const PsEntry& e : kPs) {
    if (e.d != d) continue;
    if (only != nullptr && std::string(e.name).find(only) == std::string::npos) continue;
    for (int n : ctas)
    for (int g : groups) {
      if (!c.causal && g != *groups.begin()) continue;  // the group orders causal tiles only
      SCOPED_TRACE(std::string(e.name) + " ctas " + std::to_string(n) + " group " + std::to_string(g) + " on " +
                   p.key() + " (" + c.what + ")");
      ASSERT_NO_FATAL_FAILURE(expect_forward([&] { e.launch(p, a, nullptr, n, g); }, dOut, dL, ref, d, repeats));
      ++ran;
    }
  }
  EXPECT_GT(ran, 0);
}

// Every CTA walks many tiles: more tiles than SMs with the full grid (216 and
// 288 tiles), and grids of 1 and 7 CTAs (Q phases over dozens of tiles,
// with one and two Q buffers; causal head groups of 1 and 5 put tiles
// without keys between tiles with keys, so the Q buffer index and the tile
// index differ; the K/V ring carried over tile boundaries
// with any remainder of the stage count).
const Case kPsCases[] = {
    {2, 12, 4, 1100, 900, true, 0.0, "causal Sq > Sk, GQA 3:1, 216 tiles"},
    {3, 12, 12, 1000, 1000, false, 0.0, "non-causal, 288 tiles"},
    {2, 6, 3, 600, 200, true, 0.0, "causal Sq > Sk: whole query blocks see no key, between tiles that do"},
    {1, 8, 2, 700, 1300, true, 1.0, "softcap 4 and window 300, causal Sq < Sk, large scores", 4.0, 300},
    {2, 4, 4, 333, 257, false, 0.0, "window 64, Sq > Sk, non-causal: blocks skipped on both sides", 0.0, 64},
    {1, 3, 1, 1, 513, true, 0.0, "one query row per head"},
};

TEST(AttentionWgmmaGpu, PersistentManyTilesPerCta) {
  REQUIRE_SM90();
  for (int64_t d : {64, 128})
    for (const Case& c : kPsCases)
      check_persistent(c, d, {0, 1, 7}, {0, 1, 5}, 2, 7000 + uint64_t(d) + uint64_t(&c - kPsCases));
}

// Session 18's launch orders (experiments read at every launch, so a test
// switches them between launches): the persistent causal forward's snake
// (DETFUSE_FWD_SNAKE=1: one group over every head; 2: over the L2 groups)
// on every persistent configuration, grids of 1, 7 CTAs and the full grid,
// against the float64 reference; and its O, LSE bit for bit those of the
// order without it (each tile is computed alone).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
};
TEST(AttentionWgmmaGpu, PersistentSnakeOrder) {
  REQUIRE_SM90();
  for (const char* mode : {"1", "2"}) {
    ScopedEnv env("DETFUSE_FWD_SNAKE", mode);
    for (int64_t d : {64, 128})
      for (const Case& c : kPsCases)
        if (c.causal) check_persistent(c, d, {0, 1, 7}, {0, 5}, 2, 7400 + uint64_t(d) + uint64_t(&c - kPsCases));
  }
  const Case c{2, 12, 4, 1100, 900, true, 0.0, "causal Sq > Sk, GQA 3:1, 216 tiles"};
  const AttentionProblem p = problem_of(c, 128);
  const reference::AttentionInputs in = reference::make_attention_inputs(p, 7500);
  DeviceBuffer<uint16_t> dQ(in.Q.size()), dK(in.K.size()), dV(in.K.size()), dOut(in.Q.size());
  DeviceBuffer<float> dL(size_t(p.B * p.H * p.Sq));
  dQ.upload(bf16_bits(in.Q));
  dK.upload(bf16_bits(in.K));
  dV.upload(bf16_bits(in.V));
  AttentionArgs a;
  a.Q = dQ.data(), a.K = dK.data(), a.V = dV.data(), a.O = dOut.data(), a.lse = dL.data();
  for (const PsEntry& e : kPs) {
    if (e.d != 128) continue;
    SCOPED_TRACE(e.name);
    std::string o[3], l[3];
    for (int k = 0; k < 3; ++k) {
      ScopedEnv env("DETFUSE_FWD_SNAKE", k == 0 ? "0" : k == 1 ? "1" : "2");
      EXPECT_EQ(cudaMemset(dOut.data(), 0xff, dOut.bytes()), cudaSuccess);
      e.launch(p, a, nullptr, 7, 0);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      o[k] = digest_device(dOut.data(), dOut.bytes()).hex();
      l[k] = digest_device(dL.data(), dL.bytes()).hex();
    }
    EXPECT_EQ(o[0], o[1]);
    EXPECT_EQ(o[0], o[2]);
    EXPECT_EQ(l[0], l[1]);
    EXPECT_EQ(l[0], l[2]);
  }
}

// Session 40: the one-tile-a-CTA causal forwards take the tile of their linear index in the order of
// groups of heads (fwd_lpt_group; DETFUSE_FWD_GROUP forces a group, 1 the order before: head after
// head). Every non-persistent forward on causal cases with 15 and 12 (batch, head) pairs, groups of 1,
// 4 (the last group smaller: 3 pairs) and every pair: against the float64 reference, and O and LSE bit
// for bit the same in every order (each tile is computed alone).
TEST(AttentionWgmmaGpu, NonPersistentCausalGroupOrders) {
  REQUIRE_SM90();
  const Case cases[] = {{3, 5, 5, 600, 500, true, 0.0, "causal Sq > Sk, 15 heads: groups of 4 end on 3"},
                        {2, 6, 2, 300, 700, true, 0.0, "causal Sq < Sk, GQA 3:1, 12 heads"}};
  int compared = 0;
  for (const Case& c : cases) {
    for (int64_t d : {64, 128}) {
      const AttentionProblem p = problem_of(c, d);
      const ForwardData f(p, 7700 + uint64_t(d) + uint64_t(&c - cases));
      for (const auto* v : wgmma_variants()) {
        if (param(*v, "d") != d || param(*v, "ps") == 1) continue;
        std::string o[3], l[3];
        int k = 0;
        for (const char* group : {"1", "4", "1000"}) {
          SCOPED_TRACE(v->desc.name + " on " + p.key() + " (" + c.what + "), DETFUSE_FWD_GROUP=" + group);
          ScopedEnv env("DETFUSE_FWD_GROUP", group);
          ASSERT_NO_FATAL_FAILURE(expect_forward([&] { v->launch(p, AttentionMode::forward, f.a, nullptr); }, f.dOut,
                                                 f.dL, f.ref, d, 2));
          o[k] = digest_device(f.dOut.data(), f.dOut.bytes()).hex();
          l[k] = digest_device(f.dL.data(), f.dL.bytes()).hex();
          ++k;
        }
        EXPECT_EQ(o[1], o[0]) << v->desc.name;
        EXPECT_EQ(o[2], o[0]) << v->desc.name;
        EXPECT_EQ(l[1], l[0]) << v->desc.name;
        EXPECT_EQ(l[2], l[0]) << v->desc.name;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 8);
}

// Small enough for compute-sanitizer (memcheck, racecheck, synccheck), every
// persistent configuration (one and two Q buffers): causal Sq > Sk over 16
// tiles (query block 0 sees no key, block 1 one key block, blocks 2 and 3 two,
// so the overlapped loop and the ping-pong take a turn), heads one group at a
// time, on 2 CTAs (one of them alternates tiles with and without keys) and on
// the full grid (one tile per CTA).
//
// kSanitizerCases: this causal case, and (TmaOSanitizerSized,
// ThreeWarpgroupsSanitizerSized) a non-causal GQA one with odd lengths.
const Case kSanitizerCases[] = {
    {2, 2, 1, 400, 200, true, 0.0, "sanitizer-sized causal Sq > Sk", 0.0, 0},
    {1, 4, 2, 200, 333, false, 0.0, "sanitizer-sized non-causal GQA 2:1, odd lengths", 0.0, 0}};

TEST(AttentionWgmmaGpu, PersistentSanitizerSized) {
  REQUIRE_SM90();
  const Case& c = kSanitizerCases[0];
  for (int64_t d : {64, 128}) check_persistent(c, d, {2, 0}, {1}, 1, 9000 + uint64_t(d));
}

// ------------------------------------- session 8: rd1 and ot1 (O by TMA store)

// The sanitizer-sized case for the O-by-TMA configurations alone (ot1: the
// shared O tile reused tile after tile behind the bulk store's read wait): the
// persistent ones on 2 CTAs and the full grid, and the non-persistent ones (d128
// rd1 ot1 with and without the ping-pong; d64 br128, br192 and br192 pp1, session 20), on
// the causal Sq > Sk case above and on a non-causal GQA one with odd lengths.
TEST(AttentionWgmmaGpu, TmaOSanitizerSized) {
  REQUIRE_SM90();
  const DeviceInfo& dev = cached_device(0);
  int ran = 0;
  for (const Case& c : kSanitizerCases) {
    for (int64_t d : {64, 128}) {
      check_persistent(c, d, {2, 0}, {1}, 1, 9100 + uint64_t(d), " ot");  // ot1 and ot2
      const AttentionProblem p = problem_of(c, d);
      const ForwardData f(p, 9200 + uint64_t(d));
      for (const auto* v : wgmma_variants()) {
        if (param(*v, "ot") < 1 || param(*v, "ps") == 1 || param(*v, "d") != d) continue;
        SCOPED_TRACE(v->desc.name + " on " + p.key() + " (" + c.what + ")");
        ASSERT_FALSE(v->can_run(p, AttentionMode::forward, dev).has_value());
        ASSERT_NO_FATAL_FAILURE(expect_forward([&] { v->launch(p, AttentionMode::forward, f.a, nullptr); }, f.dOut,
                                               f.dL, f.ref, d, 1));
        ++ran;
      }
    }
  }
  // 2 cases x (d128: rd1 ot1, pp1 rd1 ot1, ov2 pp1 rd1 ot1; d64: br128 rd1 ot1, br192 rd1 ot1 and pp1
  // rd1 ot1, ov2 br128 rd1 ot1, ov2 br192 rd1 ot1 ls1 (session 28), br192 rd1 ot2 (session 30)).
  EXPECT_EQ(ran, 18);
}

// The TMA store of the last query block of a head covers BR rows, past Sq:
// the tensor map must clip them. O is placed at the start of a larger buffer
// whose tail (and, through the head order, every other head's rows) must stay
// untouched: 0xff bytes after the launch, on a problem whose last block is
// mostly past Sq (Sq = 130: 126 of its 128 rows; br192: 62 of the 192 rows
// of the one query block).
TEST(AttentionWgmmaGpu, TmaOStoresNoRowPastSq) {
  REQUIRE_SM90();
  const Case c{2, 3, 3, 130, 300, false, 0.0, "Sq = 130: the second query block holds 2 rows", 0.0, 0};
  int ran = 0;
  for (const auto* v : wgmma_variants()) {
    if (param(*v, "ot") < 1) continue;
    const int64_t d = param(*v, "d");
    const AttentionProblem p = problem_of(c, d);
    SCOPED_TRACE(v->desc.name + " on " + p.key());
    const reference::AttentionInputs in = reference::make_attention_inputs(p, 9300 + uint64_t(d));
    const reference::AttentionResult ref = reference::attention_reference(p, in, /*backward=*/false);
    const size_t nq = in.Q.size(), guard = size_t(128 * d);
    DeviceBuffer<uint16_t> dQ(nq), dK(in.K.size()), dV(in.K.size()), dOut(nq + guard);
    DeviceBuffer<float> dL(size_t(p.B * p.H * p.Sq));
    dQ.upload(bf16_bits(in.Q));
    dK.upload(bf16_bits(in.K));
    dV.upload(bf16_bits(in.V));
    ASSERT_EQ(cudaMemset(dOut.data(), 0xff, dOut.bytes()), cudaSuccess);
    AttentionArgs a;
    a.Q = dQ.data(), a.K = dK.data(), a.V = dV.data(), a.O = dOut.data(), a.lse = dL.data();
    v->launch(p, AttentionMode::forward, a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> all = dOut.download();
    for (size_t i = nq; i < all.size(); ++i) ASSERT_EQ(all[i], 0xffffu) << "element " << i - nq << " past O";
    const std::vector<float> O = from_bf16_bits(std::vector<uint16_t>(all.begin(), all.begin() + nq));
    EXPECT_LE(reference::rel_norm_error(O, ref.O), 2e-2) << "O relative norm error";
    ++ran;
  }
  // The 16 ot1 variants (10 ov1, the 4 ov2 of session 24 and 2 ov2 ls1 of session 28) and the 2 ot2.
  EXPECT_EQ(ran, 18);
}

// ------------------------- session 15: three consumer warpgroups (br192, d64)

// The sanitizer-sized run of the three-warpgroup forwards alone (192 query
// rows per tile, 512 threads): on the causal Sq > Sk case the first query
// block sees no key, the second two key blocks (the overlapped loop's turn),
// the last one 16 rows; the non-causal GQA case has a last query block of 8
// rows and a partial key block; 2 CTAs and the full grid.
TEST(AttentionWgmmaGpu, ThreeWarpgroupsSanitizerSized) {
  REQUIRE_SM90();
  for (const Case& c : kSanitizerCases) check_persistent(c, 64, {2, 0}, {1}, 1, 9400, "br192");
}

// ------------------------------------- session 24: ov2 (the overlapped loop rotated)

// Each pair of forward variants: O and LSE bitwise equal on every case of the
// float64 test (softcap, window, causal, GQA, rows without keys), O and LSE
// prefilled with 0xff bytes before each launch. seed: the inputs' seed base.
void expect_forward_twins_bitwise(std::initializer_list<std::pair<const char*, const char*>> twins, uint64_t seed) {
  int compared = 0;
  for (const auto& [name2, name1] : twins) {
    const AttentionVariant* a2 = builtin_registry().find_attention(name2);
    const AttentionVariant* a1 = builtin_registry().find_attention(name1);
    ASSERT_NE(a2, nullptr) << name2;
    ASSERT_NE(a1, nullptr) << name1;
    const int64_t d = param(*a2, "d");
    for (const Case& c : kCases) {
      const AttentionProblem p = problem_of(c, d);
      SCOPED_TRACE(std::string(name2) + " against " + name1 + " on " + p.key() + " (" + c.what + ")");
      const reference::AttentionInputs in = reference::make_attention_inputs(p, seed + uint64_t(&c - kCases));
      DeviceBuffer<uint16_t> dQ(in.Q.size()), dK(in.K.size()), dV(in.K.size()), dOut(in.Q.size());
      DeviceBuffer<float> dL(size_t(p.B * p.H * p.Sq));
      dQ.upload(bf16_bits(in.Q));
      dK.upload(bf16_bits(in.K));
      dV.upload(bf16_bits(in.V));
      AttentionArgs a;
      a.Q = dQ.data(), a.K = dK.data(), a.V = dV.data(), a.O = dOut.data(), a.lse = dL.data();
      std::string o[2], l[2];
      int k = 0;
      for (const AttentionVariant* v : {a1, a2}) {
        ASSERT_FALSE(v->can_run(p, AttentionMode::forward, cached_device(0)).has_value());
        ASSERT_EQ(cudaMemset(dOut.data(), 0xff, dOut.bytes()), cudaSuccess);
        ASSERT_EQ(cudaMemset(dL.data(), 0xff, dL.bytes()), cudaSuccess);
        v->launch(p, AttentionMode::forward, a, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        o[k] = digest_device(dOut.data(), dOut.bytes()).hex();
        l[k] = digest_device(dL.data(), dL.bytes()).hex();
        ++k;
      }
      EXPECT_EQ(o[1], o[0]) << "O";
      EXPECT_EQ(l[1], l[0]) << "LSE";
      ++compared;
    }
  }
  EXPECT_EQ(compared, int(twins.size() * std::size(kCases)));
}

// ov2 runs ov1's operations in another order of waits only: O and LSE bitwise
// its ov1 twin's, both head dims, persistent or not.
TEST(AttentionWgmmaGpu, Ov2BitsEqualOv1) {
  REQUIRE_SM90();
  expect_forward_twins_bitwise(
      {{"attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128",
        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128"},
       {"attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp1_rd1_ot1_d128",
        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov1_pp1_rd1_ot1_d128"},
       {"attention.bf16.wgmma.fwd.br128_bc128_st3_ov2_pp0_rd1_ot1_d64",
        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov1_pp0_rd1_ot1_d64"},
       {"attention.bf16.wgmma.fwd.br128_bc128_st3_ov2_pp0_ps1_rd1_ot1_d64",
        "attention.bf16.wgmma.fwd.br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64"},
       // Session 28: ls1 (the split walk, softcap decided outside its unmasked loop) and ov2 together
       // against the d64 heuristics' ov1 forwards and the d128 heuristic's ov2 one.
       {"attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_rd1_ot1_ls1_d64",
        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64"},
       {"attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64",
        "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_d64"},
       {"attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_ls1_d128",
        "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128"}},
      9500);
}

// ot2 (session 30) writes ot1's values into the O tile by stmatrix instead of a store per pair of
// columns: O and LSE bitwise ot1's, two consumer warpgroups (persistent) at d128 and three (the
// re-read thread coordinates, one CTA a tile) at d64.
TEST(AttentionWgmmaGpu, Ot2BitsEqualOt1) {
  REQUIRE_SM90();
  expect_forward_twins_bitwise({{"attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot2_d128",
                                 "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128"},
                                {"attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_rd1_ot2_d64",
                                 "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64"}},
                               9600);
}

// The heuristic's d64 causal forward (the persistent ov2 ls1 one: on H100s since session 31, on every Hopper GPU
// since session 42) and the one-tile-a-CTA br192 rd1 ot1 it took over from (the H200's before): a database tuned
// before session 42 or a retune may pick either, and the gradients must not depend on it: O and LSE bitwise equal.
TEST(AttentionWgmmaGpu, HeuristicD64CausalForwardsBitsEqual) {
  REQUIRE_SM90();
  expect_forward_twins_bitwise({{"attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64",
                                 "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64"}},
                               9700);
}

// ------------------------------------------------------------------ backward

TEST(AttentionWgmmaBwd, EightyFourVariantsRunBothModesWithReasonsAndWorkspace) {
  const auto vs = wgmma_bwd_variants();
  ASSERT_EQ(vs.size(), 84u);  // session 21: pb2, pb3 at d64 and pb3 at d128; session 22: pb5, pb7 at d64, pb6 at d64 and d128; session 23: pb8 at d128, pds4 pb5 and pb7, pb9 at d64 (ordered, atomic); session 27: pds4 pb5 hs2; session 32: pb2, pb9 retired, pb10 and wq1 pb5 (d64, ordered) added; session 35: pds4 pb5 se1 (d128, ordered)
  DeviceInfo h200 = h200_info();
  DeviceInfo a100 = h200;
  a100.cc_major = 8;
  int owning = 0, atomic = 0, partials = 0, ordered = 0;
  for (const auto* v : vs) {
    SCOPED_TRACE(v->desc.name);
    EXPECT_EQ(v->desc.name, VariantDesc::canonical_name(Family::attention, DType::bf16, "wgmma", v->desc.strategy,
                                                        v->desc.params));
    EXPECT_EQ(v->desc.deterministic, v->desc.strategy != "atomic");
    const std::string& s = v->desc.strategy;
    ASSERT_TRUE(s == "owning" || s == "atomic" || s == "partials" || s == "ordered") << s;
    (s == "owning" ? owning : s == "atomic" ? atomic : s == "partials" ? partials : ordered) += 1;
    AttentionProblem p;
    p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = param(*v, "d"), p.causal = true;
    for (auto mode : {AttentionMode::forward, AttentionMode::backward}) {
      EXPECT_FALSE(v->can_run(p, mode, h200).has_value());
      auto why = v->can_run(p, mode, a100);
      ASSERT_TRUE(why.has_value());
      EXPECT_NE(why->find("compute capability 9.0"), std::string::npos) << *why;
      AttentionProblem q = p;
      q.d = p.d == 64 ? 128 : 64;
      why = v->can_run(q, mode, h200);
      ASSERT_TRUE(why.has_value());
      EXPECT_NE(why->find("d: head dim"), std::string::npos) << *why;
      q = p;
      q.dtype = DType::f32;
      why = v->can_run(q, mode, h200);
      ASSERT_TRUE(why.has_value());
      EXPECT_NE(why->find("dtype"), std::string::npos) << *why;
    }
    EXPECT_EQ(v->workspace_bytes(p, AttentionMode::forward), 0u);
    size_t extra = v->desc.strategy == "atomic" ? attention::dq_acc_bytes(p) : 0;
    const int br = int(param(*v, "br"));
    const bool tma = param(*v, "tma") == 1;
    if (v->desc.strategy == "ordered")
      extra = (tma ? attention::wg::dq_tile_acc_bytes(p, br) : attention::dq_acc_bytes(p)) +
              attention::ordered_sem_bytes(p, br);
    if (v->desc.strategy == "atomic" && tma) extra = attention::wg::dq_tile_acc_bytes(p, br);
    if (tma) extra += attention::wg::dq_done_bytes(p, splits_of(*v));  // the overlapped convert's counts
    // pds2, pds3: LSE and D padded to whole query blocks, fp32, two 256-byte aligned halves.
    if (param(*v, "pds") >= 2) extra += 2 * attention::align256(size_t(p.B * p.H * ((p.Sq + br - 1) / br) * br) * 4);
    // hs, ws: the dK / dV parts' fp32 sums ([B, Hkv, Sk, d] each) and a semaphore per (batch, kv head, key block).
    if (split_variant(*v))
      extra += attention::align256(2 * size_t(p.B * p.Hkv * p.Sk * p.d) * 4) +
               attention::align256(size_t(p.B * p.Hkv * ((p.Sk + 127) / 128)) * 4);
    if (v->desc.strategy == "partials") {
      const auto pl = attention::plan_partials(p, 128, size_t(param(*v, "mb")) << 20);
      ASSERT_TRUE(pl.has_value());
      extra = pl->slab_bytes + pl->acc_bytes;
    }
    EXPECT_EQ(v->workspace_bytes(p, AttentionMode::backward), attention::d_bytes(p) + extra);
  }
  EXPECT_EQ(owning, 6);
  EXPECT_EQ(atomic, 32);  // session 21: pb2, pb3 d64, pb3 d128 (ordered and atomic each); session 22: pb5, pb6, pb7; session 23: pb8, pds4 pb5 / pb7, pb9; session 32: pb2, pb9 retired
  EXPECT_EQ(partials, 3);
  EXPECT_EQ(ordered, 43);  // session 27: pds4 pb5 hs2; session 32: pb2, pb9 retired, pb10 and wq1 pb5 (d64) added; session 35: pds4 pb5 se1
  // hs: refused, with the reason, where the query heads per kv head are not a multiple of the split.
  ASSERT_EQ(hs_variants().size(), 3u);  // sp1 ew1 hs2, hs4; pds4 pb5 hs2 (session 27)
  for (const auto* v : hs_variants()) {
    SCOPED_TRACE(v->desc.name);
    AttentionProblem p;
    p.B = 2, p.H = 6, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = 128, p.causal = true;  // 3 query heads a kv head
    const auto why = v->can_run(p, AttentionMode::backward, h200);
    ASSERT_TRUE(why.has_value());
    EXPECT_NE(why->find("must be a multiple of " + std::to_string(param(*v, "hs"))), std::string::npos) << *why;
    EXPECT_FALSE(v->can_run(p, AttentionMode::forward, h200).has_value());
    p.H = 2;  // MHA: one query head a kv head
    EXPECT_TRUE(v->can_run(p, AttentionMode::backward, h200).has_value());
    p.H = 16;  // 8 a kv head
    EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
  }
  // ws: any group (the split is of the walk).
  ASSERT_EQ(ws_variants().size(), 1u);
  for (const auto* v : ws_variants()) {
    SCOPED_TRACE(v->desc.name);
    AttentionProblem p;
    p.B = 2, p.H = 6, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = 128, p.causal = true;
    EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
    p.Hkv = 6;
    EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
    p.d = 64;
    EXPECT_TRUE(v->can_run(p, AttentionMode::backward, h200).has_value());
  }
  EXPECT_EQ(pds_variants().size(), 6u);
  for (const auto* v : pds_variants()) {
    SCOPED_TRACE(v->desc.name);
    EXPECT_EQ(param(*v, "tma"), 1) << "pds: TMA dQ only";
    EXPECT_EQ(param(*v, "br"), 64);
  }
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds1_d128"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds1_d128"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.ordered.br64_bc128_st3_tma1_pds1_d64"), nullptr);
  EXPECT_EQ(pds_variants(2).size(), 4u);
  for (const char* n : {"attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_d128",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_d64",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_d64"})
    EXPECT_NE(builtin_registry().find_attention(n), nullptr) << n;
  // pds3: d64 at 128 queries per step, 227 KB of shared memory (the H200's
  // opt-in maximum: a device with less is refused with the reason).
  EXPECT_EQ(pds_variants(3).size(), 2u);
  for (const char* n : {"attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_d64"}) {
    const auto* v = builtin_registry().find_attention(n);
    ASSERT_NE(v, nullptr) << n;
    EXPECT_EQ(param(*v, "br"), 128);
    AttentionProblem p;
    p.B = 1, p.H = 2, p.Hkv = 1, p.Sq = 300, p.Sk = 300, p.d = 64;
    EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
    DeviceInfo small = h200;
    small.max_smem_per_block_optin = 232448 - 1024;
    const auto why = v->can_run(p, AttentionMode::backward, small);
    ASSERT_TRUE(why.has_value()) << n;
    EXPECT_NE(why->find("shared"), std::string::npos) << *why;
  }
  // sp1, sp2: pds2 d128 (the new token after pds); sp1 ordered and atomic, sp2 ordered.
  EXPECT_EQ(sp_variants(1).size(), 2u);
  EXPECT_EQ(sp_variants(2).size(), 1u);
  for (const char* n : {"attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_sp1_d128",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp2_d128"}) {
    const auto* v = builtin_registry().find_attention(n);
    ASSERT_NE(v, nullptr) << n;
    EXPECT_EQ(param(*v, "pds"), 2);
    EXPECT_EQ(v->desc.deterministic, v->desc.strategy == "ordered");
    // The schedule adds no shared memory and no workspace to pds2's.
    const auto* base = builtin_registry().find_attention(sp_base_name(n));
    ASSERT_NE(base, nullptr) << sp_base_name(n);
    AttentionProblem p;
    p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = 128, p.causal = true;
    EXPECT_EQ(v->workspace_bytes(p, AttentionMode::backward), base->workspace_bytes(p, AttentionMode::backward));
  }
  // dc1: sp1 d128 with the warpgroups decoupled (the dc token after sp),
  // ordered and atomic; sp1's workspace (one tile-blocked dQ accumulator, both
  // warpgroups' parts added into it), but 227 KB of shared memory (one dQ tile
  // per warpgroup): refused with the reason where a block may have 8 KB less,
  // where sp1 still runs.
  EXPECT_EQ(dc_variants().size(), 2u);
  for (const char* n : {"attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_dc1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_sp1_dc1_d128"}) {
    const auto* v = builtin_registry().find_attention(n);
    ASSERT_NE(v, nullptr) << n;
    EXPECT_EQ(param(*v, "pds"), 2);
    EXPECT_EQ(param(*v, "sp"), 1);
    EXPECT_EQ(v->desc.deterministic, v->desc.strategy == "ordered");
    const auto* base = builtin_registry().find_attention(dc_base_name(n));
    ASSERT_NE(base, nullptr) << dc_base_name(n);
    AttentionProblem p;
    p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = 128, p.causal = true;
    EXPECT_EQ(v->workspace_bytes(p, AttentionMode::backward), base->workspace_bytes(p, AttentionMode::backward));
    EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
    DeviceInfo small = h200;
    small.max_smem_per_block_optin = 232448 - 8192;
    EXPECT_FALSE(base->can_run(p, AttentionMode::backward, small).has_value());
    const auto why = v->can_run(p, AttentionMode::backward, small);
    ASSERT_TRUE(why.has_value()) << n;
    EXPECT_NE(why->find("shared"), std::string::npos) << *why;
  }
  // rs1: pds3 (d64) and pds2 (d128) with dV, dK from registers (the rs
  // token last); the base's workspace, less shared memory (no P^T tile).
  EXPECT_EQ(rs_variants().size(), 4u);
  for (const char* n : {"attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_rs1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_rs1_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_rs1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_rs1_d128"}) {
    const auto* v = builtin_registry().find_attention(n);
    ASSERT_NE(v, nullptr) << n;
    const int d = int(param(*v, "d"));
    EXPECT_EQ(param(*v, "pds"), d == 64 ? 3 : 2);
    EXPECT_EQ(v->desc.deterministic, v->desc.strategy == "ordered");
    const auto* base = builtin_registry().find_attention(rs_base_name(n));
    ASSERT_NE(base, nullptr) << rs_base_name(n);
    AttentionProblem p;
    p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = d, p.causal = true;
    EXPECT_EQ(v->workspace_bytes(p, AttentionMode::backward), base->workspace_bytes(p, AttentionMode::backward));
    // Runs where a block may have 16 KB less than the H200's opt-in maximum
    // (d64: where pds3 does not).
    DeviceInfo small = h200;
    small.max_smem_per_block_optin = 232448 - 16384;
    EXPECT_FALSE(v->can_run(p, AttentionMode::backward, small).has_value());
    if (d == 64) EXPECT_TRUE(base->can_run(p, AttentionMode::backward, small).has_value());
  }
  // spt1: the ordered pds3 d64, sp1 d128 and pds2 d64 / d128 kv kernels with
  // FlashAttention-3's order of the dQ adds (the spt token last): the base's
  // workspace and shared memory, ordered (deterministic) only.
  EXPECT_EQ(spt_variants().size(), 4u);
  for (const char* n : {"attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_spt1_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_spt1_d128",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_spt1_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_spt1_d128"}) {
    const auto* v = builtin_registry().find_attention(n);
    ASSERT_NE(v, nullptr) << n;
    EXPECT_TRUE(v->desc.deterministic);
    EXPECT_EQ(param(*v, "tma"), 1);
    EXPECT_GE(param(*v, "pds"), 2);
    const auto* base = builtin_registry().find_attention(spt_base_name(n));
    ASSERT_NE(base, nullptr) << spt_base_name(n);
    for (bool causal : {true, false}) {
      AttentionProblem p;
      p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = param(*v, "d"), p.causal = causal;
      EXPECT_EQ(v->workspace_bytes(p, AttentionMode::backward), base->workspace_bytes(p, AttentionMode::backward));
      EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
      DeviceInfo small = h200;
      small.max_smem_per_block_optin = 232448 - 1024;
      EXPECT_EQ(v->can_run(p, AttentionMode::backward, small).has_value(),
                base->can_run(p, AttentionMode::backward, small).has_value());
    }
  }
  // ew1, ew2: pds3 d64 (the ew token after the schedule's, before spt),
  // ordered with spt1 and atomic; ew1 also on sp1 d128: the base's workspace
  // and shared memory (where a block has 1 KB less, pds3 and its ew variants
  // are refused, sp1 and its ew1 run; pb on pds3 runs there since session 31). wq1 (the wq token after ew): on ew2
  // pds3 and ew1 sp1, the ew variant's workspace and shared memory.
  EXPECT_EQ(ew_variants(1).size(), 6u);
  EXPECT_EQ(ew_variants(2).size(), 29u);  // with pb1 (ew2 pds3 d64 and pds2 d128, ordered spt1 and atomic; no P^T tile since session 31, so less shared memory than ew2's), pb3 (d64, d128), pb5 (d64), pb6 (d64, d128), pb7 (d64), pb8 (d128), pds4 pb5 / pb7 (d128), pb10 (d64, ordered), wq1 over pb5 (d64, ordered), pds4 pb5 se1 (d128, ordered)
  for (const char* n : {"attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew1_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew1_d64",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_sp1_ew1_d128",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_wq1_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_wq1_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_wq1_spt1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_sp1_ew1_wq1_d128",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb1_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_pb1_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_ew2_pb1_spt1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_ew2_pb1_d128",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb3_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_pb3_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_ew2_pb3_spt1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_ew2_pb3_d128",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_pb5_d64",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb6_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_pb6_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_ew2_pb6_spt1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_ew2_pb6_d128",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb7_spt1_d64",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_pb7_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_ew2_pb8_spt1_d128",
                        "attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_pds2_ew2_pb8_d128",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb10_spt1_d64",
                        "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_wq1_pb5_spt1_d64"}) {
    const auto* v = builtin_registry().find_attention(n);
    ASSERT_NE(v, nullptr) << n;
    EXPECT_EQ(v->desc.deterministic, v->desc.strategy == "ordered");
    const int d = int(param(*v, "d"));
    EXPECT_EQ(param(*v, "pds"), d == 64 ? 3 : 2);
    const auto* base = builtin_registry().find_attention(ew_base_name(n));
    ASSERT_NE(base, nullptr) << ew_base_name(n);
    for (bool causal : {true, false}) {
      AttentionProblem p;
      p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = d, p.causal = causal;
      EXPECT_EQ(v->workspace_bytes(p, AttentionMode::backward), base->workspace_bytes(p, AttentionMode::backward));
      EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
      AttentionProblem ps = p;  // softcap runs on every one (pb1 too since session 16)
      ps.softcap = 30.0;
      EXPECT_FALSE(v->can_run(ps, AttentionMode::backward, h200).has_value()) << n;
      DeviceInfo small = h200;
      small.max_smem_per_block_optin = 232448 - 1024;
      // (pb at d64: no P^T tile since session 31, so 1 KB less is room enough.)
      EXPECT_EQ(v->can_run(p, AttentionMode::backward, small).has_value(), d == 64 && param(*v, "pb") < 1) << n;
      EXPECT_EQ(base->can_run(p, AttentionMode::backward, small).has_value(), d == 64);
    }
  }
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.owning.br64_bc128_st3_qbc64_qst3_d128"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst3_d64"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.partials.br64_bc128_st4_d128_mb256"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.atomic.br64_bc128_st2_tma1_d128"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_d64"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.ordered.br64_bc128_st2_d128"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.ordered.br64_bc128_st2_d64"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.partials.br64_bc128_st2_d128_mb256"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst2_d128"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.atomic.br64_bc128_st2_d128"), nullptr);
}

// pds4 (branch s23-br80): 80 queries a step at d128, pb5 and pb7, ordered (spt1) and atomic; the
// workspace of an 80-query tiling (the tile-blocked dQ accumulator, the semaphores, the LSE / D
// staging: ceil(Sq / 80) blocks of 80); every option on an H200 (causal, softcap, window, GQA,
// Sq != Sk), refused by a block with 1 KB less shared memory (224 KB of tiles, as pds3) and at d64.
TEST(AttentionWgmmaBwd, Pds4EightyQueryVariants) {
  DeviceInfo h200 = h200_info();
  DeviceInfo small = h200;
  small.max_smem_per_block_optin = 232448 - 1024;
  int n = 0, se = 0;
  for (const auto* v : wgmma_bwd_variants()) {
    if (param(*v, "pds") != 4 || split_variant(*v)) continue;  // (pds4 pb5 hs2: the hs family's tests)
    SCOPED_TRACE(v->desc.name);
    ++n;
    // se1 (session 35): the ordered pb5 kernel with dK / dV staged (BwdKvSeConfig); no token elsewhere.
    if (param(*v, "se") != -1) {
      EXPECT_EQ(param(*v, "se"), 1);
      EXPECT_EQ(param(*v, "pb"), 5);
      EXPECT_EQ(v->desc.strategy, "ordered");
      ++se;
    }
    EXPECT_NE(v->desc.summary.find(param(*v, "se") == 1 ? "dK, dV staged through the K / V tiles"
                                                        : "dK, dV stored from the accumulators as 4-byte pairs"),
              std::string::npos)
        << v->desc.summary;
    EXPECT_EQ(param(*v, "br"), 80);
    EXPECT_EQ(param(*v, "d"), 128);
    EXPECT_EQ(param(*v, "ew"), 2);
    EXPECT_TRUE(param(*v, "pb") == 5 || param(*v, "pb") == 7);
    EXPECT_EQ(v->desc.deterministic, v->desc.strategy == "ordered");
    EXPECT_EQ(param(*v, "spt"), v->desc.strategy == "ordered" ? 1 : -1);  // (-1: no such token)
    for (bool causal : {false, true}) {
      AttentionProblem p;
      p.B = 2, p.H = 8, p.Hkv = 2, p.Sq = 1000, p.Sk = 700, p.d = 128, p.causal = causal;
      size_t want = attention::d_bytes(p) + attention::wg::dq_tile_acc_bytes(p, 80) +
                    attention::wg::pds_stage_bytes(p, 80) + attention::wg::dq_done_bytes(p);
      if (v->desc.strategy == "ordered") want += attention::ordered_sem_bytes(p, 80);
      EXPECT_EQ(v->workspace_bytes(p, AttentionMode::backward), want);
      EXPECT_GT(attention::wg::dq_tile_acc_bytes(p, 80), size_t(p.B * p.H * p.Sq * p.d * 4))
          << "13 blocks of 80 for 1000 rows";
      EXPECT_FALSE(v->can_run(p, AttentionMode::backward, h200).has_value());
      AttentionProblem q = p;
      q.softcap = 50.0, q.window = 300, q.Sq = 333, q.Sk = 1001;
      EXPECT_FALSE(v->can_run(q, AttentionMode::backward, h200).has_value());
      EXPECT_TRUE(v->can_run(p, AttentionMode::backward, small).has_value());
      q.d = 64;
      EXPECT_TRUE(v->can_run(q, AttentionMode::backward, h200).has_value());
    }
  }
  EXPECT_EQ(n, 5);
  EXPECT_EQ(se, 1);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128"),
            nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.wgmma.atomic.br80_bc128_st2_tma1_pds4_ew2_pb7_d128"),
            nullptr);
}

const Case kBwdCases[] = {
    {1, 2, 2, 128, 128, false, 0.0, "one block each way"},
    {2, 4, 2, 200, 333, false, 0.0, "GQA 2:1, Sq != Sk, odd lengths"},
    {1, 4, 1, 77, 300, true, 0.0, "causal Sq < Sk, GQA 4:1"},
    {2, 2, 1, 300, 129, true, 0.0, "causal Sq > Sk: rows with no visible key"},
    {1, 6, 2, 257, 257, true, 0.0, "causal square, GQA 3:1, one row past the blocks"},
    {1, 2, 2, 1000, 17, true, 0.0, "causal, keys fewer than one block"},
    {1, 2, 1, 513, 700, false, 1.0, "large-magnitude scores (scale 1), GQA 2:1"},
    {1, 2, 1, 513, 700, true, 1.0, "softcap 5 on large-magnitude scores, causal Sq < Sk", 5.0},
    {2, 4, 2, 200, 333, false, 0.0, "softcap 0.5 (every score bent), GQA 2:1", 0.5},
    {1, 4, 2, 300, 1000, false, 0.0, "window 200, Sq < Sk: key blocks no query sees", 0.0, 200},
    {1, 2, 2, 1000, 300, false, 0.0, "window 77, Sq > Sk, non-causal: query blocks skipped", 0.0, 77},
    {2, 2, 1, 300, 129, true, 0.0, "window 40, causal Sq > Sk: rows that see no key", 0.0, 40},
    {1, 6, 2, 700, 700, true, 1.0, "softcap 3 and window 150, causal, GQA 3:1", 3.0, 150},
    {1, 2, 2, 257, 257, true, 0.0, "window 1: the diagonal key only", 0.0, 1},
};

// Forward by the variant, then backward from its O and LSE; dQ, dK, dV
// against the float64 reference on the bf16-rounded inputs; 5 repeats of the
// backward (`repeats` of them): deterministic variants give one digest per
// output, atomic reports its dQ digests (dK and dV must still repeat). Returns
// the (variant, case) pairs checked.

int check_backward(const std::vector<const AttentionVariant*>& variants, const Case* cases, size_t n_cases,
                   uint64_t seed0, int repeats = 5) {
  const DeviceInfo& dev = cached_device(0);
  int checked = 0;
  for (int64_t d : {64, 128}) {
    for (size_t ci = 0; ci < n_cases; ++ci) {
      const Case& c = cases[ci];
      const AttentionProblem p = problem_of(c, d);
      bool any = false;
      for (const auto* v : variants) any = any || param(*v, "d") == d;
      if (!any) continue;
      const uint64_t seed = seed0 + uint64_t(d) + ci;
      const reference::AttentionInputs in = reference::make_attention_inputs(p, seed);  // bf16-rounded
      const reference::AttentionResult ref = reference::attention_reference(p, in, /*backward=*/true);
      const size_t nq = in.Q.size(), nk = in.K.size(), nl = size_t(p.B * p.H * p.Sq);
      DeviceBuffer<uint16_t> Q(nq), K(nk), V(nk), dO(nq), O(nq), dQ(nq), dK(nk), dV(nk);
      DeviceBuffer<float> L(nl);
      Q.upload(bf16_bits(in.Q));
      K.upload(bf16_bits(in.K));
      V.upload(bf16_bits(in.V));
      dO.upload(bf16_bits(in.dO));
      for (const auto* v : variants) {
        if (param(*v, "d") != d) continue;
        SCOPED_TRACE(v->desc.name + " on " + p.key() + " (" + c.what + ")");
        EXPECT_FALSE(v->can_run(p, AttentionMode::backward, dev).has_value());
        if (v->can_run(p, AttentionMode::backward, dev)) continue;
        AttentionArgs f;
        f.Q = Q.data(), f.K = K.data(), f.V = V.data(), f.O = O.data(), f.lse = L.data();
        v->launch(p, AttentionMode::forward, f, nullptr);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        DeviceBytes ws(v->workspace_bytes(p, AttentionMode::backward));
        AttentionArgs a;
        a.Q = Q.data(), a.K = K.data(), a.V = V.data(), a.dO = dO.data(), a.O_in = O.data(), a.lse_in = L.data();
        a.dQ = dQ.data(), a.dK = dK.data(), a.dV = dV.data();
        a.workspace = ws.get(), a.workspace_size = ws.bytes();
        std::set<std::string> dq_digests, dk_digests, dv_digests;
        for (int rep = 0; rep < repeats; ++rep) {
          // NaN bytes: any element the kernels do not write fails the check;
          // the workspace too (the kernels initialise what they read).
          for (auto* b : {&dQ, &dK, &dV}) EXPECT_EQ(cudaMemset(b->data(), 0xff, b->bytes()), cudaSuccess);
          EXPECT_EQ(cudaMemset(ws.get(), 0xff, ws.bytes()), cudaSuccess);
          v->launch(p, AttentionMode::backward, a, nullptr);
          EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "repeat " << rep;
          dq_digests.insert(digest_device(dQ.data(), dQ.bytes()).hex());
          dk_digests.insert(digest_device(dK.data(), dK.bytes()).hex());
          dv_digests.insert(digest_device(dV.data(), dV.bytes()).hex());
        }
        EXPECT_EQ(dk_digests.size(), 1u) << "dK is not bitwise repeatable";
        EXPECT_EQ(dv_digests.size(), 1u) << "dV is not bitwise repeatable";
        if (v->desc.deterministic) {
          EXPECT_EQ(dq_digests.size(), 1u) << "dQ is not bitwise repeatable";
        } else {
          std::printf("[ INFO     ] %s %s: %zu distinct dQ digests over %d repeats (atomic)\n",
                      v->desc.name.c_str(), p.key().c_str(), dq_digests.size(), repeats);
        }
        const auto gQ = from_bf16_bits(dQ.download()), gK = from_bf16_bits(dK.download()),
                   gV = from_bf16_bits(dV.download());
        EXPECT_LE(reference::rel_norm_error(gQ, ref.dQ), 2e-2) << "dQ relative norm error";
        EXPECT_LE(reference::rel_norm_error(gK, ref.dK), 2e-2) << "dK relative norm error";
        EXPECT_LE(reference::rel_norm_error(gV, ref.dV), 2e-2) << "dV relative norm error";
        size_t nan = 0;
        for (const auto* t : {&gQ, &gK, &gV})
          for (float x : *t) nan += std::isnan(x) ? 1 : 0;
        EXPECT_EQ(nan, 0u) << "NaN elements in dQ, dK, dV";
        // Rows that see no key: dQ exactly 0.
        size_t nonzero = 0;
        for (size_t i = 0; i < nl; ++i)
          if (std::isinf(ref.lse[i]))
            for (int64_t k = 0; k < d; ++k) nonzero += gQ[i * d + k] != 0.f ? 1 : 0;
        EXPECT_EQ(nonzero, 0u) << "dQ elements of rows that see no key are not 0";
        ++checked;
      }
    }
  }
  return checked;
}

// Every backward variant but the split ones (hs, ws: can_run takes only a
// query-head group that is a multiple of the split; they have their own
// float64, sanitizer and repeat tests on GQA cases that fit, below).
std::vector<const AttentionVariant*> unsplit_bwd_variants() {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if (!split_variant(*v)) out.push_back(v);
  return out;
}

TEST(AttentionWgmmaBwdGpu, MatchesFloat64ReferenceAndRepeats) {
  REQUIRE_SM90();
  const auto vs = unsplit_bwd_variants();
  const int checked = check_backward(vs, kBwdCases, std::size(kBwdCases), 2000);
  EXPECT_EQ(checked, int(vs.size() * std::size(kBwdCases)));
}

// Sanitizer-sized (compute-sanitizer memcheck / racecheck / synccheck): every
// forward+backward variant once (forward, 2 backwards) on one small causal GQA
// problem with Sq != Sk, odd lengths and rows that see no key.
const Case kBwdSanitizerCases[] = {{1, 4, 2, 150, 131, true, 0.0, "sanitizer: causal GQA 2:1, Sq > Sk, odd lengths"}};
TEST(AttentionWgmmaBwdGpu, SanitizerSized) {
  REQUIRE_SM90();
  const auto vs = unsplit_bwd_variants();
  EXPECT_EQ(check_backward(vs, kBwdSanitizerCases, std::size(kBwdSanitizerCases), 4000, /*repeats=*/2),
            int(vs.size()));
}

// Sanitizer-sized, softcap and window: Sk = 331 (3 key blocks), Sq = 150
// (3 query blocks of 64), window 100: causal, key block 0 sees only query
// block 0 and key block 2 none of block 0; non-causal, query blocks 1 and 2
// are not seen by key block 0 (the ordered dQ of those starts at key block 1).
const Case kBwdSanitizerSoftcapWindowCases[] = {
    {1, 4, 2, 150, 331, true, 0.0, "sanitizer: softcap 2, window 100, causal GQA 2:1", 2.0, 100},
    {1, 2, 1, 150, 331, false, 0.0, "sanitizer: window 100, non-causal", 0.0, 100},
};
TEST(AttentionWgmmaBwdGpu, SanitizerSizedSoftcapWindow) {
  REQUIRE_SM90();
  const auto vs = unsplit_bwd_variants();
  const auto& cases = kBwdSanitizerSoftcapWindowCases;
  EXPECT_EQ(check_backward(vs, cases, std::size(cases), 4100, /*repeats=*/2), int(vs.size() * std::size(cases)));
}

// The ordered variants alone (plain and TMA semaphores) on the non-causal
// window case above, where query blocks 1 and 2 start at key block 1: the
// racecheck filter of experiments/device/attnfeat.sh.
// The ordered variants without the split ones (hs, ws: their own tests).
std::vector<const AttentionVariant*> ordered_unsplit_bwd_variants() {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : unsplit_bwd_variants())
    if (v->desc.strategy == "ordered") out.push_back(v);
  return out;
}

const Case kOrderedWindowCases[] = {
    {1, 2, 1, 150, 331, false, 0.0, "sanitizer: window 100, softcap 2, non-causal", 2.0, 100}};
TEST(AttentionWgmmaBwdGpu, SanitizerSizedWindowOrdered) {
  REQUIRE_SM90();
  const auto vs = ordered_unsplit_bwd_variants();
  ASSERT_EQ(vs.size(), 39u);  // session 19: pb1 at d128; session 21: pb2, pb3 (d64), pb3 (d128); session 22: pb5, pb7 (d64), pb6 (d64, d128); session 23: pb8 (d128), pds4 pb5 / pb7, pb9 (d64); session 32: pb2, pb9 retired, pb10 and wq1 pb5 (d64) added; session 35: pds4 pb5 se1
  EXPECT_EQ(check_backward(vs, kOrderedWindowCases, std::size(kOrderedWindowCases), 4200, /*repeats=*/2),
            int(vs.size()));
}

// Ordered dQ over many key blocks (18 per unit, 8 units): every key block of
// a query block waits for the ones before it, across GQA heads, causal (key
// blocks that skip the first query blocks) and not.
const Case kOrderedManyCases[] = {
    {2, 8, 4, 640, 2304, false, 0.0, "ordered: 18 key blocks, GQA 2:1"},
    {2, 8, 4, 2100, 2304, true, 0.0, "ordered: 18 key blocks, causal Sq < Sk, odd Sq"},
    // Windows: the key blocks that walk a query block start after 0
    // (n_lo(m) > 0), so the semaphore counts from there.
    {1, 4, 2, 2100, 2304, true, 0.0, "ordered: window 700, causal, softcap 20", 20.0, 700},
    {1, 4, 2, 640, 2304, false, 0.0, "ordered: window 500, non-causal Sq < Sk", 0.0, 500},
};
TEST(AttentionWgmmaBwdGpu, OrderedManyKeyBlocks) {
  REQUIRE_SM90();
  const auto vs = ordered_unsplit_bwd_variants();
  ASSERT_EQ(vs.size(), 39u);  // session 19: pb1 at d128; session 21: pb2, pb3 (d64), pb3 (d128); session 22: pb5, pb7 (d64), pb6 (d64, d128); session 23: pb8 (d128), pds4 pb5 / pb7, pb9 (d64); session 32: pb2, pb9 retired, pb10 and wq1 pb5 (d64) added; session 35: pds4 pb5 se1
  const auto& cases = kOrderedManyCases;
  EXPECT_EQ(check_backward(vs, cases, std::size(cases), 5000), int(vs.size() * std::size(cases)));
}

// What the GPU tests above expect of the registry, checked on any machine: they
// skip without an sm_90 device, so a registry change that breaks them shows
// only there (session 20 found five failing on the H200 since sessions 18 and
// 19, whose device runs took filtered subsets: hs2 / hs4 refused their cases,
// the ordered lists had grown). Every variant of each generic test accepts
// each of its cases (can_run on an H200's DeviceInfo), as check_backward
// expects.
TEST(AttentionWgmmaBwd, GpuTestsCasesRunOnTheirVariants) {
  DeviceInfo h200 = h200_info();
  auto all_run = [&](const std::vector<const AttentionVariant*>& vs, const Case* cases, size_t n) {
    for (const auto* v : vs)
      for (size_t i = 0; i < n; ++i) {
        const AttentionProblem p = problem_of(cases[i], param(*v, "d"));
        const auto why = v->can_run(p, AttentionMode::backward, h200);
        EXPECT_FALSE(why.has_value()) << v->desc.name << " on " << p.key() << ": " << why.value_or("");
      }
  };
  all_run(unsplit_bwd_variants(), kBwdCases, std::size(kBwdCases));
  all_run(unsplit_bwd_variants(), kBwdSanitizerCases, std::size(kBwdSanitizerCases));
  all_run(unsplit_bwd_variants(), kBwdSanitizerSoftcapWindowCases, std::size(kBwdSanitizerSoftcapWindowCases));
  all_run(ordered_unsplit_bwd_variants(), kOrderedWindowCases, std::size(kOrderedWindowCases));
  all_run(ordered_unsplit_bwd_variants(), kOrderedManyCases, std::size(kOrderedManyCases));
  EXPECT_EQ(ordered_unsplit_bwd_variants().size(), 39u);
  EXPECT_EQ(unsplit_bwd_variants().size(), wgmma_bwd_variants().size() - hs_variants().size() - ws_variants().size());
}

// The pds variants alone (the device script's filter; the tests above walk
// them too): every backward case, the ordered many-key-block cases and the
// sanitizer-sized ones.
TEST(AttentionWgmmaBwdGpu, PdsMatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = pds_variants();
  ASSERT_EQ(vs.size(), 6u);
  EXPECT_EQ(check_backward(vs, kBwdCases, std::size(kBwdCases), 6000), int(vs.size() * std::size(kBwdCases)));
  const Case many[] = {
      {2, 8, 4, 640, 2304, false, 0.0, "pds: 18 key blocks, GQA 2:1"},
      {2, 8, 4, 2100, 2304, true, 0.0, "pds: 18 key blocks, causal Sq < Sk, odd Sq"},
      {1, 4, 2, 2100, 2304, true, 0.0, "pds: window 700, causal, softcap 20", 20.0, 700},
  };
  EXPECT_EQ(check_backward(vs, many, std::size(many), 6100), int(vs.size() * std::size(many)));
}

// Sanitizer-sized (compute-sanitizer memcheck / racecheck / synccheck over the
// pds variants of one generation): the causal GQA case with rows that see no
// key, and softcap + window (query blocks that start at key block 1).
void check_pds_sanitizer_sized(const std::vector<const AttentionVariant*>& vs, uint64_t seed0) {
  const Case cases[] = {
      {1, 4, 2, 150, 131, true, 0.0, "sanitizer: causal GQA 2:1, Sq > Sk, odd lengths"},
      {1, 2, 1, 150, 331, false, 0.0, "sanitizer: window 100, softcap 2, non-causal", 2.0, 100},
  };
  EXPECT_EQ(check_backward(vs, cases, std::size(cases), seed0, /*repeats=*/2), int(vs.size() * std::size(cases)));
}

// 20 repeats, one digest for dQ, dK, dV of every deterministic pds variant of
// one generation (atomic: dK, dV), at 18 key blocks per (batch, kv head),
// causal and not.
void check_pds_twenty_repeats(const std::vector<const AttentionVariant*>& vs, uint64_t seed0) {
  const Case cases[] = {
      {2, 4, 2, 1100, 2304, false, 0.0, "20 repeats, 18 key blocks, GQA 2:1"},
      {2, 4, 2, 2304, 2304, true, 0.0, "20 repeats, 18 key blocks, causal"},
  };
  EXPECT_EQ(check_backward(vs, cases, std::size(cases), seed0, /*repeats=*/20), int(vs.size() * std::size(cases)));
}

// The cases of the pds2, pds3, sp and dc1 tests below (the device scripts'
// filters: AttentionWgmmaBwdGpu.Pds2*, .Pds3*, .Sp*, .Dc1*): every backward
// case, then 18 key blocks (GQA, causal with odd Sq, softcap + window) and
// 4100 queries over 1000 keys: 65 query blocks of 64 per key block (33 of
// 128), which reuse both dS^T tiles of pds2 / pds3 many times, wrap the
// two-stage Q / dO ring 32 times with sp's Q stage held one block longer and
// let dc1's warpgroups drift over the whole walk.
void check_schedule_cases(const std::vector<const AttentionVariant*>& vs, uint64_t seed0) {
  EXPECT_EQ(check_backward(vs, kBwdCases, std::size(kBwdCases), seed0), int(vs.size() * std::size(kBwdCases)));
  const Case many[] = {
      {2, 8, 4, 640, 2304, false, 0.0, "18 key blocks, GQA 2:1"},
      {2, 8, 4, 2100, 2304, true, 0.0, "18 key blocks, causal Sq < Sk, odd Sq"},
      {1, 4, 2, 2100, 2304, true, 0.0, "window 700, causal, softcap 20", 20.0, 700},
      {1, 2, 1, 4100, 1000, true, 0.0, "4100 queries over 1000 keys, causal Sq > Sk"},
  };
  EXPECT_EQ(check_backward(vs, many, std::size(many), seed0 + 100), int(vs.size() * std::size(many)));
}

TEST(AttentionWgmmaBwdGpu, PdsSanitizerSized) {
  REQUIRE_SM90();
  check_pds_sanitizer_sized(pds_variants(1), 6200);
}

TEST(AttentionWgmmaBwdGpu, PdsTwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(pds_variants(1), 6300);
}

// The pds2 variants (dS^T double-buffered by query-block parity, LSE and D
// brought by the producer; d128 with one dQ tile): the same cases as the pds1
// tests above (the device script's filter: AttentionWgmmaBwdGpu.Pds2*).
TEST(AttentionWgmmaBwdGpu, Pds2MatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = pds_variants(2);
  ASSERT_EQ(vs.size(), 4u);
  check_schedule_cases(vs, 7000);
}

TEST(AttentionWgmmaBwdGpu, Pds2SanitizerSized) {
  REQUIRE_SM90();
  check_pds_sanitizer_sized(pds_variants(2), 7200);
}

TEST(AttentionWgmmaBwdGpu, Pds2TwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(pds_variants(2), 7300);
}

// The pds3 variants (d64, 128 queries per step: P^T / dS^T over two swizzle
// atoms, the dQ product split by queries, one dQ tile): the pds2 cases
// (the device script's filter: AttentionWgmmaBwdGpu.Pds3*). At BR = 128 the
// 18-key-block cases have 5 .. 17 query blocks per key block, the 4100-row
// one 33 (both dS^T tiles reused many times); odd Sq leaves a partial last
// query block of 128 (4 rows in 2100, 22 in 150).
TEST(AttentionWgmmaBwdGpu, Pds3MatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = pds_variants(3);
  ASSERT_EQ(vs.size(), 2u);
  check_schedule_cases(vs, 8000);
}

TEST(AttentionWgmmaBwdGpu, Pds3SanitizerSized) {
  REQUIRE_SM90();
  check_pds_sanitizer_sized(pds_variants(3), 8200);
}

TEST(AttentionWgmmaBwdGpu, Pds3TwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(pds_variants(3), 8300);
}

// Q, K, V, dO of make_attention_inputs(p, seed) on the device and O, LSE of
// v's forward over them: what a backward launch reads; backward() runs v's
// backward over them into dQ, dK, dV (its workspace set to 0xff first).
struct ForwardDone {
  const AttentionVariant& v;
  const AttentionProblem p;
  reference::AttentionInputs in;
  size_t nq, nk;
  DeviceBuffer<uint16_t> Q, K, V, dO, O;
  DeviceBuffer<float> L;
  DeviceBytes ws;
  ForwardDone(const AttentionVariant& v_, const AttentionProblem& p_, uint64_t seed)
      : v(v_), p(p_), in(reference::make_attention_inputs(p, seed)), nq(in.Q.size()), nk(in.K.size()), Q(nq),
        K(nk), V(nk), dO(nq), O(nq), L(size_t(p.B) * p.H * p.Sq), ws(v.workspace_bytes(p, AttentionMode::backward)) {
    Q.upload(bf16_bits(in.Q));
    K.upload(bf16_bits(in.K));
    V.upload(bf16_bits(in.V));
    dO.upload(bf16_bits(in.dO));
    AttentionArgs f;
    f.Q = Q.data(), f.K = K.data(), f.V = V.data(), f.O = O.data(), f.lse = L.data();
    v.launch(p, AttentionMode::forward, f, nullptr);
  }
  // A backward's arguments over these inputs (no workspace).
  AttentionArgs args(void* dQ, void* dK, void* dV) const {
    AttentionArgs a;
    a.Q = Q.data(), a.K = K.data(), a.V = V.data(), a.dO = dO.data(), a.O_in = O.data(), a.lse_in = L.data();
    a.dQ = dQ, a.dK = dK, a.dV = dV;
    return a;
  }
  // (v.launch's refusal propagates as its Error.)
  void backward(void* dQ, void* dK, void* dV) {
    ASSERT_EQ(cudaMemset(ws.get(), 0xff, ws.bytes()), cudaSuccess);
    AttentionArgs a = args(dQ, dK, dV);
    a.workspace = ws.get(), a.workspace_size = ws.bytes();
    v.launch(p, AttentionMode::backward, a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

// One backward of v over fw's forward into dQ, dK, dV (all three and a fresh workspace prefilled with 0xff
// bytes first): the digests of dQ, dK, dV.
std::array<std::string, 3> backward_digests(const AttentionVariant& v, const AttentionProblem& p, const ForwardDone& fw,
                                            DeviceBuffer<uint16_t>& dQ, DeviceBuffer<uint16_t>& dK,
                                            DeviceBuffer<uint16_t>& dV) {
  DeviceBytes ws(v.workspace_bytes(p, AttentionMode::backward));
  AttentionArgs a = fw.args(dQ.data(), dK.data(), dV.data());
  a.workspace = ws.get(), a.workspace_size = ws.bytes();
  for (auto* b : {&dQ, &dK, &dV}) EXPECT_EQ(cudaMemset(b->data(), 0xff, b->bytes()), cudaSuccess);
  EXPECT_EQ(cudaMemset(ws.get(), 0xff, ws.bytes()), cudaSuccess);
  v.launch(p, AttentionMode::backward, a, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {digest_device(dQ.data(), dQ.bytes()).hex(), digest_device(dK.data(), dK.bytes()).hex(),
          digest_device(dV.data(), dV.bytes()).hex()};
}

// Each variant of vs against its base (base_of(name)) on a causal GQA problem
// with 18 key blocks and on softcap + window, from one forward (the base's):
// dK and dV bitwise equal unless dkdv_equal is false (a variant that walks
// the query blocks in another order sums dK and dV in that order too; dv_only:
// dV alone); dQ
// too where dq_equal says so (the variant and its base deterministic and
// summing in the same order). Returns the pairs compared.
// (other_cases: those instead of the two; dq_equal = kDqBitsDiffer: dQ must
// differ from the base's, the variant summing in another order.)
int check_bits_equal_base(const std::vector<const AttentionVariant*>& vs,
                          std::string (*base_of)(const std::string&), int dq_equal, uint64_t seed0,
                          const std::vector<Case>& other_cases = {}, bool dkdv_equal = true, bool dv_only = false) {
  const DeviceInfo& dev = cached_device(0);
  std::vector<Case> cases = {
      {2, 4, 2, 2100, 2304, true, 0.0, "18 key blocks, causal Sq < Sk, GQA 2:1"},
      {1, 4, 2, 1000, 1300, true, 0.0, "window 300, causal, softcap 20", 20.0, 300},
  };
  if (!other_cases.empty()) cases = other_cases;
  int compared = 0;
  for (const auto* v : vs) {
    const std::string bn = base_of(v->desc.name);
    const auto* base = builtin_registry().find_attention(bn);
    EXPECT_NE(base, nullptr) << bn;
    if (base == nullptr) continue;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const AttentionProblem p = problem_of(cases[ci], param(*v, "d"));
      SCOPED_TRACE(v->desc.name + " against " + bn + " on " + p.key() + " (" + cases[ci].what + ")");
      EXPECT_FALSE(v->can_run(p, AttentionMode::backward, dev).has_value());
      if (v->can_run(p, AttentionMode::backward, dev)) continue;
      // One forward (the base's) feeds both backwards.
      const ForwardDone fw(*base, p, seed0 + ci);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      DeviceBuffer<uint16_t> dQ(fw.nq), dK(fw.nk), dV(fw.nk);
      const std::array<std::string, 3> digests[2] = {backward_digests(*base, p, fw, dQ, dK, dV),
                                                     backward_digests(*v, p, fw, dQ, dK, dV)};
      if (dq_equal == 1 && v->desc.deterministic) EXPECT_EQ(digests[0][0], digests[1][0]) << "dQ bits differ from the base's";
      if (dq_equal == kDqBitsDiffer) EXPECT_NE(digests[0][0], digests[1][0]) << "dQ summed in the base's order";
      if (dkdv_equal) {
        if (!dv_only) EXPECT_EQ(digests[0][1], digests[1][1]) << "dK bits differ from the base's";
        EXPECT_EQ(digests[0][2], digests[1][2]) << "dV bits differ from the base's";
      }
      ++compared;
    }
  }
  return compared;
}

// The sp variants (pds2 d128 with dQ issued before dK and dK left in
// flight into the next query block, the Q stage released one block later;
// sp2: the dQ part handed over one block later too).
TEST(AttentionWgmmaBwdGpu, SpMatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = sp_variants();
  ASSERT_EQ(vs.size(), 3u);
  check_schedule_cases(vs, 9000);
}

TEST(AttentionWgmmaBwdGpu, SpSanitizerSized) {
  REQUIRE_SM90();
  check_pds_sanitizer_sized(sp_variants(), 9200);
}

TEST(AttentionWgmmaBwdGpu, SpTwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(sp_variants(), 9300);
}

// sp1 and sp2 reorder when the products are issued and waited on and when
// the dQ part is handed over, not what they compute nor the order of any
// fp32 operation: ordered sp gives pds2's bits for dQ, dK and dV, atomic sp
// pds2's dK and dV (its dQ is added in arrival order).
TEST(AttentionWgmmaBwdGpu, SpBitwiseEqualsPds2) {
  REQUIRE_SM90();
  EXPECT_EQ(check_bits_equal_base(sp_variants(), sp_base_name, /*dq_equal=*/true, 9400), 6);
}

// The dc1 variants (sp1 d128 with the consumer warpgroups decoupled: each
// forms dQ over its own 64 keys from its own dS^T rows, one dQ tile per
// warpgroup, two bulk adds per query block; ordered: the semaphore counts two
// adds per key block, warpgroup 0's first).
TEST(AttentionWgmmaBwdGpu, Dc1MatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = dc_variants();
  ASSERT_EQ(vs.size(), 2u);
  check_schedule_cases(vs, 9500);
}

TEST(AttentionWgmmaBwdGpu, Dc1SanitizerSized) {
  REQUIRE_SM90();
  check_pds_sanitizer_sized(dc_variants(), 9700);
}

// 20 repeats, one digest (ordered: dQ too) at 18 key blocks, causal and not.
TEST(AttentionWgmmaBwdGpu, Dc1TwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(dc_variants(), 9800);
}

// dc1 changes how dQ is grouped (two 64-key parts per key block added one
// after the other instead of one 128-key part), so its dQ bits differ from
// sp1's; dK and dV are the same products on the same operands in the same
// order: sp1's bits, ordered and atomic.
TEST(AttentionWgmmaBwdGpu, Dc1BitwiseDkDvEqualSp1) {
  REQUIRE_SM90();
  EXPECT_EQ(check_bits_equal_base(dc_variants(), dc_base_name, /*dq_equal=*/false, 9900), 4);
}

// The rs1 variants (pds3 d64 and pds2 d128 with dV += P^T dO and dK += dS^T Q
// from registers: no P^T tile, dK issued before the dS^T barrier; d64 with
// two LSE / D stages): the pds3 / pds2 cases (the device script's filter:
// AttentionWgmmaBwdGpu.Rs1*).
TEST(AttentionWgmmaBwdGpu, Rs1MatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = rs_variants();
  ASSERT_EQ(vs.size(), 4u);
  check_schedule_cases(vs, 10000);
}

TEST(AttentionWgmmaBwdGpu, Rs1SanitizerSized) {
  REQUIRE_SM90();
  check_pds_sanitizer_sized(rs_variants(), 10200);
}

// 20 repeats, one digest (ordered: dQ too) at 18 key blocks, causal and not.
TEST(AttentionWgmmaBwdGpu, Rs1TwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(rs_variants(), 10300);
}

// rs1 takes the A operands of dV and dK from registers instead of shared
// memory: the same bf16 values (P^T, dS^T rounded as pds3 / pds2 round them),
// the same products in the same k order, dS^T for dQ stored as the base
// stores it: the base's bits for dK, dV (and dQ where deterministic:
// ordered). Base: pds3 at d64, pds2 at d128 (the name without rs1).
TEST(AttentionWgmmaBwdGpu, Rs1BitwiseEqualsBase) {
  REQUIRE_SM90();
  EXPECT_EQ(check_bits_equal_base(rs_variants(), rs_base_name, /*dq_equal=*/true, 10400), 8);
}

// spt1 (issue 16): the ordered pds2 / pds3 kv kernels with the dQ adds in
// FlashAttention-3's order (kernels/attention/wgmma/bwd_dq_order.h: causal,
// query blocks ascending from the diagonal, the key block on the diagonal
// first, the grid's last key block first; non-causal without a window, each
// key block starting on its own query block and walking them cyclically;
// otherwise today's order). Every backward case, the many-key-block ones
// (shift over 18 key blocks, causal Sq < Sk, window) and 4100 queries over
// 1000 keys (the device script's filter: AttentionWgmmaBwdGpu.Spt1*).
TEST(AttentionWgmmaBwdGpu, Spt1MatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = spt_variants();
  ASSERT_EQ(vs.size(), 4u);
  check_schedule_cases(vs, 11000);
  // Non-causal Sq > Sk and Sq < Sk with more key blocks than query blocks of
  // 128 (key blocks that share a start in the shift order), GQA 4:1.
  const Case shift[] = {
      {1, 8, 2, 3000, 700, false, 0.0, "shift: Sq > Sk, 6 key blocks, GQA 4:1"},
      {1, 4, 1, 300, 2900, false, 0.0, "shift: 23 key blocks over 3 (5) query blocks, GQA 4:1"},
  };
  EXPECT_EQ(check_backward(vs, shift, std::size(shift), 11100), int(vs.size() * std::size(shift)));
}

// The cases of the spt1 and ew tests: sanitizer-sized, one per dQ order
// (causal GQA with rows that see no key, the shift order, softcap + window in
// today's order), and the four orders at 18 key blocks.
const Case kOrderSanitizerCases[] = {
    {1, 4, 2, 150, 131, true, 0.0, "sanitizer: causal GQA 2:1, Sq > Sk, odd lengths"},
    {1, 4, 2, 150, 331, false, 0.0, "sanitizer: non-causal GQA 2:1, Sq < Sk (shift)"},
    {1, 2, 1, 150, 331, false, 0.0, "sanitizer: window 100, softcap 2, non-causal", 2.0, 100},
};
const std::vector<Case> kOrderWalkCases = {
    {2, 4, 2, 2100, 2304, true, 0.0, "18 key blocks, causal Sq < Sk, GQA 2:1"},
    {1, 4, 2, 1000, 1300, true, 0.0, "window 300, causal, softcap 20", 20.0, 300},
    {2, 4, 2, 1100, 2304, false, 0.0, "18 key blocks, non-causal (shift), GQA 2:1"},
    {1, 4, 2, 640, 2304, false, 0.0, "window 500, non-causal: today's order", 0.0, 500},
};

// Sanitizer-sized (memcheck / racecheck / synccheck), the heuristic's two
// bases with spt1 (pds3 d64, sp1 d128; the other two run the same code with
// other constants): causal GQA with rows that see no key (the causal order),
// non-causal without a window (the shift order: 3 key blocks over 3 query
// blocks of 64, 2 of 128) and softcap + window non-causal (today's order).
TEST(AttentionWgmmaBwdGpu, Spt1SanitizerSized) {
  REQUIRE_SM90();
  std::vector<const AttentionVariant*> vs;
  for (const char* n : {"attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_spt1_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_spt1_d128"}) {
    vs.push_back(builtin_registry().find_attention(n));
    ASSERT_NE(vs.back(), nullptr) << n;
  }
  const auto& cases = kOrderSanitizerCases;
  EXPECT_EQ(check_backward(vs, cases, std::size(cases), 11200, /*repeats=*/2), int(vs.size() * std::size(cases)));
}

// 20 repeats, one digest of dQ, dK and dV at 18 key blocks, causal and not.
TEST(AttentionWgmmaBwdGpu, Spt1TwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(spt_variants(), 11300);
}

// The split kv variants (KvHeadSplit): hs2, hs4 (hs_variants) and ws2
// (ws_variants), each checked the same four ways: the float64 reference on
// its cases (5 repeats, one digest each), sanitizer-sized cases (memcheck /
// racecheck / synccheck on the split epilogue's semaphores and fp32 parts), 20
// repeats at 18 key blocks, and dQ bit for bit the unsplit variant's (each
// query block's adds keep their key-block order; dK and dV are summed in
// another order: parts, then the parts in split order, so compared with the
// reference only; where ws2's walks run whole, non-causal, all three are the
// unsplit variant's).
struct SplitFamily {
  const char* token;
  size_t variants;
  std::vector<Case> reference, sanitizer, repeats;
  std::vector<int> dq_bits, whole_bits;  // cases of `reference` (by index) for check_split_bits
  uint64_t seed;
  std::vector<Case> pick(const std::vector<int>& idx) const {
    std::vector<Case> out;
    for (int i : idx) out.push_back(reference[size_t(i)]);
    return out;
  }
  std::vector<const AttentionVariant*> members() const {
    std::vector<const AttentionVariant*> out;
    for (const auto* v : wgmma_bwd_variants())
      if (param(*v, token) >= 2) out.push_back(v);
    return out;
  }
};

// hs2, hs4: GQA cases whose query heads per kv head are a multiple of 4 (the
// cases of kBwdCases and the walks, with the group raised: odd lengths, Sq !=
// Sk both ways, causal with rows that see no key, softcap, window, 18 key
// blocks in the causal and shift orders), 8 query heads a kv head too.
const SplitFamily& hs_family() {
  static const SplitFamily f{
      "hs",
      3,  // sp1 ew1 hs2, hs4; pds4 pb5 hs2 (session 27)
      {{1, 4, 1, 77, 300, true, 0.0, "causal Sq < Sk, GQA 4:1"},
       {2, 8, 2, 200, 333, false, 0.0, "GQA 4:1, Sq != Sk, odd lengths"},
       {2, 8, 2, 300, 129, true, 0.0, "causal Sq > Sk: rows with no visible key, GQA 4:1"},
       {1, 8, 1, 513, 700, true, 1.0, "softcap 5 on large-magnitude scores, causal, GQA 8:1", 5.0},
       {1, 4, 1, 300, 1000, false, 0.0, "window 200, Sq < Sk: key blocks no query sees, GQA 4:1", 0.0, 200},
       {1, 4, 1, 1000, 300, false, 0.0, "window 77, Sq > Sk: query blocks skipped, GQA 4:1", 0.0, 77},
       {1, 8, 2, 700, 700, true, 1.0, "softcap 3 and window 150, causal, GQA 4:1", 3.0, 150},
       {2, 8, 2, 2100, 2304, true, 0.0, "18 key blocks, causal Sq < Sk, GQA 4:1"},
       {1, 8, 2, 640, 2304, false, 0.0, "18 key blocks, non-causal (shift), GQA 4:1"}},
      {{1, 4, 1, 150, 131, true, 0.0, "sanitizer: causal GQA 4:1, Sq > Sk, odd lengths"},
       {1, 4, 1, 150, 331, false, 0.0, "sanitizer: non-causal GQA 4:1, Sq < Sk (shift)"},
       {1, 4, 1, 150, 331, false, 0.0, "sanitizer: window 100, softcap 2, GQA 4:1", 2.0, 100}},
      {{2, 8, 2, 1100, 2304, false, 0.0, "20 repeats, 18 key blocks, GQA 4:1"},
       {2, 8, 2, 2304, 2304, true, 0.0, "20 repeats, 18 key blocks, causal, GQA 4:1"}},
      {7, 8, 6},
      {},
      13000};
  return f;
}

// ws2: causal cases, MHA and GQA (odd lengths, Sq != Sk both ways, rows that
// see no key, key blocks whose walk has one query block or none in a part,
// softcap, window, 18 and 24 key blocks), and non-causal ones (the walks run
// whole there).
const SplitFamily& ws_family() {
  static const SplitFamily f{
      "ws",
      1,
      {{1, 2, 2, 77, 300, true, 0.0, "causal Sq < Sk, odd lengths"},
       {2, 4, 4, 300, 129, true, 0.0, "causal Sq > Sk: rows with no visible key"},
       {1, 4, 1, 513, 700, true, 1.0, "softcap 5 on large-magnitude scores, causal, GQA 4:1", 5.0},
       {1, 6, 2, 700, 700, true, 1.0, "softcap 3 and window 150, causal, GQA 3:1", 3.0, 150},
       {2, 4, 2, 2100, 2304, true, 0.0, "18 key blocks, causal Sq < Sk, GQA 2:1"},
       {1, 1, 1, 3000, 3000, true, 0.0, "24 key blocks, causal, one head"},
       {2, 4, 2, 200, 333, false, 0.0, "non-causal (whole walks), Sq != Sk, GQA 2:1"},
       {1, 4, 4, 640, 2304, false, 0.0, "18 key blocks, non-causal (shift, whole walks)"}},
      {{1, 2, 1, 150, 131, true, 0.0, "sanitizer: causal GQA 2:1, Sq > Sk, odd lengths"},
       {1, 2, 2, 300, 331, true, 0.0, "sanitizer: causal Sq < Sk"},
       {1, 2, 2, 300, 331, true, 0.0, "sanitizer: causal, window 100, softcap 2", 2.0, 100}},
      {{2, 4, 4, 2304, 2304, true, 0.0, "20 repeats, 18 key blocks, causal"},
       {2, 8, 4, 2304, 2304, true, 0.0, "20 repeats, 18 key blocks, causal, GQA 2:1"}},
      {4, 5, 3},
      {6, 7},
      13400};
  return f;
}

std::vector<const AttentionVariant*> hs_variants() { return hs_family().members(); }
std::vector<const AttentionVariant*> ws_variants() { return ws_family().members(); }

// The four checks of a family (seeds f.seed + 0, 100, 200, 300, 400).
void check_split_reference(const SplitFamily& f) {
  const auto vs = f.members();
  ASSERT_EQ(vs.size(), f.variants);
  EXPECT_EQ(check_backward(vs, f.reference.data(), f.reference.size(), f.seed),
            int(vs.size() * f.reference.size()));
}
void check_split_repeats(const SplitFamily& f, const std::vector<Case>& cases, uint64_t seed, int repeats) {
  const auto vs = f.members();
  ASSERT_EQ(vs.size(), f.variants);
  EXPECT_EQ(check_backward(vs, cases.data(), cases.size(), seed, repeats), int(vs.size() * cases.size()));
}
std::string split_base_name(const std::string& n) {
  return without_token(n, n.find("_hs") != std::string::npos ? "hs" : "ws");
}
void check_split_bits(const SplitFamily& f) {
  const auto vs = f.members();
  ASSERT_EQ(vs.size(), f.variants);
  EXPECT_EQ(check_bits_equal_base(vs, split_base_name, /*dq_equal=*/true, f.seed + 300, f.pick(f.dq_bits),
                                  /*dkdv_equal=*/false),
            int(vs.size() * f.dq_bits.size()));
  if (!f.whole_bits.empty())
    EXPECT_EQ(check_bits_equal_base(vs, split_base_name, /*dq_equal=*/true, f.seed + 400, f.pick(f.whole_bits),
                                    /*dkdv_equal=*/true),
              int(vs.size() * f.whole_bits.size()));
}

TEST(AttentionWgmmaBwdGpu, HsMatchesFloat64Reference) {
  REQUIRE_SM90();
  check_split_reference(hs_family());
}
TEST(AttentionWgmmaBwdGpu, HsSanitizerSized) {
  REQUIRE_SM90();
  check_split_repeats(hs_family(), hs_family().sanitizer, 13100, 2);
}
TEST(AttentionWgmmaBwdGpu, HsTwentyRepeats) {
  REQUIRE_SM90();
  check_split_repeats(hs_family(), hs_family().repeats, 13200, 20);
}
TEST(AttentionWgmmaBwdGpu, HsDqBitwiseEqualsUnsplit) {
  REQUIRE_SM90();
  check_split_bits(hs_family());
}
TEST(AttentionWgmmaBwdGpu, WsMatchesFloat64Reference) {
  REQUIRE_SM90();
  check_split_reference(ws_family());
}
TEST(AttentionWgmmaBwdGpu, WsSanitizerSized) {
  REQUIRE_SM90();
  check_split_repeats(ws_family(), ws_family().sanitizer, 13500, 2);
}
TEST(AttentionWgmmaBwdGpu, WsTwentyRepeats) {
  REQUIRE_SM90();
  check_split_repeats(ws_family(), ws_family().repeats, 13600, 20);
}
TEST(AttentionWgmmaBwdGpu, WsDqBitwiseEqualsUnsplit) {
  REQUIRE_SM90();
  check_split_bits(ws_family());
}

// spt1 walks the query blocks in another order where its order applies
// (causal: ascending from the diagonal; shift: cyclic), so dK and dV are
// summed over the query blocks in that order too: their bits may differ from
// the base's there (first H200 run, 4ae9150: they do), and equal it where
// today's order is kept (non-causal with a window: dQ, dK, dV all the
// base's). sp1 spt1 bitwise pds2 spt1 (dQ, dK, dV: the same walk and the same
// adds, as sp1 and pds2) in all three orders.
TEST(AttentionWgmmaBwdGpu, Spt1BitwiseEqualsBaseWhereTheWalkIsKept) {
  REQUIRE_SM90();
  const std::vector<Case>& cases = kOrderWalkCases;
  EXPECT_EQ(check_bits_equal_base(spt_variants(), spt_base_name, /*dq_equal=*/false, 11400, {cases[1]},
                                  /*dkdv_equal=*/false),
            4);
  EXPECT_EQ(check_bits_equal_base(spt_variants(), spt_base_name, /*dq_equal=*/true, 11500, {cases[3]}), 4);
  std::vector<const AttentionVariant*> sp;
  for (const auto* v : spt_variants())
    if (param(*v, "sp") == 1) sp.push_back(v);
  ASSERT_EQ(sp.size(), 1u);
  EXPECT_EQ(check_bits_equal_base(sp, sp_base_name, /*dq_equal=*/true, 11600, cases), 4);
}

// The new order changes dQ's bits where it applies (else spt1 would be a
// second name for the same sums): dQ digests differ from the base's on both
// 18-key-block cases of every variant (~1M dQ elements each, fp32 sums of 18
// parts in another order: some bf16 results differ; an equal dQ would mean
// the order never reached the kernel); dK, dV not compared (summed in the
// walk's order, see above).
TEST(AttentionWgmmaBwdGpu, Spt1ChangesDqOrder) {
  REQUIRE_SM90();
  const std::vector<Case> cases = {
      {2, 4, 2, 2100, 2304, true, 0.0, "18 key blocks, causal Sq < Sk, GQA 2:1"},
      {2, 4, 2, 1100, 2304, false, 0.0, "18 key blocks, non-causal (shift), GQA 2:1"},
  };
  EXPECT_EQ(check_bits_equal_base(spt_variants(), spt_base_name, kDqBitsDiffer, 11700, cases, /*dkdv_equal=*/false),
            8);
}

// ew1, ew2 (issue 16, session 14): pds3 d64 with the exp loop without a
// branch per element (the mask its own pass), D read ahead of the dS^T
// stores, and (ew2) dQ issued before dK and handed over while dK runs;
// ordered with spt1's order, and atomic; ew1 also on sp1 d128. Every backward case, the
// many-key-block ones and the spt1 shift cases (the device script's filter:
// AttentionWgmmaBwdGpu.Ew*).
TEST(AttentionWgmmaBwdGpu, EwMatchesFloat64Reference) {
  REQUIRE_SM90();
  const auto vs = ew_variants();
  ASSERT_EQ(vs.size(), 35u);  // ew1, ew2, wq1, pb1 (d64, d128), pb3 (d64, d128), pb5 (d64), pb6 (d64, d128), pb7 (d64), pb8 (d128), pds4 pb5 / pb7 (d128), pb10 (d64, ordered), wq1 over pb5 (d64, ordered), pds4 pb5 se1 (d128, ordered)
  check_schedule_cases(vs, 12000);
  const Case shift[] = {
      {1, 8, 2, 3000, 700, false, 0.0, "shift: Sq > Sk, 6 key blocks, GQA 4:1"},
      {1, 4, 1, 300, 2900, false, 0.0, "shift: 23 key blocks over 3 (5) query blocks, GQA 4:1"},
  };
  EXPECT_EQ(check_backward(vs, shift, std::size(shift), 12100), int(vs.size() * std::size(shift)));
}

// Sanitizer-sized (memcheck / racecheck / synccheck): spt1's cases (causal GQA
// with rows that see no key, the shift order, softcap + window).
TEST(AttentionWgmmaBwdGpu, EwSanitizerSized) {
  REQUIRE_SM90();
  const auto vs = ew_variants();
  ASSERT_EQ(vs.size(), 35u);  // ew1, ew2, wq1, pb1 (d64, d128), pb3 (d64, d128), pb5 (d64), pb6 (d64, d128), pb7 (d64), pb8 (d128), pds4 pb5 / pb7 (d128), pb10 (d64, ordered), wq1 over pb5 (d64, ordered), pds4 pb5 se1 (d128, ordered)
  const auto& cases = kOrderSanitizerCases;
  EXPECT_EQ(check_backward(vs, cases, std::size(cases), 12200, /*repeats=*/2), int(vs.size() * std::size(cases)));
}

// 20 repeats, one digest (ordered: dQ too) at 18 key blocks, causal and not.
TEST(AttentionWgmmaBwdGpu, EwTwentyRepeats) {
  REQUIRE_SM90();
  check_pds_twenty_repeats(ew_variants(), 12300);
}

// ew1 and ew2 change where the elementwise code branches and when D is read
// and the products are waited on, not an fp32 operation or its order: the
// base's bits (ordered pds3 spt1 / sp1 spt1: dQ, dK, dV in the causal, shift
// and kept orders, and on the softcap + window case; atomic pds3 / sp1: dK, dV).
// wq1 changes how the dQ part reaches the writer warp (two halves, two bulk
// adds), not a value or the key-block order of any element's adds: the ew
// variant's bits (ordered: dQ, dK, dV; atomic: dK, dV).
TEST(AttentionWgmmaBwdGpu, EwBitwiseEqualsBase) {
  REQUIRE_SM90();
  const std::vector<Case>& cases = kOrderWalkCases;
  EXPECT_EQ(check_bits_equal_base(without_pb(ew_variants()), ew_base_name, /*dq_equal=*/true, 12400, cases), 40);
}

// pb3 (session 21) against pb1 (ordered spt1 and atomic; d64 and d128): pb3
// rounds the same fp32 P^T into dV's A fragment and issues the same dV
// products in the same order (later in the step): dV bitwise pb1's; its dK is
// not (dS^T from the fp32 P^T). dQ is not compared (pb3 scales the sum in the
// convert pass instead of each part). (pb2, pb1's step with pb3's descriptors
// and word fragments, bitwise pb1's dK and dV: retired in session 32.)
std::string pbn_base_name(const std::string& n) {
  std::string b = n;
  if (const size_t at = b.find("_pb3"); at != std::string::npos) b.replace(at, 4, "_pb1");
  return b;
}
std::vector<const AttentionVariant*> pb_variants(int pb) {
  std::vector<const AttentionVariant*> out;
  for (const auto* v : wgmma_bwd_variants())
    if (param(*v, "pb") == pb) out.push_back(v);
  return out;
}
TEST(AttentionWgmmaBwdGpu, PbNBitsAgainstPb1) {
  REQUIRE_SM90();
  const std::vector<Case>& cases = kOrderWalkCases;
  ASSERT_EQ(pb_variants(3).size(), 4u);  // d64, d128
  EXPECT_EQ(check_bits_equal_base(pb_variants(3), pbn_base_name, /*dq_equal=*/false, 12460, cases,
                                  /*dkdv_equal=*/true, /*dv_only=*/true),
            int(4 * cases.size()));
}

// pb5 (session 22): pb3's arithmetic with the exp moved after the dP^T wait
// into the dS^T loop and the mask applied as -inf before the exp (exp2 of
// -inf is the 0 pb3's mask writes): dQ, dK and dV bitwise pb3's (ordered;
// atomic: dK, dV), on the walk cases (causal, shift, softcap + window). (The
// float64 reference, 20 repeats and the sanitizer-sized case: the Ew lists.)
std::string pb3_base_name(const std::string& n) {
  std::string b = n;
  for (const char* t : {"_pb5", "_pb6", "_pb7", "_pb8"})
    if (const size_t at = b.find(t); at != std::string::npos) b.replace(at, 4, "_pb3");
  return b;
}
bool is_pds4(const AttentionVariant* v) { return param(*v, "pds") == 4; }
bool is_wq(const AttentionVariant* v) { return param(*v, "wq") == 1; }
TEST(AttentionWgmmaBwdGpu, Pb5BitsAgainstPb3) {
  REQUIRE_SM90();
  const std::vector<Case>& cases = kOrderWalkCases;
  auto vs = pb_variants(5);
  std::erase_if(vs, is_pds4);  // (pds4: 80 queries a step, no pb3 of that tile; Pds4Pb7BitsAgainstPb5)
  std::erase_if(vs, is_wq);    // (wq1 over pb5: Pb10AndWqBitsAgainstPb5)
  ASSERT_EQ(vs.size(), 2u);  // d64, ordered and atomic
  const auto pb6 = pb_variants(6);  // pb6 (branch s22-pb6): d64, d128; dV's halves sum its k steps in order
  ASSERT_EQ(pb6.size(), 4u);
  vs.insert(vs.end(), pb6.begin(), pb6.end());
  auto pb7 = pb_variants(7);  // pb7 (branch s22-pb6): the same values to the writer, another tile order
  std::erase_if(pb7, is_pds4);
  ASSERT_EQ(pb7.size(), 2u);
  vs.insert(vs.end(), pb7.begin(), pb7.end());
  const auto pb8 = pb_variants(8);  // pb8 (branch s22-pb6): pb3 at d128 with pb7's tile order
  ASSERT_EQ(pb8.size(), 2u);
  vs.insert(vs.end(), pb8.begin(), pb8.end());
  EXPECT_EQ(check_bits_equal_base(vs, pb3_base_name, /*dq_equal=*/true, 12470, cases), int(vs.size() * cases.size()));
}

// pds4 (branch s23-br80): pb7 is pb5 with another tile order of the dQ hand-off (the same values, the
// same key-block order of the adds): dQ, dK, dV bitwise pds4 pb5's (ordered; atomic: dK, dV). (pds4
// against the float64 reference, 20 repeats, the sanitizer-sized cases: the Ew lists.)
std::string pb5_base_name(const std::string& n) {
  std::string b = n;
  if (const size_t at = b.find("_pb7"); at != std::string::npos) b.replace(at, 4, "_pb5");
  return b;
}
TEST(AttentionWgmmaBwdGpu, Pds4Pb7BitsAgainstPb5) {
  REQUIRE_SM90();
  const std::vector<Case>& cases = kOrderWalkCases;
  auto vs = pb_variants(7);
  std::erase_if(vs, [](const AttentionVariant* v) { return !is_pds4(v); });
  ASSERT_EQ(vs.size(), 2u);  // ordered and atomic
  EXPECT_EQ(check_bits_equal_base(vs, pb5_base_name, /*dq_equal=*/true, 12480, cases), int(vs.size() * cases.size()));
}

// se1 (session 35): the pds4 pb5 kernel with dK / dV staged through the K / V
// tiles and stored as 16-byte rows, the same values rounded the same way: dQ,
// dK, dV bitwise the direct kernel's, on the walk cases (causal, shift,
// softcap + window). (The float64 reference, 20 repeats, the sanitizer-sized
// cases: the Ew lists; rows past Sk and alignment: StagedDkDvRowsAndAlignment.)
std::string se_base_name(const std::string& n) { return without_token(n, "se"); }
TEST(AttentionWgmmaBwdGpu, Pds4Se1BitsAgainstPb5) {
  REQUIRE_SM90();
  const std::vector<Case>& cases = kOrderWalkCases;
  std::vector<const AttentionVariant*> vs;
  for (const auto* v : wgmma_bwd_variants())
    if (param(*v, "se") == 1) vs.push_back(v);
  ASSERT_EQ(vs.size(), 1u);  // d128, ordered
  EXPECT_EQ(check_bits_equal_base(vs, se_base_name, /*dq_equal=*/true, 12485, cases), int(vs.size() * cases.size()));
}

// pb10 (session 32) forms pb5's exp arguments (the same FFMA of the same
// values) before the dP^T wait and takes the same EX2 after it; wq1 over pb5
// hands the same dQ values to the writer in two halves, each element's adds
// in the same key-block order: dQ, dK, dV bitwise pb5's (d64), on the walk
// cases (causal, shift, softcap + window).
std::string pb10_wq_base_name(const std::string& n) {
  std::string b = without_token(n, "wq");
  if (const size_t at = b.find("_pb10"); at != std::string::npos) b.replace(at, 5, "_pb5");
  return b;
}
TEST(AttentionWgmmaBwdGpu, Pb10AndWqBitsAgainstPb5) {
  REQUIRE_SM90();
  const std::vector<Case>& cases = kOrderWalkCases;
  auto vs = pb_variants(10);
  ASSERT_EQ(vs.size(), 1u);  // d64, ordered
  for (const auto* v : pb_variants(5))
    if (is_wq(v)) vs.push_back(v);
  ASSERT_EQ(vs.size(), 2u);
  EXPECT_EQ(check_bits_equal_base(vs, pb10_wq_base_name, /*dq_equal=*/true, 12490, cases), int(vs.size() * cases.size()));
}

// The named variant's forward on the alignment tests' case, 1000 x 1300
// causal GQA 2:1 (Sk: a partial last key block): nullptr, with the failure
// added, where the variant is not registered, refuses the case or its forward
// fails.
std::unique_ptr<ForwardDone> forward_on_gqa_case(const char* n, uint64_t seed) {
  const auto* v = builtin_registry().find_attention(n);
  if (v == nullptr) {
    ADD_FAILURE() << n << ": not registered";
    return nullptr;
  }
  const Case c = {1, 4, 2, 1000, 1300, true, 0.0, "causal Sq < Sk, GQA 2:1"};
  const AttentionProblem p = problem_of(c, param(*v, "d"));
  if (const auto why = v->can_run(p, AttentionMode::backward, cached_device(0))) {
    ADD_FAILURE() << n << ": " << *why;
    return nullptr;
  }
  auto fw = std::make_unique<ForwardDone>(*v, p, seed);
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    ADD_FAILURE() << n << ": the forward failed, " << cudaGetErrorString(e);
    return nullptr;
  }
  return fw;
}

// The TMA dQ convert stores 16 bytes at a time where dQ is 16-byte aligned
// and one element at a time elsewhere: the heuristic's ordered variants with
// dQ 2 bytes past an allocation's start give the aligned run's dQ bits, and
// the bytes around the view stay untouched.
TEST(AttentionWgmmaBwdGpu, TmaConvertUnalignedDq) {
  REQUIRE_SM90();
  // (pds4: dQ's tile transposed, its convert stores column pairs of two rows.)
  for (const char* n : {"attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64",
                        "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128",
                        "attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb7_spt1_d128"}) {
    const std::unique_ptr<ForwardDone> fw = forward_on_gqa_case(n, 12500);
    if (fw == nullptr) return;
    const size_t nq = fw->nq, nk = fw->nk;
    DeviceBuffer<uint16_t> dQ(nq), dQu(nq + 16), dK(nk), dV(nk);
    ASSERT_EQ(cudaMemset(dQu.data(), 0xff, dQu.bytes()), cudaSuccess);
    for (uint16_t* out : {dQ.data(), dQu.data() + 1}) {
      fw->backward(out, dK.data(), dV.data());
      if (HasFatalFailure()) return;
    }
    EXPECT_EQ(digest_device(dQu.data() + 1, dQ.bytes()).hex(), digest_device(dQ.data(), dQ.bytes()).hex())
        << n << ": dQ bits differ between the aligned and the unaligned output";
    uint16_t guard[16] = {};
    ASSERT_EQ(cudaMemcpy(guard, dQu.data(), 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(guard + 1, dQu.data() + 1 + nq, 15 * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(guard[i], 0xffffu) << n << ": a byte outside dQ written, guard " << i;
  }
}

// The overlapped TMA dQ convert (session 37, attention_wgmma_bwd.h
// dq_done_bytes: launched to overlap the kv kernel's tail, each head's tiles
// converted once every kv CTA of its (batch, kv head) has counted): dQ, dK, dV
// bitwise the stream-ordered convert's (DETFUSE_ATTN_PDL=0) for every ordered
// TMA kv variant (atomic ones: dK, dV; their dQ adds come in any order), on a
// grid of several waves (causal GQA: 16 key blocks x 16 units of (batch, kv
// head) = 256 CTAs, hs / ws more) and on a non-causal window where key blocks
// 0 - 12 walk nothing (their CTAs count too: a missing count would stop the
// convert, which traps after a minute) and query rows see few keys.
TEST(AttentionWgmmaBwdGpu, OverlappedConvertBitsEqualStreamOrdered) {
  REQUIRE_SM90();
  const DeviceInfo& dev = cached_device(0);
  const std::vector<Case> cases = {
      {4, 8, 4, 2048, 2048, true, 0.0, "causal GQA 2:1, 16 key blocks x 16 units"},
      {2, 4, 2, 128, 2048, false, 0.0, "window 256 non-causal: 13 key blocks walk nothing", 0.0, 256},
  };
  int compared = 0, ordered = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci)
    for (int64_t d : {64, 128}) {
      const AttentionProblem p = problem_of(cases[ci], d);
      std::unique_ptr<ForwardDone> fw;  // one forward (the first variant's) feeds every backward
      for (const auto* v : wgmma_bwd_variants()) {
        if (param(*v, "tma") != 1 || param(*v, "d") != d) continue;
        SCOPED_TRACE(v->desc.name + " on " + p.key() + " (" + cases[ci].what + ")");
        if (v->can_run(p, AttentionMode::backward, dev)) continue;
        if (fw == nullptr) {
          fw = std::make_unique<ForwardDone>(*v, p, 12520 + ci);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        }
        DeviceBuffer<uint16_t> dQ(fw->nq), dK(fw->nk), dV(fw->nk);
        std::array<std::string, 3> digests[2];
        for (int overlap = 0; overlap < 2; ++overlap) {
          const ScopedEnv env("DETFUSE_ATTN_PDL", overlap ? "1" : "0");
          digests[overlap] = backward_digests(*v, p, *fw, dQ, dK, dV);
        }
        if (v->desc.deterministic) {
          EXPECT_EQ(digests[0][0], digests[1][0]) << "dQ bits differ with the overlapped convert";
          ++ordered;
        }
        EXPECT_EQ(digests[0][1], digests[1][1]) << "dK bits differ with the overlapped convert";
        EXPECT_EQ(digests[0][2], digests[1][2]) << "dV bits differ with the overlapped convert";
        ++compared;
      }
    }
  EXPECT_GE(ordered, 20) << "ordered TMA kv variants compared (cases they run)";
  EXPECT_GT(compared, ordered) << "atomic TMA kv variants compared too";
}

// The kv kernel's dK / dV epilogue: at d64 (session 33) and in d128's se1 twin
// (session 35) it stages the values through the K and V tiles and stores 16
// bytes of a key's row at a time, rows past Sk skipped; elsewhere at d128 each
// thread stores its 4-byte pairs. The heuristic's
// kv kernels and an atomic and an owning one, dK and dV 16 bytes into a guarded
// allocation, give the bits of a run into their own allocation (Sk = 1300: a
// partial last key block) and leave the bytes around the views untouched; dK or
// dV 2 bytes off 16-byte alignment are refused (the epilogue's 16-byte stores
// rely on it) with nothing written.
TEST(AttentionWgmmaBwdGpu, StagedDkDvRowsAndAlignment) {
  REQUIRE_SM90();
  for (const char* n : {"attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64",
                        "attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128",
                        "attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_se1_d128",
                        "attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_pb5_d64",
                        "attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst2_d128"}) {
    const std::unique_ptr<ForwardDone> fw = forward_on_gqa_case(n, 12510);
    if (fw == nullptr) return;
    const size_t nq = fw->nq, nk = fw->nk;
    constexpr size_t kOff = 8, kPad = 16;  // 16 bytes of guard before the view, 16 after
    DeviceBuffer<uint16_t> dQ(nq), dK(nk), dV(nk), dKg(nk + kOff + kPad), dVg(nk + kOff + kPad);
    ASSERT_EQ(cudaMemset(dKg.data(), 0xff, dKg.bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemset(dVg.data(), 0xff, dVg.bytes()), cudaSuccess);
    auto run = [&](uint16_t* dk, uint16_t* dv) { fw->backward(dQ.data(), dk, dv); };
    run(dK.data(), dV.data());
    run(dKg.data() + kOff, dVg.data() + kOff);
    EXPECT_EQ(digest_device(dKg.data() + kOff, dK.bytes()).hex(), digest_device(dK.data(), dK.bytes()).hex())
        << n << ": dK bits differ between the two outputs";
    EXPECT_EQ(digest_device(dVg.data() + kOff, dV.bytes()).hex(), digest_device(dV.data(), dV.bytes()).hex())
        << n << ": dV bits differ between the two outputs";
    for (int which = 0; which < 2; ++which) {  // 2 bytes off alignment: refused before any launch
      uint16_t* dk = which == 0 ? dKg.data() + 1 : dK.data();
      uint16_t* dv = which == 1 ? dVg.data() + 1 : dV.data();
      try {
        run(dk, dv);
        ADD_FAILURE() << n << ": " << (which ? "dV" : "dK") << " 2 bytes off 16-byte alignment was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << n << ": " << e.what();
      }
    }
    for (DeviceBuffer<uint16_t>* g : {&dKg, &dVg}) {
      std::vector<uint16_t> head(kOff), tail(kPad);
      ASSERT_EQ(cudaMemcpy(head.data(), g->data(), kOff * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(tail.data(), g->data() + kOff + nk, kPad * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (uint16_t x : head) EXPECT_EQ(x, 0xffffu) << n << ": a byte before dK / dV written";
      for (uint16_t x : tail) EXPECT_EQ(x, 0xffffu) << n << ": a byte past dK / dV written";
    }
  }
}

// The partials variant's chunked launches, on a registry with a 1 MiB slab
// bound (d128, G = 2, Sq = 300: a key block's partial of one unit is
// 2*300*128*4 = 307200 bytes, 3 per slab): Sk = 700 -> 6 key blocks in 2 key
// ranges per unit (fp32 accumulator between them); Sk = 200 -> 2 key blocks,
// one unit per launch over 4 units.
TEST(AttentionWgmmaBwdGpu, PartialsChunkedLaunches) {
  REQUIRE_SM90();
  static const Registry reg = [] {
    Registry r;
    register_attention_wgmma_partials(r, 1);
    return r;
  }();
  ASSERT_EQ(reg.attention().size(), 1u);
  std::vector<const AttentionVariant*> vs = {&reg.attention()[0]};
  EXPECT_EQ(vs[0]->desc.name, "attention.bf16.wgmma.partials.br64_bc128_st2_d128_mb1");
  AttentionProblem p;
  p.B = 2, p.H = 4, p.Hkv = 2, p.Sq = 300, p.Sk = 700, p.d = 128;
  const auto pl = attention::plan_partials(p, 128, size_t(1) << 20);
  ASSERT_TRUE(pl.has_value());
  EXPECT_EQ(pl->ranges, 2);
  p.Sk = 200;
  EXPECT_EQ(attention::plan_partials(p, 128, size_t(1) << 20)->uc, 1);
  const Case cases[] = {
      {2, 4, 2, 300, 700, true, 0.0, "chunked key ranges, causal"},
      {2, 4, 2, 300, 200, false, 0.0, "chunked units"},
      {2, 4, 2, 300, 200, true, 0.0, "chunked units, causal Sq > Sk"},
  };
  EXPECT_EQ(check_backward(vs, cases, std::size(cases), 3000), int(std::size(cases)));
}

}  // namespace
