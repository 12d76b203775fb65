// CPU tests of the attention family: the registered variant set (names,
// strategies, flags, coverage), can_run refusals with reasons, workspace
// bounds, the partials chunk plan, and argument validation, which happens
// before any device work (so bad calls fail here, without a GPU, and leave
// outputs untouched).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "kernels/attention/attention.h"
#include "kernels/attention/bwd_common.h"
#include "kernels/attention/variants.h"
#include "kernels/common/error.h"
#include "kernels/registry.h"

namespace detfuse {
namespace {

DeviceInfo h200() {
  DeviceInfo d;
  d.name = "fake H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.max_smem_per_block_optin = 232448;
  return d;
}

AttentionProblem prob(int64_t d, DType t, bool causal = false) {
  AttentionProblem p;
  p.B = 2;
  p.H = 8;
  p.Hkv = 2;
  p.Sq = 300;
  p.Sk = 500;
  p.d = d;
  p.dtype = t;
  p.causal = causal;
  return p;
}

int64_t param(const VariantDesc& d, const std::string& k) {
  for (const auto& [n, v] : d.params)
    if (n == k) return v;
  return -1;
}

std::string expect_invalid(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no detfuse::Error thrown";
  return "";
}

TEST(AttentionVariants, EveryStrategyHeadDimAndDtypeHasThreeBlockShapes) {
  const auto& vs = builtin_registry().attention();
  ASSERT_FALSE(vs.empty());
  std::map<std::string, std::set<std::string>> shapes;  // dtype.engine.strategy.d -> block shapes
  for (const auto& v : vs) {
    const auto& d = v.desc;
    EXPECT_EQ(d.family, Family::attention);
    EXPECT_EQ(d.name, VariantDesc::canonical_name(d.family, d.dtype, d.engine, d.strategy, d.params));
    EXPECT_EQ(d.deterministic, d.strategy != "atomic") << d.name;
    if (d.engine != "fma") continue;  // other engines' own suites check their sets
    EXPECT_TRUE(d.strategy == "owning" || d.strategy == "atomic" || d.strategy == "partials") << d.name;
    if (d.strategy == "partials") EXPECT_GT(param(d, "mb"), 0) << d.name;
    const std::string key = std::string(to_string(d.dtype)) + "." + d.engine + "." + d.strategy + ".d" +
                            std::to_string(param(d, "d"));
    shapes[key].insert(std::to_string(param(d, "br")) + "x" + std::to_string(param(d, "bc")) + "w" +
                       std::to_string(param(d, "w")));
  }
  for (const char* t : {"fp32", "bf16"})
    for (const char* s : {"owning", "atomic", "partials"})
      for (int hd : {64, 128}) {
        const std::string key = std::string(t) + ".fma." + s + ".d" + std::to_string(hd);
        EXPECT_GE(shapes[key].size(), 3u) << key;
      }
}

TEST(AttentionVariants, ExampleNameIsCanonical) {
  EXPECT_NE(builtin_registry().find_attention("attention.fp32.fma.owning.br64_bc64_w8_d128"), nullptr);
  EXPECT_NE(builtin_registry().find_attention("attention.bf16.fma.partials.br32_bc32_w4_d64_mb256"), nullptr);
}

TEST(AttentionVariants, CanRunRefusesOtherHeadDimsAndDtypesWithAReason) {
  const DeviceInfo dev = h200();
  for (const auto& v : builtin_registry().attention()) {
    if (v.desc.engine != "fma") continue;
    const int64_t d = param(v.desc, "d");
    AttentionProblem p = prob(d, v.desc.dtype);
    EXPECT_FALSE(v.can_run(p, AttentionMode::forward, dev)) << v.desc.name;
    EXPECT_FALSE(v.can_run(p, AttentionMode::backward, dev)) << v.desc.name;
    p.d = 96;
    auto why = v.can_run(p, AttentionMode::forward, dev);
    ASSERT_TRUE(why) << v.desc.name;
    EXPECT_NE(why->find("d: head dim 96"), std::string::npos) << *why;
    p = prob(d, v.desc.dtype == DType::f32 ? DType::bf16 : DType::f32);
    why = v.can_run(p, AttentionMode::forward, dev);
    ASSERT_TRUE(why) << v.desc.name;
    EXPECT_NE(why->find("dtype"), std::string::npos) << *why;
  }
}

// Softcap and sliding window run on every registered variant, every engine
// (fma and, when built, wgmma), both modes; the refusals still come with their reasons when the options are set.
TEST(AttentionVariants, EveryVariantRunsSoftcapAndWindow) {
  const DeviceInfo dev = h200();
  int fma = 0, wgmma = 0;
  for (const auto& v : builtin_registry().attention()) {
    const int64_t d = param(v.desc, "d");
    for (bool causal : {false, true}) {
      AttentionProblem p = prob(d, v.desc.dtype, causal);
      p.softcap = 50.0;
      p.window = 128;
      p.validate();
      EXPECT_FALSE(v.can_run(p, AttentionMode::forward, dev)) << v.desc.name << " " << p.key() << ": "
                                                              << *v.can_run(p, AttentionMode::forward, dev);
      if (v.desc.strategy != "fwd") {
        const auto why = v.can_run(p, AttentionMode::backward, dev);
        EXPECT_FALSE(why) << v.desc.name << " " << p.key() << ": " << *why;
      }
      p.window = 1;  // the narrowest window, and one wider than Sk (it hides nothing)
      EXPECT_FALSE(v.can_run(p, AttentionMode::forward, dev)) << v.desc.name;
      p.window = kMaxDim;
      EXPECT_FALSE(v.can_run(p, AttentionMode::forward, dev)) << v.desc.name;
      p.d = 96;  // still refused for the head dim, with its reason
      const auto why = v.can_run(p, AttentionMode::forward, dev);
      ASSERT_TRUE(why) << v.desc.name;
      EXPECT_NE(why->find("head dim"), std::string::npos) << *why;
    }
    (v.desc.engine == "fma" ? fma : wgmma) += 1;
  }
  EXPECT_GT(fma, 0);
#ifdef DETFUSE_HAVE_ATTENTION_WGMMA
  EXPECT_GT(wgmma, 0);
#endif
}

TEST(AttentionVariants, SharedMemoryFitsAnH200AndSmallDevicesAreRefused) {
  DeviceInfo small = h200();
  small.max_smem_per_block_optin = 48 * 1024;
  bool refused = false;
  for (const auto& v : builtin_registry().attention()) {
    if (v.desc.engine != "fma") continue;
    AttentionProblem p = prob(param(v.desc, "d"), v.desc.dtype);
    if (auto why = v.can_run(p, AttentionMode::backward, small)) {
      refused = true;
      EXPECT_NE(why->find("shared memory"), std::string::npos) << *why;
    }
  }
  EXPECT_TRUE(refused);
}

TEST(AttentionVariants, WorkspaceByStrategy) {
  for (const auto& v : builtin_registry().attention()) {
    if (v.desc.engine != "fma") continue;
    AttentionProblem p = prob(param(v.desc, "d"), v.desc.dtype, true);
    EXPECT_EQ(v.workspace_bytes(p, AttentionMode::forward), 0u) << v.desc.name;
    const size_t ws = v.workspace_bytes(p, AttentionMode::backward);
    const size_t dbytes = attention::d_bytes(p);
    if (v.desc.strategy == "owning") EXPECT_EQ(ws, dbytes) << v.desc.name;
    if (v.desc.strategy == "atomic") EXPECT_EQ(ws, dbytes + attention::dq_acc_bytes(p)) << v.desc.name;
    if (v.desc.strategy == "partials") {
      EXPECT_GT(ws, dbytes) << v.desc.name;
      EXPECT_LE(ws, dbytes + (size_t(param(v.desc, "mb")) << 20) * 2 + 512) << v.desc.name;
    }
  }
}

TEST(AttentionPartialsPlan, ChunksUnitsAndKeyRangesUnderTheBound) {
  AttentionProblem p = prob(64, DType::f32);  // G = 4, Sq = 300: unit_bytes = 4*300*64*4 = 307200
  p.Sk = 500;                                 // 16 key blocks of 32
  auto all = attention::plan_partials(p, 32, size_t(256) << 20);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->n_kb, 16);
  EXPECT_EQ(all->units, 4);
  EXPECT_EQ(all->kc, 16);
  EXPECT_EQ(all->uc, 4);
  EXPECT_EQ(all->ranges, 1);
  EXPECT_EQ(all->acc_bytes, 0u);
  auto two_units = attention::plan_partials(p, 32, 32 * 307200 + 100);
  ASSERT_TRUE(two_units);
  EXPECT_EQ(two_units->uc, 2);
  EXPECT_EQ(two_units->ranges, 1);
  auto ranges = attention::plan_partials(p, 32, 5 * 307200);
  ASSERT_TRUE(ranges);
  EXPECT_EQ(ranges->kc, 5);
  EXPECT_EQ(ranges->uc, 1);
  EXPECT_EQ(ranges->ranges, 4);
  EXPECT_LE(ranges->slab_bytes, size_t(5 * 307200));
  EXPECT_EQ(ranges->acc_bytes, size_t(307200));
  EXPECT_FALSE(attention::plan_partials(p, 32, 307199));
  // can_run says why.
  const auto* v = builtin_registry().find_attention("attention.fp32.fma.partials.br32_bc32_w4_d64_mb256");
  ASSERT_NE(v, nullptr);
  AttentionProblem huge = prob(64, DType::f32);
  huge.H = 32;
  huge.Hkv = 1;
  huge.Sq = 65536;  // one partial of a group: 32*65536*64*4 = 512 MiB
  auto why = v->can_run(huge, AttentionMode::backward, h200());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("workspace bound"), std::string::npos) << *why;
  EXPECT_FALSE(v->can_run(huge, AttentionMode::forward, h200()));
}

