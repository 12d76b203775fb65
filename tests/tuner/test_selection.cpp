#include <gtest/gtest.h>

#include "tuner/selection.h"
#include "tuner/verify.h"

namespace detfuse::tuner {
namespace {

Candidate cand(const std::string& name, double ms, bool correct = true, const std::string& level = db::kLevelRunToRun,
               const std::string& status = db::kResultOk) {
  Candidate c;
  c.variant = name;
  c.status = status;
  c.correct = correct;
  c.level = level;
  c.median_ms = ms;
  return c;
}

TEST(Selection, FastestCorrectDeterministicWins) {
  std::vector<Candidate> cs = {cand("slow", 30), cand("atomic", 5, true, db::kLevelNone), cand("wrong", 1, false),
                               cand("fast", 20)};
  Candidate refused;
  refused.variant = "refused";
  refused.status = db::kResultCannotRun;
  refused.reason = "smem";
  cs.push_back(refused);
  auto rows = rank_candidates(cs, false);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].c.variant, "fast");
  EXPECT_EQ(rows[0].rank, 1);
  EXPECT_EQ(rows[1].c.variant, "slow");
  EXPECT_EQ(rows[1].rank, 2);
  // Ineligible rows with a timing follow by time, then the rest.
  EXPECT_EQ(rows[2].c.variant, "wrong");
  EXPECT_EQ(rows[2].rank, 0);
  EXPECT_NE(rows[2].note.find("incorrect"), std::string::npos);
  EXPECT_EQ(rows[3].c.variant, "atomic");
  EXPECT_NE(rows[3].note.find("nondeterministic"), std::string::npos);
  EXPECT_EQ(rows[4].c.variant, "refused");
  EXPECT_NE(rows[4].note.find("smem"), std::string::npos);
  EXPECT_EQ(choose_best(cs, false)->variant, "fast");
}

TEST(Selection, AllowNondeterministicLetsAtomicWinButNeverIncorrect) {
  std::vector<Candidate> cs = {cand("owning", 20), cand("atomic", 5, true, db::kLevelNone), cand("wrong", 1, false)};
  EXPECT_EQ(choose_best(cs, true)->variant, "atomic");
  EXPECT_EQ(choose_best(cs, false)->variant, "owning");
}

TEST(Selection, AgreeingRepeatsDoNotMakeAtomicsDeterministic) {
  Candidate lucky = cand("atomic", 5);  // its K repeats happened to agree
  lucky.deterministic_by_design = false;
  std::vector<Candidate> cs = {cand("owning", 20), lucky};
  EXPECT_EQ(choose_best(cs, false)->variant, "owning");
  EXPECT_EQ(choose_best(cs, true)->variant, "atomic");
  std::string why;
  EXPECT_FALSE(eligible(lucky, false, &why));
  EXPECT_NE(why.find("by design"), std::string::npos) << why;
  EXPECT_NE(why.find("happened to agree"), std::string::npos) << why;
}

TEST(Selection, NothingEligible) {
  std::vector<Candidate> cs = {cand("atomic", 5, true, db::kLevelNone), cand("unchecked", 3, true, "")};
  EXPECT_FALSE(choose_best(cs, false).has_value());
  std::string why;
  EXPECT_FALSE(eligible(cs[1], false, &why));
  EXPECT_NE(why.find("not checked"), std::string::npos);
  auto text = format_ranked_table(rank_candidates(cs, false));
  EXPECT_NE(text.find("atomic"), std::string::npos);
  EXPECT_NE(text.find("rank"), std::string::npos);
}

TEST(Selection, TiesBreakByName) {
  auto rows = rank_candidates({cand("b", 10), cand("a", 10)}, false);
  EXPECT_EQ(rows[0].c.variant, "a");
}

TEST(Selection, CandidateFromStoredResult) {
  db::ResultRecord r;
  r.status = db::kResultOk;
  r.correctness = db::Correctness{"full", {{"dW", 0.5}, {"loss", 1e-7}}, 1e-2, false};
  db::Determinism d;
  d.repeats = 2;
  d.distinct = {{"dW", 2}, {"loss", 1}};
  d.level = db::kLevelNone;
  r.determinism = d;
  db::Timing t;
  t.samples_ms = {1, 2, 3};
  t.median_ms = 2;
  t.min_ms = 1;
  t.max_ms = 3;
  r.timing = t;
  Candidate c = candidate_from(r, "v");
  EXPECT_EQ(c.correct, false);
  EXPECT_NE(c.correctness_note.find("dW"), std::string::npos);
  EXPECT_EQ(c.correctness_note.find("loss"), std::string::npos);
  EXPECT_EQ(c.max_distinct, 2);
  EXPECT_EQ(c.nondeterministic_outputs, "dW:2");
  EXPECT_DOUBLE_EQ(*c.median_ms, 2);
  EXPECT_DOUBLE_EQ(c.spread, 1.0);
}

db::Determinism det(const std::vector<std::pair<std::string, std::vector<std::string>>>& outs) {
  db::Determinism d;
  for (const auto& [name, ds] : outs) {
    std::set<std::string> s(ds.begin(), ds.end());
    d.distinct[name] = int(s.size());
    d.repeats = int(ds.size());
    for (size_t r = 0; r < ds.size(); ++r) d.digests.push_back({int(r), name, ds[r]});
  }
  return d;
}

TEST(Verify, DigestsReproduceOnlyWhenAllEqual) {
  auto local = det({{"loss", {"a", "a"}}, {"dW", {"b", "b"}}});
  std::vector<db::DigestRow> stored = {{0, "loss", "a"}, {0, "dW", "b"}, {1, "loss", "a"}, {1, "dW", "b"}};
  std::vector<std::string> why;
  EXPECT_TRUE(digests_reproduce(local, stored, &why));
  EXPECT_TRUE(why.empty());
  stored[1].digest = "c";
  stored[3].digest = "c";
  EXPECT_FALSE(digests_reproduce(local, stored, &why));
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].rfind("dW", 0), 0u);
  // Local repeats that differ among themselves never reproduce.
  auto noisy = det({{"dW", {"b", "x"}}});
  EXPECT_FALSE(digests_reproduce(noisy, {{0, "dW", "b"}}));
  // Stored nondeterminism is reported too.
  EXPECT_FALSE(digests_reproduce(det({{"dW", {"b"}}}), {{0, "dW", "b"}, {1, "dW", "z"}}));
  EXPECT_FALSE(digests_reproduce(det({{"dW", {"b"}}}), {}));
}

TEST(Verify, InvarianceClassesGroupBitwiseIdenticalVariants) {
  std::vector<VerifyRow> rows(4);
  rows[0].variant = "owning.a";
  rows[0].local = det({{"loss", {"l", "l"}}, {"dW", {"w1", "w1"}}});
  rows[1].variant = "partials.a";
  rows[1].local = det({{"loss", {"l", "l"}}, {"dW", {"w2", "w2"}}});
  rows[2].variant = "owning.b";
  rows[2].local = det({{"loss", {"l", "l"}}, {"dW", {"w1", "w1"}}});
  rows[3].variant = "atomic";
  rows[3].local = det({{"loss", {"l", "l"}}, {"dW", {"w1", "w9"}}});
  auto cls = invariance_classes(rows);
  ASSERT_EQ(cls.size(), 3u);
  EXPECT_EQ(cls[0].variants, (std::vector<std::string>{"owning.a", "owning.b"}));
  EXPECT_EQ(cls[1].variants, (std::vector<std::string>{"partials.a"}));
  EXPECT_FALSE(cls[2].self_consistent);
}

}  // namespace
}  // namespace detfuse::tuner
