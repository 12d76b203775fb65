// Time budget of a tuning run (--budget 10m). The clock is injectable so tests
// can simulate time passing without sleeping.
#pragma once

#include <chrono>
#include <functional>

namespace detfuse::tuner {

// Seconds on a monotonic clock.
double monotonic_seconds();

class Budget {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  // total_s <= 0 means no budget.
  explicit Budget(double total_s = 0, Clock clock = monotonic_seconds);

  bool limited() const { return total_ > 0; }
  double total() const { return total_; }
  double elapsed() const;
  // Seconds left (infinity without a budget, never below 0).
  double remaining() const;
  bool exhausted() const { return limited() && remaining() <= 0; }
  // Whether another item may start: the budget is not spent. (An item that
  // starts may finish past the budget: its minimum repetitions always run.)
  bool may_start() const { return !exhausted(); }
  // The per-item cap: min(cap_s, remaining()).
  double cap(double cap_s) const;

 private:
  double total_;
  Clock clock_;
  double start_;
};

// The soft cap of one variant's measuring (MeasureControl::time_cap_s): loops
// (K repeats, timing repetitions) stop once it is spent, but never before their
// minimum. Unlike Budget, a cap of 0 is a cap (spent at once), not "none".
class SoftCap {
 public:
  explicit SoftCap(double seconds, Budget::Clock clock = monotonic_seconds);
  bool spent() const { return remaining() <= 0; }
  double remaining() const;  // never below 0; infinity for an infinite cap
  // Whether a loop that has done `done` iterations, of which `minimum` are
  // never cut, should do another.
  bool keep_going(int done, int minimum) const { return done < minimum || !spent(); }

 private:
  double cap_;
  Budget::Clock clock_;
  double start_;
};

}  // namespace detfuse::tuner