// Fake, never dereferenced device addresses: validation must fail first.
AttentionArgs fake_args(AttentionMode m) {
  static float cell[16];
  AttentionArgs a;
  a.Q = a.K = a.V = cell;
  if (m == AttentionMode::forward) {
    a.O = cell;
    a.lse = cell;
  } else {
    a.dO = a.O_in = cell;
    a.lse_in = cell;
    a.dQ = a.dK = a.dV = cell;
  }
  return a;
}

TEST(AttentionValidate, BadProblemsNameTheField) {
  AttentionProblem p = prob(64, DType::f32);
  const auto a = fake_args(AttentionMode::forward);
  EXPECT_NO_THROW(attention::validate_call(p, AttentionMode::forward, a));
  p.Hkv = 3;
  EXPECT_NE(expect_invalid([&] { attention::validate_call(p, AttentionMode::forward, a); }).find("Hkv"),
            std::string::npos);
  p = prob(64, DType::f32);
  p.Sq = 0;
  EXPECT_NE(expect_invalid([&] { attention::validate_call(p, AttentionMode::forward, a); }).find("Sq"),
            std::string::npos);
  p = prob(64, DType::f32);
  p.scale = -1;
  EXPECT_NE(expect_invalid([&] { attention::validate_call(p, AttentionMode::forward, a); }).find("scale"),
            std::string::npos);
  p = prob(64, DType::f32);
  p.softcap = -2;
  EXPECT_NE(expect_invalid([&] { attention::validate_call(p, AttentionMode::forward, a); }).find("softcap"),
            std::string::npos);
  p = prob(64, DType::f32);
  p.window = -1;
  EXPECT_NE(expect_invalid([&] { attention::validate_call(p, AttentionMode::forward, a); }).find("window"),
            std::string::npos);
  p.window = 64;
  p.softcap = 30;
  EXPECT_NO_THROW(attention::validate_call(p, AttentionMode::backward, fake_args(AttentionMode::backward)));
}

