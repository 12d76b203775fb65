#include "tuner/budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace detfuse::tuner {

double monotonic_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Budget::Budget(double total_s, Clock clock) : total_(total_s > 0 ? total_s : 0), clock_(std::move(clock)) {
  start_ = clock_();
}

double Budget::elapsed() const { return clock_() - start_; }

double Budget::remaining() const {
  if (!limited()) return std::numeric_limits<double>::infinity();
  return std::max(0.0, total_ - elapsed());
}

double Budget::cap(double cap_s) const { return std::min(cap_s, remaining()); }

SoftCap::SoftCap(double seconds, Budget::Clock clock) : cap_(seconds), clock_(std::move(clock)) { start_ = clock_(); }

double SoftCap::remaining() const {
  if (std::isinf(cap_) && cap_ > 0) return cap_;
  if (!(cap_ > 0)) return 0;
  return std::max(0.0, cap_ - (clock_() - start_));
}

}  // namespace detfuse::tuner
