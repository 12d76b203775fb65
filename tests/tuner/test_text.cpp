#include <gtest/gtest.h>

#include <cmath>

#include "kernels/common/error.h"
#include "tuner/budget.h"
#include "tuner/presets.h"
#include "tuner/stats.h"
#include "tuner/text.h"

namespace detfuse::tuner {
namespace {

TEST(Duration, ParsesUnitsAndCombinations) {
  EXPECT_DOUBLE_EQ(parse_duration("90s"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("10m"), 600);
  EXPECT_DOUBLE_EQ(parse_duration("1h"), 3600);
  EXPECT_DOUBLE_EQ(parse_duration("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("2.5m"), 150);
  EXPECT_DOUBLE_EQ(parse_duration("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(parse_duration("45"), 45);
  EXPECT_DOUBLE_EQ(parse_duration(" 3m "), 180);
}

TEST(Duration, RejectsMalformedText) {
  for (const char* bad : {"", "m", "10x", "1.2.3s", "-5s", "10 m", "5m3", "abc", "1h-2m"}) {
    try {
      parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << bad;
      EXPECT_NE(std::string(e.what()).find("duration"), std::string::npos);
    }
  }
}

TEST(Duration, Formats) {
  EXPECT_EQ(format_duration(0.25), "250 ms");
  EXPECT_EQ(format_duration(4.2), "4.2 s");
  EXPECT_EQ(format_duration(42), "42 s");
  EXPECT_EQ(format_duration(70), "1m10s");
  EXPECT_EQ(format_duration(3900), "1h05m");
}

TEST(Progress, EtaFromMeanTimePerItem) {
  EXPECT_EQ(format_eta(0, 18, 0), "ETA ?");
  EXPECT_DOUBLE_EQ(estimate_remaining_seconds(3, 18, 15.0), 75.0);
  EXPECT_EQ(format_eta(3, 18, 15.0), "ETA 1m15s");
  EXPECT_EQ(format_eta(18, 18, 100.0), "ETA 0 ms");
  EXPECT_EQ(progress_line(3, 18, "flce.bf16.mma.owning.bm64", 4.2, 3, 14.0), "[3/18] flce.bf16.mma.owning.bm64... 4.2 s, ETA 1m10s");
}

TEST(Shape, ParsesThreePositiveIntegers) {
  Shape3 s = parse_shape("16384,4096,128256");
  EXPECT_EQ(s.N, 16384);
  EXPECT_EQ(s.D, 4096);
  EXPECT_EQ(s.V, 128256);
  s = parse_shape(" 1 , 2 ,3 ");
  EXPECT_EQ(s.N, 1);
  EXPECT_EQ(s.V, 3);
}

TEST(Shape, RejectsAnythingElseNamingTheOption) {
  for (const char* bad : {"", "1,2", "1,2,3,4", "a,b,c", "0,1,1", "-1,2,3", "1,,3", "1.5,2,3", "1x2x3"}) {
    try {
      parse_shape(bad, "--shape");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::invalid_argument);
      EXPECT_EQ(std::string(e.what()).rfind("--shape", 0), 0u) << e.what();
    }
  }
}

TEST(Text, BytesAndOneLine) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
  EXPECT_EQ(one_line("a\nb\tc\n"), "a b c");
}

TEST(Stats, MedianMinMaxSpread) {
  auto s = summarize_samples({3, 1, 2});
  EXPECT_DOUBLE_EQ(s.median, 2);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 3);
  EXPECT_DOUBLE_EQ(s.spread, 1.0);
  s = summarize_samples({4, 1, 2, 3});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_EQ(s.count, 4);
  EXPECT_THROW(summarize_samples({}), Error);
}

TEST(Stats, RepetitionPlan) {
  RepetitionPolicy p;  // min 5, max 200, target 500 ms, cap 20 s
  EXPECT_EQ(plan_repetitions(100, p), 5);
  EXPECT_EQ(plan_repetitions(50, p), 10);
  EXPECT_EQ(plan_repetitions(1, p), 200);     // short kernels: more, up to max
  EXPECT_EQ(plan_repetitions(500, p), 5);     // long ones: the minimum
  EXPECT_EQ(plan_repetitions(10000, p), 5);   // the cap never cuts below the minimum
  p.cap_ms = 100;
  EXPECT_EQ(plan_repetitions(2, p), 50);      // the cap limits short ones
  EXPECT_EQ(plan_repetitions(0, p), 5);
  EXPECT_GE(plan_warmup(0.1), plan_warmup(100));
}

TEST(Budget, CountsDownOnTheInjectedClock) {
  double now = 100;
  Budget b(60, [&] { return now; });
  EXPECT_TRUE(b.limited());
  EXPECT_TRUE(b.may_start());
  now = 130;
  EXPECT_DOUBLE_EQ(b.remaining(), 30);
  EXPECT_DOUBLE_EQ(b.cap(20), 20);
  EXPECT_DOUBLE_EQ(b.cap(45), 30);
  now = 161;
  EXPECT_TRUE(b.exhausted());
  EXPECT_FALSE(b.may_start());
  EXPECT_DOUBLE_EQ(b.remaining(), 0);
  Budget none(0, [&] { return now; });
  EXPECT_FALSE(none.limited());
  EXPECT_TRUE(std::isinf(none.remaining()));
  EXPECT_TRUE(none.may_start());
}

TEST(Presets, LlmHeadsHasTheRealHeadsAndKeepsOptions) {
  FlceProblem opts;
  opts.dtype = DType::bf16;
  opts.label_smoothing = 0.1;
  auto ps = expand_preset("llm-heads", opts);
  ASSERT_GE(ps.size(), 4u);
  EXPECT_EQ(ps[0].shape(), "16384,4096,128256");
  EXPECT_EQ(ps[1].shape(), "8192,2304,256000");
  for (const auto& p : ps) {
    EXPECT_NO_THROW(p.validate());
    EXPECT_EQ(p.dtype, DType::bf16);
    EXPECT_DOUBLE_EQ(p.label_smoothing, 0.1);
  }
  try {
    expand_preset("nope", opts);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("llm-heads"), std::string::npos);
  }
}

}  // namespace
}  // namespace detfuse::tuner
