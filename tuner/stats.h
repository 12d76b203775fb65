// Statistics of timing samples and the repetition plan (pure, CPU-tested).
#pragma once

#include <vector>

namespace detfuse::tuner {

struct SampleStats {
  int count = 0;
  double median = 0, min = 0, max = 0;
  double spread = 0;  // (max - min) / median: the full relative range of the samples
};

// Median (mean of the middle two for an even count), min, max, spread.
// Throws detfuse::Error on an empty list.
SampleStats summarize_samples(const std::vector<double>& samples);

// How many timed repetitions to run: enough to fill target_ms of timed work,
// at least min_reps, at most max_reps, and no more than cap_ms allows (but
// never fewer than min_reps: a cap cuts a variant's timing, not its minimum).
struct RepetitionPolicy {
  int min_reps = 5;
  int max_reps = 200;
  double target_ms = 500;   // timed work to aim for per variant
  double cap_ms = 20000;    // per-variant timing cap (the budget may lower it)
};
int plan_repetitions(double estimate_ms, const RepetitionPolicy& p);

// Warm-up launches before timing: more for short kernels (clocks and caches
// settle), one for long ones.
int plan_warmup(double estimate_ms);

}  // namespace detfuse::tuner
