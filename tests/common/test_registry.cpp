#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "kernels/common/error.h"
#include "kernels/common/strategy.h"
#include "kernels/registry.h"

namespace detfuse {
namespace {

FlceVariant fake_variant(const std::string& strategy, int64_t bm) {
  FlceVariant v;
  v.desc.family = Family::flce;
  v.desc.dtype = DType::bf16;
  v.desc.engine = "mma";
  v.desc.strategy = strategy;
  v.desc.params = {{"bm", bm}, {"w", 4}};
  v.desc.name = VariantDesc::canonical_name(v.desc.family, v.desc.dtype, v.desc.engine, v.desc.strategy, v.desc.params);
  v.can_run = [bm](const FlceProblem& p, FlceMode, const DeviceInfo&) -> std::optional<std::string> {
    if (p.N < bm) return "N smaller than bm";
    return std::nullopt;
  };
  v.workspace_bytes = [](const FlceProblem&, FlceMode) { return size_t(0); };
  v.launch = [](const FlceProblem&, FlceMode, const FlceArgs&, cudaStream_t) {};
  return v;
}

// The builtin registry (every engine, the cuBLASLt one among them) is built
// and listed without loading libcublasLt: kernels/baseline/lt_matmul.cpp opens
// it on the first cuBLASLt GEMM (tests/engines/test_baseline.cu checks that
// it is open after one). Linked, it cost every process ~0.17 s at start.
TEST(Registry, BuiltinRegistryDoesNotLoadCublasLt) {
  EXPECT_FALSE(builtin_registry().flce().empty());
  std::ifstream maps("/proc/self/maps");
  ASSERT_TRUE(maps.good()) << "/proc/self/maps (Linux only)";
  std::stringstream all;
  all << maps.rdbuf();
  EXPECT_EQ(all.str().find("libcublasLt"), std::string::npos) << "libcublasLt is mapped before any cuBLASLt call";
}

TEST(Registry, CanonicalNameSpellsEveryParameter) {
  EXPECT_EQ(VariantDesc::canonical_name(Family::flce, DType::bf16, "wgmma", "owning", {{"bm", 128}, {"bn", 64}, {"s", 3}}),
            "flce.bf16.wgmma.owning.bm128_bn64_s3");
}

TEST(Registry, EveryBuiltinEngineTokenIsKnown) {
  EXPECT_EQ(known_engines_text(), "fma, mma, wgmma, wgmmalt or cublaslt");
  const auto& known = known_engines();
  for (const VariantDesc* d : builtin_registry().descriptors())
    EXPECT_NE(std::find(known.begin(), known.end(), d->engine), known.end()) << d->name;
}

TEST(Strategy, TokensRoundTripAndUnknownOnesAreRefused) {
  for (Strategy s : kStrategies) {
    ASSERT_TRUE(parse_strategy(to_string(s))) << to_string(s);
    EXPECT_EQ(*parse_strategy(to_string(s)), s);
  }
  EXPECT_STREQ(to_string(Strategy::forward_only), "fwd");
  EXPECT_EQ(known_strategies_text(), "owning, atomic, partials, ordered or fwd");
  EXPECT_FALSE(parse_strategy(""));
  EXPECT_FALSE(parse_strategy("Owning"));
  EXPECT_FALSE(parse_strategy("atomics"));
  EXPECT_FALSE(is_deterministic(Strategy::atomic));
  EXPECT_TRUE(is_deterministic(Strategy::ordered));
}

TEST(Registry, EveryBuiltinStrategyTokenIsKnown) {
  for (const VariantDesc* d : builtin_registry().descriptors()) {
    const auto s = parse_strategy(d->strategy);
    ASSERT_TRUE(s) << d->name;
    // A variant promises run-to-run bits exactly when its strategy does.
    EXPECT_EQ(d->deterministic, is_deterministic(*s)) << d->name;
  }
}

TEST(Registry, AddFindAndRejectDuplicatesOrBadNames) {
  Registry r;
  r.add(fake_variant("owning", 64));
  r.add(fake_variant("atomic", 64));
  EXPECT_EQ(r.flce().size(), 2u);
  ASSERT_NE(r.find_flce("flce.bf16.mma.owning.bm64_w4"), nullptr);
  EXPECT_EQ(r.find_flce("flce.bf16.mma.owning.bm32_w4"), nullptr);
  EXPECT_THROW(r.add(fake_variant("owning", 64)), Error);
  FlceVariant bad = fake_variant("partials", 32);
  bad.desc.name = "flce.bf16.mma.partials.whatever";
  EXPECT_THROW(r.add(bad), Error);
  EXPECT_THROW(r.add(fake_variant("sometimes", 32)), Error);  // not a strategy token
  FlceVariant incomplete = fake_variant("partials", 32);
  incomplete.launch = nullptr;
  EXPECT_THROW(r.add(incomplete), Error);
  EXPECT_EQ(r.descriptors().size(), 2u);
}

TEST(Registry, BuiltinVariantsAreCanonicalAndUnique) {
  const Registry& r = builtin_registry();
  for (const VariantDesc* d : r.descriptors()) {
    EXPECT_EQ(d->name, VariantDesc::canonical_name(d->family, d->dtype, d->engine, d->strategy, d->params));
    EXPECT_FALSE(d->summary.empty()) << d->name;
  }
}

}  // namespace
}  // namespace detfuse
