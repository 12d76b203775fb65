// GPU test of the determinism levels (skips without a GPU): an in-process
// `tune --levels` of owning FLCE variants of one config group at two chunk
// budgets (mb512, mb1024: MiB of logits per chunk) on a multi-chunk shape, for the cuBLASLt, mma and
// fp32 fma engines; then every stored level is checked against the stored
// digests: config shown exactly when the group's repeat-0 digests agree,
// sm_count shown or failed (not_checked only without green contexts, said
// so), portable checked exactly for variants with a CPU emulation, and the
// level the strongest check shown. And `verify --levels` agrees with the
// stored sm_count and config outcomes.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "kernels/registry.h"
#include "reference/emulate.h"
#include "tests/gpu_test.h"
#include "tests/tuner/fakes.h"
#include "tuner/flce_measurer.h"
#include "tuner/levels.h"
#include "tuner/records.h"
#include "tuner/tuner.h"
#include "tuner/verify.h"

namespace detfuse::tuner {
namespace {

struct LevelsGpu : ::testing::Test {
  DeviceInfo dev;
  void SetUp() override {
    DETFUSE_REQUIRE_GPU();
    DETFUSE_CUDA_CHECK(cudaSetDevice(0));
    dev = query_device(0);
  }
};

// Registered owning variants of (dtype, engine) at mb512 and mb1024 of one tile.
std::vector<std::string> pair_of(DType dtype, const std::string& engine) {
  std::map<std::string, std::vector<std::string>> by_tile;  // name without _mbK -> names
  for (const auto& v : builtin_registry().flce()) {
    if (v.desc.dtype != dtype || v.desc.engine != engine || v.desc.strategy != "owning" || v.desc.study_only) continue;
    const std::string& n = v.desc.name;
    for (const char* mb : {"mb512", "mb1024"}) {
      const std::string suffix = std::string(mb);
      if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        by_tile[n.substr(0, n.size() - suffix.size())].push_back(n);
    }
  }
  for (auto& [tile, names] : by_tile)
    if (names.size() == 2) return names;
  return {};
}

std::vector<std::pair<std::string, std::string>> r0(const db::Determinism& d) { return repeat0_digests(d); }

TEST_F(LevelsGpu, TuneLevelsStoresLevelsConsistentWithTheDigests) {
  struct Case {
    FlceProblem p;
    std::vector<std::string> variants;
  };
  std::vector<Case> cases;
  // mb is the chunk's logits budget in MiB: at V = 60013 a 512 MiB chunk holds
  // about 2236 rows, so N = 4700 is 3 chunks at mb512 and 2 at mb1024 (as
  // s6-portable's several_chunks case); D and V not multiples of the tiles.
  // The fp32 shape stays under kPortableMaxFlops (the CPU emulation runs).
  for (const char* engine : {"cublaslt", "mma"}) {
    auto names = pair_of(DType::bf16, engine);
    if (!names.empty()) cases.push_back({testing::problem(4700, 72, 60013), names});
  }
  auto f32 = pair_of(DType::f32, "fma");
  if (!f32.empty()) cases.push_back({testing::problem(4700, 21, 60013, DType::f32), f32});
  ASSERT_FALSE(cases.empty()) << "no owning variant pair registered";

  testing::TempDir tmp;
  db::Store store(tmp / "levels.db");
  FlceGpuMeasurer m(dev);
  Tuner t(store, builtin_registry(), dev, m, &std::cerr);
  t.set_stop([] { return false; });
  for (const Case& c : cases) {
    TuneOptions o;
    o.problems = {c.p};
    o.variants = c.variants;
    o.repeats = 3;
    o.levels = true;
    const TuneReport rep = t.run(o);
    ASSERT_EQ(rep.status, db::kRunComplete);
    std::map<std::string, db::Determinism> d;
    for (const auto& r : store.run_results(rep.run_id)) {
      ASSERT_EQ(r.record.status, db::kResultOk) << r.variant_name << ": " << r.record.reason;
      d[r.variant_name] = *r.record.determinism;
    }
    ASSERT_EQ(d.size(), 2u);
    const db::Determinism &a = d[c.variants[0]], &b = d[c.variants[1]];
    const bool same = r0(a) == r0(b);
    for (const auto& [name, x] : d) {
      SCOPED_TRACE(name + " on " + c.p.key());
      std::cout << name << ": level " << x.level << "; " << x.checks.notes << "\n";
      EXPECT_EQ(x.checks.run_to_run, db::kCheckShown);  // owning: deterministic by design
      EXPECT_EQ(x.level, db::derive_level(x.checks));
      EXPECT_EQ(x.checks.config, same ? db::kCheckShown : db::kCheckFailed);
      if (x.checks.sm_count == db::kCheckNotChecked)
        EXPECT_NE(x.checks.notes.find("no green context"), std::string::npos) << x.checks.notes;
      else
        EXPECT_TRUE(x.checks.sm_count == db::kCheckShown || x.checks.sm_count == db::kCheckFailed);
      if (reference::has_emulation(name))
        EXPECT_TRUE(x.checks.portable == db::kCheckShown || x.checks.portable == db::kCheckFailed) << x.checks.notes;
      else
        EXPECT_EQ(x.checks.portable, db::kCheckNotChecked);
    }
    // verify --levels on the same problem and seed agrees with what was stored.
    VerifyOptions vo;
    vo.problem = c.p;
    vo.variants = c.variants;
    vo.repeats = 2;
    vo.levels = true;
    db::Store ro = db::Store::open_read_only(tmp / "levels.db");
    const auto rows = run_verify(&ro, builtin_registry(), dev, vo, nullptr);
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& row : rows) {
      SCOPED_TRACE(row.variant);
      EXPECT_EQ(row.status, kReproduced) << row.reason;
      EXPECT_EQ(row.local.checks.sm_count, d[row.variant].checks.sm_count) << row.local.checks.notes;
      EXPECT_EQ(row.local.checks.config, d[row.variant].checks.config);
      EXPECT_EQ(row.local.checks.portable, d[row.variant].checks.portable);
    }
  }
}

}  // namespace
}  // namespace detfuse::tuner