TEST(AttentionValidate, NullPointersTheModeNeedsAreNamed) {
  const AttentionProblem p = prob(64, DType::bf16);
  struct Field {
    const char* name;
    AttentionMode mode;
    std::function<void(AttentionArgs&)> clear;
  };
  const std::vector<Field> fields = {
      {"Q", AttentionMode::forward, [](AttentionArgs& a) { a.Q = nullptr; }},
      {"K", AttentionMode::forward, [](AttentionArgs& a) { a.K = nullptr; }},
      {"V", AttentionMode::forward, [](AttentionArgs& a) { a.V = nullptr; }},
      {"O", AttentionMode::forward, [](AttentionArgs& a) { a.O = nullptr; }},
      {"lse", AttentionMode::forward, [](AttentionArgs& a) { a.lse = nullptr; }},
      {"dO", AttentionMode::backward, [](AttentionArgs& a) { a.dO = nullptr; }},
      {"O_in", AttentionMode::backward, [](AttentionArgs& a) { a.O_in = nullptr; }},
      {"lse_in", AttentionMode::backward, [](AttentionArgs& a) { a.lse_in = nullptr; }},
      {"dQ", AttentionMode::backward, [](AttentionArgs& a) { a.dQ = nullptr; }},
      {"dK", AttentionMode::backward, [](AttentionArgs& a) { a.dK = nullptr; }},
      {"dV", AttentionMode::backward, [](AttentionArgs& a) { a.dV = nullptr; }},
  };
  for (const auto& f : fields) {
    AttentionArgs a = fake_args(f.mode);
    f.clear(a);
    const std::string msg = expect_invalid([&] { attention::validate_call(p, f.mode, a); });
    EXPECT_EQ(msg.rfind(std::string(f.name) + ": null pointer", 0), 0u) << msg;
    // run() and the entry points validate before touching the device.
    const auto* v = builtin_registry().find_attention("attention.bf16.fma.owning.br64_bc64_w8_d64");
    ASSERT_NE(v, nullptr);
    expect_invalid([&] { attention::run(*v, p, f.mode, a); });
    if (f.mode == AttentionMode::forward)
      expect_invalid([&] { attention::forward(p, a); });
    else
      expect_invalid([&] { attention::backward(p, a); });
  }
  // Outputs the mode does not write may be null.
  AttentionArgs fwd = fake_args(AttentionMode::forward);
  EXPECT_NO_THROW(attention::validate_call(p, AttentionMode::forward, fwd));
}

