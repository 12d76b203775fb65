#include "tuner/stats.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/error.h"

namespace detfuse::tuner {

SampleStats summarize_samples(const std::vector<double>& samples) {
  if (samples.empty()) throw Error("summarize_samples: no samples");
  std::vector<double> s = samples;
  std::sort(s.begin(), s.end());
  SampleStats st;
  st.count = int(s.size());
  const size_t n = s.size();
  st.median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  st.min = s.front();
  st.max = s.back();
  st.spread = st.median > 0 ? (st.max - st.min) / st.median : 0.0;
  return st;
}

int plan_repetitions(double estimate_ms, const RepetitionPolicy& p) {
  const int lo = std::max(1, p.min_reps);
  const int hi = std::max(lo, p.max_reps);
  if (!(estimate_ms > 0)) return lo;
  double want = std::ceil(p.target_ms / estimate_ms);
  double cap = std::floor(p.cap_ms / estimate_ms);
  double n = std::min(want, cap);
  if (!(n >= lo)) return lo;
  return int(std::min<double>(n, hi));
}

int plan_warmup(double estimate_ms) {
  if (estimate_ms < 1) return 10;
  if (estimate_ms < 20) return 3;
  return 1;
}

}  // namespace detfuse::tuner
