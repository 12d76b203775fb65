// Determinism levels in the tuner, on the CPU: the config check (pure), the
// per-level report, the config level a tune stores, best at a level through
// resolve_best, the supervisor's JSON form of the checks, verify's config
// classes. The GPU checks (sm_count, portable) are in tests/tuner_gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "kernels/common/error.h"
#include "tests/tuner/fakes.h"
#include "tests/tuner/tuner_fixture.h"
#include "tuner/best.h"
#include "tuner/levels.h"
#include "tuner/records.h"
#include "tuner/selection.h"
#include "tuner/supervisor.h"
#include "tuner/tuner.h"
#include "tuner/verify.h"

namespace detfuse::tuner {
namespace {

using testing::FakeClock;
using testing::FakeMeasurer;

// K repeats of (dX, dW) digests; `vary` makes dW differ between repeats.
db::Determinism det(char dx, char dw, bool vary = false, int K = 3) {
  db::Determinism d;
  d.repeats = K;
  for (int r = 0; r < K; ++r) {
    d.digests.push_back({r, "dX", std::string(32, dx)});
    std::string w(32, dw);
    if (vary) w[0] = char('0' + r);
    d.digests.push_back({r, "dW", w});
  }
  return d;
}

TEST(TunerLevels, ConfigGroupIsFamilyDtypeEngineStrategy) {
  VariantDesc d;
  d.family = Family::flce;
  d.dtype = DType::bf16;
  d.engine = "wgmma";
  d.strategy = "owning";
  EXPECT_EQ(config_group(d), "flce.bf16.wgmma.owning");
  db::VariantRecord v{"attention.fp32.fma.partials.x", "attention", "partials", "fp32", "", true, "fma"};
  EXPECT_EQ(config_group(v), "attention.fp32.fma.partials");
}

TEST(TunerLevels, ConfigIsShownOnlyWhenTheWholeGroupAgrees) {
  const db::Determinism a = det('a', 'b'), a2 = det('a', 'b'), other_dw = det('a', 'c'), noisy = det('a', 'b', true),
                        alone = det('e', 'f');
  const std::vector<LevelSubject> s = {
      {"g1.x", "G1", &a},  {"g1.y", "G1", &a2},  // G1: two agreeing variants
      {"g2.x", "G2", &a},  {"g2.y", "G2", &other_dw}, {"g2.z", "G2", &a2},  // G2: one differs in dW
      {"g3.x", "G3", &a},  {"g3.y", "G3", &noisy},    // G3: a variant whose own repeats differ
      {"g4.x", "G4", &alone},                          // G4: alone
      {"g4.y", "G4", nullptr},                         // not measured: not compared, not checked
  };
  const auto out = config_checks(s);
  ASSERT_EQ(out.size(), s.size());
  EXPECT_EQ(out[0].outcome, db::kCheckShown);
  EXPECT_EQ(out[0].note, "same bits as 1 other variant(s) of G1");
  EXPECT_EQ(out[1].outcome, db::kCheckShown);
  // In G2 every member fails: "identical bits to EVERY other variant".
  EXPECT_EQ(out[2].outcome, db::kCheckFailed);
  EXPECT_EQ(out[2].note, "differs from g2.y (dW) of 2 in G2");
  EXPECT_EQ(out[3].outcome, db::kCheckFailed);
  EXPECT_EQ(out[3].note, "differs from g2.x (dW) and 1 more of 2 in G2");
  EXPECT_EQ(out[4].outcome, db::kCheckFailed);
  EXPECT_EQ(out[5].outcome, db::kCheckFailed);  // its partner's bits are not one value
  EXPECT_EQ(out[5].note, "differs from g3.y (dW) of 1 in G3");
  EXPECT_EQ(out[6].outcome, db::kCheckFailed);
  EXPECT_EQ(out[6].note, "its own repeats differ");
  EXPECT_EQ(out[7].outcome, db::kCheckNotChecked);
  EXPECT_EQ(out[7].note, "alone in its group G4");
  EXPECT_EQ(out[8].outcome, db::kCheckNotChecked);
  EXPECT_EQ(out[8].note, "");
  // An output one variant has and the other lacks is a difference.
  db::Determinism fewer = a;
  fewer.digests.erase(std::remove_if(fewer.digests.begin(), fewer.digests.end(),
                                     [](const db::DigestRow& r) { return r.output == "dW"; }),
                      fewer.digests.end());
  const auto o2 = config_checks({{"p", "G", &a}, {"q", "G", &fewer}});
  EXPECT_EQ(o2[0].outcome, db::kCheckFailed);
  EXPECT_EQ(o2[0].note, "differs from q (dW) of 1 in G");
}

TEST(TunerLevels, Repeat0DifferencesAndSlices) {
  const db::Determinism a = det('a', 'b');
  EXPECT_TRUE(repeat0_differences(a, {{"dX", std::string(32, 'a')}, {"dW", std::string(32, 'b')}}).empty());
  EXPECT_EQ(repeat0_differences(a, {{"dX", std::string(32, 'a')}, {"dW", std::string(32, 'c')}}),
            (std::vector<std::string>{"dW"}));
  EXPECT_EQ(repeat0_differences(a, {{"dX", std::string(32, 'a')}}), (std::vector<std::string>{"dW"}));
  EXPECT_EQ(repeat0_differences(a, {{"dX", std::string(32, 'a')}, {"dW", std::string(32, 'b')}, {"lse", "x"}}),
            (std::vector<std::string>{"lse"}));
  // Only repeat 0 counts (a later repeat differing is the run_to_run check's business).
  EXPECT_TRUE(repeat0_differences(det('a', 'b', true), {{"dX", std::string(32, 'a')}, {"dW", "0" + std::string(31, 'b')}})
                  .empty());
  EXPECT_EQ(sm_count_slices(132), (std::vector<int>{16, 66}));
  EXPECT_EQ(sm_count_slices(114), (std::vector<int>{16, 66}));
  EXPECT_EQ(sm_count_slices(40), (std::vector<int>{16}));
  EXPECT_TRUE(sm_count_slices(16).empty());
}

Candidate cand(const std::string& name, double ms, const std::string& level, db::LevelChecks c = {},
               bool by_design = true) {
  Candidate x;
  x.variant = name;
  x.correct = true;
  x.median_ms = ms;
  x.level = level;
  x.checks = c;
  x.deterministic_by_design = by_design;
  return x;
}

db::LevelChecks checks(const char* r, const char* s, const char* c, const char* p) {
  db::LevelChecks x;
  x.run_to_run = r;
  x.sm_count = s;
  x.config = c;
  x.portable = p;
  return x;
}

TEST(TunerLevels, LevelChoicesGiveTheFastestAtEachLevelAndItsCost) {
  const char *S = db::kCheckShown, *F = db::kCheckFailed, *N = db::kCheckNotChecked;
  std::vector<Candidate> cs = {
      cand("atomic", 1.0, db::kLevelNone, checks(F, N, N, N), false),  // fastest overall, nondeterministic
      cand("r2r", 1.25, db::kLevelRunToRun, checks(S, F, N, N)),
      cand("cfg", 1.5, db::kLevelConfig, checks(S, F, S, N)),
      cand("sm", 2.0, db::kLevelSmCount, checks(S, S, F, N)),
      cand("slowcfg", 3.0, db::kLevelConfig, checks(S, N, S, N)),
  };
  Candidate wrong = cand("wrong", 0.5, db::kLevelPortable, checks(S, S, S, S));
  wrong.correct = false;  // incorrect: neither the fastest nor at any level
  cs.push_back(wrong);
  const LevelReport r = level_choices(cs);
  ASSERT_TRUE(r.fastest);
  EXPECT_EQ(r.fastest->variant, "atomic");
  ASSERT_EQ(r.levels.size(), 4u);
  EXPECT_EQ(r.levels[0].level, "run_to_run");
  EXPECT_EQ(r.levels[0].best->variant, "r2r");
  EXPECT_DOUBLE_EQ(r.levels[0].ratio, 1.25);
  EXPECT_EQ(r.levels[1].level, "sm_count");
  EXPECT_EQ(r.levels[1].best->variant, "sm");
  EXPECT_DOUBLE_EQ(r.levels[1].ratio, 2.0);
  EXPECT_EQ(r.levels[2].best->variant, "cfg");
  EXPECT_DOUBLE_EQ(r.levels[2].ratio, 1.5);
  EXPECT_FALSE(r.levels[3].best.has_value());  // portable: nobody correct has it
  const std::string t = format_level_choices(r);
  EXPECT_NE(t.find("(any)       atomic        1.000      1.000"), std::string::npos) << t;
  EXPECT_NE(t.find("config      cfg           1.500      1.500"), std::string::npos) << t;
  EXPECT_NE(t.find("portable    (none shown)"), std::string::npos) << t;
  // A level above run_to_run counts as run_to_run for the default selection.
  EXPECT_TRUE(eligible(cs[2], false));
  EXPECT_TRUE(eligible(cand("p", 1, db::kLevelPortable, checks(S, N, N, S)), false));
}

// A case whose only real part is the emulation's digests (check_portable's input).
struct EmulatingCase : GpuCase {
  std::optional<std::vector<std::pair<std::string, std::string>>> emu;
  std::string why = "no CPU emulation of this variant";
  int calls = 0;
  void run_once(const Variant&) override {}
  bool repeat_digests(const Variant&, int, const std::function<bool()>&, db::Determinism&,
                      const std::function<bool()>&) override {
    return true;
  }
  bool time_mode(const Variant&, Mode, const RepetitionPolicy&, const std::function<bool()>&, db::Timing&,
                 int*) override {
    return true;
  }
  void dump_outputs(const std::filesystem::path&) override {}
  std::optional<std::vector<std::pair<std::string, std::string>>> emulated_digests(const Variant&, double max_flops,
                                                                                   std::string* w) override {
    ++calls;
    EXPECT_EQ(max_flops, kPortableMaxFlops);
    if (!emu && w) *w = why;
    return emu;
  }
};

TEST(TunerLevels, PortableIsShownWhenEveryOutputEqualsTheEmulation) {
  const Registry reg = testing::fake_registry();
  const Variant v(*reg.find_flce("flce.fp32.fma.owning.bm64"));
  EmulatingCase c;
  db::Determinism d = det('a', 'b');
  d.checks.run_to_run = db::kCheckShown;
  c.emu = std::vector<std::pair<std::string, std::string>>{{"dX", std::string(32, 'a')}, {"dW", std::string(32, 'b')}};
  check_portable(c, v, d);
  EXPECT_EQ(d.checks.portable, db::kCheckShown);
  EXPECT_EQ(d.level, db::kLevelPortable);
  EXPECT_EQ(d.checks.notes, "portable: every output equals the CPU emulation");

  db::Determinism e = det('a', 'b');
  e.checks.run_to_run = db::kCheckShown;
  c.emu = std::vector<std::pair<std::string, std::string>>{{"dX", std::string(32, 'a')}, {"dW", std::string(32, 'f')}};
  check_portable(c, v, e);
  EXPECT_EQ(e.checks.portable, db::kCheckFailed);
  EXPECT_EQ(e.level, db::kLevelRunToRun);
  EXPECT_EQ(e.checks.notes, "portable: dW differ from the CPU emulation");

  db::Determinism n = det('a', 'b');
  n.checks.run_to_run = db::kCheckShown;
  c.emu.reset();
  check_portable(c, v, n);
  EXPECT_EQ(n.checks.portable, db::kCheckNotChecked);
  EXPECT_EQ(n.checks.notes, "portable: not checked: no CPU emulation of this variant");

  // Not run-to-run: neither portable nor sm_count is attempted (no emulation,
  // no GPU work).
  db::Determinism noisy = det('a', 'b', true);
  noisy.checks.run_to_run = db::kCheckFailed;
  const int before = c.calls;
  check_portable(c, v, noisy);
  EXPECT_EQ(c.calls, before);
  EXPECT_TRUE(check_sm_count(c, v, noisy, {}));
  EXPECT_EQ(noisy.checks.portable, db::kCheckNotChecked);
  EXPECT_EQ(noisy.checks.sm_count, db::kCheckNotChecked);
  EXPECT_EQ(noisy.checks.notes,
            "portable: not checked: the repeats were not run-to-run deterministic; sm_count: not checked: the repeats "
            "were not run-to-run deterministic");
}

TEST(TunerLevels, SupervisorJsonCarriesTheChecks) {
  VariantOutcome o;
  db::Determinism d = det('a', 'b');
  d.checks = checks(db::kCheckShown, db::kCheckFailed, db::kCheckNotChecked, db::kCheckShown);
  d.checks.notes = "sm_count: dW differ on 16 SMs vs 132";
  d.level = db::kLevelPortable;
  o.determinism = d;
  const VariantOutcome back = variant_outcome_from_json(to_json(o));
  ASSERT_TRUE(back.determinism);
  EXPECT_EQ(back.determinism->checks, d.checks);
  EXPECT_EQ(back.determinism->level, db::kLevelPortable);
}

TEST(TunerLevels, VerifyRowsGetTheConfigCheck) {
  std::vector<VerifyRow> rows(3);
  rows[0].variant = "a";
  rows[0].group = "G";
  rows[0].local = det('a', 'b');
  rows[0].local.checks.run_to_run = db::kCheckShown;
  rows[1].variant = "b";
  rows[1].group = "G";
  rows[1].local = det('a', 'b');
  rows[1].local.checks.run_to_run = db::kCheckShown;
  rows[2].variant = "c";
  rows[2].group = "H";
  rows[2].local = det('a', 'b');
  rows[2].local.checks.run_to_run = db::kCheckShown;
  apply_config_checks(rows);
  EXPECT_EQ(rows[0].local.level, db::kLevelConfig);
  EXPECT_EQ(rows[1].local.checks.config, db::kCheckShown);
  EXPECT_EQ(rows[2].local.level, db::kLevelRunToRun);  // same bits, but another group: not compared
  EXPECT_EQ(rows[2].local.checks.notes, "config: alone in its group H");
}

// A tune stores the config level: the fake measurer's two bf16 owning
// variants give the same digests; the scripted third one differs.
struct Tune : testing::TunerFixture {
  using TunerFixture::tune;
  TuneReport tune(db::Store& store, const FlceProblem& p, std::vector<std::string> variants = {}) {
    TuneOptions o;
    o.problems = {p};
    o.variants = std::move(variants);
    o.command_line = "detfuse tune (test)";
    return tune(store, o);
  }
  std::map<std::string, db::Determinism> stored(const db::Store& s, db::Id run) {
    std::map<std::string, db::Determinism> m;
    for (const auto& r : s.run_results(run))
      if (r.record.determinism) m[r.variant_name] = *r.record.determinism;
    return m;
  }
};

TEST_F(Tune, ConfigLevelIsComputedAndStoredPerRun) {
  reg.add(testing::fake_flce("owning", 256));
  db::Store store(tmp / "t.db");
  meas.median_ms = {{"flce.bf16.mma.owning.bm64", 20}, {"flce.bf16.mma.owning.bm128", 15},
                    {"flce.bf16.mma.owning.bm256", 12}, {"flce.bf16.mma.atomic.bm64", 5}};
  // bm256's dW differs from the other owning variants (e.g. another chunk grid).
  VariantOutcome odd;
  odd.correctness = db::Correctness{"full", {{"loss", 1e-6}}, 1e-2, true};
  db::Determinism d;
  d.repeats = 3;
  for (int r = 0; r < 3; ++r) {
    d.digests.push_back({r, "loss", std::string(32, 'a')});
    d.digests.push_back({r, "dW", std::string(32, 'e')});
  }
  d.level = db::kLevelRunToRun;
  odd.determinism = d;
  odd.timing = db::Timing{};
  odd.timing->samples_ms = {12, 12, 12, 12, 12};
  odd.timing->flops = 1e12;
  db::summarize(*odd.timing);
  meas.scripted["flce.bf16.mma.owning.bm256"] = odd;

  const FlceProblem p = testing::problem(1024, 256, 1000);
  auto rep = tune(store, p, {"flce.bf16.mma.owning.bm64", "flce.bf16.mma.owning.bm128", "flce.bf16.mma.atomic.bm64"});
  auto m = stored(store, rep.run_id);
  EXPECT_EQ(m["flce.bf16.mma.owning.bm64"].level, db::kLevelConfig);
  EXPECT_EQ(m["flce.bf16.mma.owning.bm128"].level, db::kLevelConfig);
  EXPECT_EQ(m["flce.bf16.mma.owning.bm128"].checks.notes, "config: same bits as 1 other variant(s) of flce.bf16.mma.owning");
  EXPECT_EQ(m["flce.bf16.mma.owning.bm64"].checks.sm_count, db::kCheckNotChecked);  // only with --levels
  EXPECT_EQ(m["flce.bf16.mma.atomic.bm64"].level, db::kLevelNone);
  EXPECT_EQ(m["flce.bf16.mma.atomic.bm64"].checks.config, db::kCheckNotChecked);  // alone in its group
  ASSERT_EQ(rep.problems.size(), 1u);
  const LevelReport& lr = rep.problems[0].levels;
  ASSERT_TRUE(lr.fastest);
  EXPECT_EQ(lr.fastest->variant, "flce.bf16.mma.atomic.bm64");
  EXPECT_EQ(lr.levels[2].level, "config");
  EXPECT_EQ(lr.levels[2].best->variant, "flce.bf16.mma.owning.bm128");
  EXPECT_DOUBLE_EQ(lr.levels[2].ratio, 3.0);
  EXPECT_EQ(rep.problems[0].best->level, db::kLevelConfig);

  // best at a level, from the store, through the selection the CLI and the APIs use.
  auto best_at = [&](const std::string& level) {
    db::Store ro = db::Store::open_read_only(tmp / "t.db");
    return resolve_best(&ro, device_rows_for(ro, dev), dev, p, Mode::forward_backward, false, reg, {}, level);
  };
  EXPECT_EQ(best_at("config").variant, "flce.bf16.mma.owning.bm128");
  EXPECT_EQ(best_at("config").source, ChoiceSource::tuned);
  EXPECT_EQ(best_at("none").variant, "flce.bf16.mma.atomic.bm64");
  const BestAnswer port = best_at("portable");
  EXPECT_EQ(port.source, ChoiceSource::heuristic);
  EXPECT_NE(port.notes.back().find("its determinism level was never shown (asked for portable)"), std::string::npos);
  EXPECT_THROW(best_at("fast"), Error);

  // A later tune with bm256 too (a plain tune measures every variant again,
  // in a new run): bm256's dW differs, so no owning variant of that run has
  // the config level.
  auto rep2 = tune(store, p, {"flce.bf16.mma.owning.bm64", "flce.bf16.mma.owning.bm128", "flce.bf16.mma.owning.bm256"});
  auto m2 = stored(store, rep2.run_id);
  EXPECT_EQ(m2["flce.bf16.mma.owning.bm64"].checks.config, db::kCheckFailed);
  EXPECT_EQ(m2["flce.bf16.mma.owning.bm256"].checks.config, db::kCheckFailed);
  EXPECT_NE(m2["flce.bf16.mma.owning.bm256"].checks.notes.find("differs from flce.bf16.mma.owning.bm128 (dW)"),
            std::string::npos)
      << m2["flce.bf16.mma.owning.bm256"].checks.notes;
  // The first run's results keep what their run showed.
  EXPECT_EQ(stored(store, rep.run_id)["flce.bf16.mma.owning.bm64"].level, db::kLevelConfig);
}

}  // namespace
}  // namespace detfuse::tuner