TEST(AttentionValidate, WorkspaceTooSmallOrInconsistent) {
  const AttentionProblem p = prob(128, DType::f32, true);
  const auto* v = builtin_registry().find_attention("attention.fp32.fma.atomic.br32_bc32_w4_d128");
  ASSERT_NE(v, nullptr);
  AttentionArgs a = fake_args(AttentionMode::backward);
  static char ws[64];
  a.workspace = ws;
  a.workspace_size = sizeof ws;
  const std::string msg = expect_invalid([&] { attention::run(*v, p, AttentionMode::backward, a); });
  EXPECT_EQ(msg.rfind("workspace_size:", 0), 0u) << msg;
  a.workspace = nullptr;
  EXPECT_EQ(expect_invalid([&] { attention::validate_call(p, AttentionMode::backward, a); }).rfind("workspace:", 0),
            0u);
}

TEST(AttentionValidate, WrongDtypeVariantIsRefusedBeforeLaunch) {
  const AttentionProblem p = prob(64, DType::f32);
  const auto* v = builtin_registry().find_attention("attention.bf16.fma.owning.br64_bc64_w8_d64");
  ASSERT_NE(v, nullptr);
  const std::string msg = expect_invalid([&] { attention::run(*v, p, AttentionMode::forward, fake_args(AttentionMode::forward)); });
  EXPECT_EQ(msg.rfind("dtype:", 0), 0u) << msg;
}

TEST(AttentionHeuristic, PicksADeterministicVariantOfTheHeadDimOrExplains) {
  const DeviceInfo dev = h200();
  for (DType t : {DType::f32, DType::bf16})
    for (int d : {64, 128}) {
      const auto& v = attention::heuristic_variant(prob(d, t), AttentionMode::backward, dev);
      EXPECT_TRUE(v.desc.deterministic);
      EXPECT_EQ(v.desc.dtype, t);
      EXPECT_EQ(param(v.desc, "d"), d);
    }
  const std::string msg =
      expect_invalid([&] { attention::heuristic_variant(prob(80, DType::bf16), AttentionMode::forward, dev); });
  EXPECT_NE(msg.find("64 and 128"), std::string::npos) << msg;
}

TEST(AttentionHeuristic, PrefersTheMeasuredHopperVariantWhereItRuns) {
  // bf16 on an H200, where the build has the wgmma engine: forward the
  // persistent forward with rd1/ot1 (d128: its ov2 form; d64 non-causal: br192 rd1); backward
  // without GQA the ordered pds4 ew2 pb5 spt1 variant at d128 (80 queries a step; causal its se1 twin,
  // session 35; pds2 pb3 where a block has less shared memory; sp1 ew1 spt1 with softcap), pds3
  // ew2 pb5 spt1 at d64 (ew2 with softcap; pds2 spt1 where a block has less shared memory), with
  // GQA the same at d64 (session 27; with softcap ew2 too since session 28) and pds4 pb5 at d128, causal its hs2 form
  // (session 27; sp1 ew1 spt1 hs2 with softcap or less shared memory); fp32 and a pre-Hopper device:
  // the exact fma owning 64x64 variant.
  const DeviceInfo dev = h200();
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (int64_t hkv : {32, 8}) {
        AttentionProblem bf = prob(d, DType::bf16, causal);
        bf.H = 32;
        bf.Hkv = hkv;
        const std::string pb3 = "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_ew2_pb3_spt1_d128";
        const std::string ordered = d == 128 ? "attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128"
                                             : "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64";
        // GQA: spt1 at d128 (session 12), causal with hs2 (session 18: a kv head's query heads over 2 CTAs;
        // session 27: on pds4 pb5); at d64 pb5 spt1 (session 27)
        const std::string hs2 = "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_hs2_d128";
        const std::string hs2_pds4 = "attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_hs2_d128";
        // causal d128 without GQA: the pds4 pb5 kernel's staged dK / dV twin (se1, session 35)
        const std::string se1 = "attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_se1_d128";
        const std::string bwd = d == 128 && causal ? (hkv == 8 ? hs2_pds4 : se1) : ordered;
        const std::string fwd = d == 128  ? "attention.bf16.wgmma.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128"
                                : causal ? "attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64"
                                         : "attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_d64";
        const std::string fma_bf16 = "attention.bf16.fma.owning.br64_bc64_w8_d" + std::to_string(d);
        const bool built = builtin_registry().find_attention(bwd) != nullptr;
        SCOPED_TRACE("d " + std::to_string(d) + (causal ? " causal" : "") + " hkv " + std::to_string(hkv));
        for (AttentionMode m : {AttentionMode::forward, AttentionMode::backward}) {
          const std::string hopper = m == AttentionMode::forward ? fwd : bwd;
          EXPECT_EQ(attention::heuristic_variant(bf, m, dev).desc.name, built ? hopper : fma_bf16);
          EXPECT_EQ(attention::heuristic_variant(prob(d, DType::f32, causal), m, dev).desc.name,
                    "attention.fp32.fma.owning.br64_bc64_w8_d" + std::to_string(d));
        }
        if (built) {  // softcap: ew2 / sp1 ew1 (d64's pb1 runs it too, 9% slower: session 16); GQA: ew2 at
                      // d64 (session 28: owning before), sp1 ew1 hs2 at d128 causal
          AttentionProblem capped = bf;
          capped.softcap = 50.0;
          const std::string want =
              d == 64 ? "attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64"
                      : (hkv == 8 && causal ? hs2 : "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128");
          EXPECT_EQ(attention::heuristic_variant(capped, AttentionMode::backward, dev).desc.name, want);
        }
        // An H100: the same choices as the H200 (session 42: the persistent ov2 ls1 forward at d64 causal, an
        // H100-only choice since session 31, won on the H200 too).
        DeviceInfo h100 = dev;
        h100.name = "NVIDIA H100 80GB HBM3";
        EXPECT_EQ(attention::heuristic_variant(bf, AttentionMode::forward, h100).desc.name, built ? fwd : fma_bf16);
        EXPECT_EQ(attention::heuristic_variant(bf, AttentionMode::backward, h100).desc.name, built ? bwd : fma_bf16);
        DeviceInfo ampere = dev;
        ampere.cc_major = 8;
        EXPECT_EQ(attention::heuristic_variant(bf, AttentionMode::backward, ampere).desc.name, fma_bf16);
        // A block with 16 KB less shared memory than the H200's: pds3 pb5 (195 KiB since session 31
        // dropped the P^T tile it never used) still runs there; with 48 KB less it is refused and pds2
        // spt1 runs (d64, with GQA too).
        DeviceInfo less = dev;
        less.max_smem_per_block_optin -= 16 * 1024;
        DeviceInfo much_less = dev;
        much_less.max_smem_per_block_optin -= 48 * 1024;
        if (built && d == 64) {
          EXPECT_EQ(attention::heuristic_variant(bf, AttentionMode::backward, less).desc.name, ordered);
          EXPECT_EQ(attention::heuristic_variant(bf, AttentionMode::backward, much_less).desc.name,
                    "attention.bf16.wgmma.ordered.br64_bc128_st2_tma1_pds2_spt1_d64");
        }
        // pds4 (226 KB) is refused there too; pb3 (64 queries a step) runs, causal GQA sp1 ew1 hs2.
        if (built && d == 128)
          EXPECT_EQ(attention::heuristic_variant(bf, AttentionMode::backward, less).desc.name,
                    hkv == 8 && causal ? hs2 : pb3);
      }
}

}  // namespace
}  // namespace detfuse
