// Internal: a tiny deterministic parallel-for over independent tasks.
//
// Tasks are handed out dynamically (an atomic counter), so which thread runs a
// task varies, but every task writes only its own outputs and computes them in
// a fixed order: results are bitwise identical for any thread count. The worker
// index passed to the task selects per-thread scratch. The first exception
// thrown by a task stops the hand-out and is rethrown to the caller.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace detfuse::reference::detail {

// 0 means std::thread::hardware_concurrency() (1 when unknown).
inline int resolve_threads(int threads) {
  if (threads > 0) return threads;
  unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

// Runs f(task, worker) for task in [0, ntasks) on min(threads, ntasks) workers.
template <class F>
void parallel_for(int64_t ntasks, int threads, F&& f) {
  const int nw = int(std::min<int64_t>(resolve_threads(threads), std::max<int64_t>(ntasks, 1)));
  if (nw <= 1) {
    for (int64_t t = 0; t < ntasks; ++t) f(t, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&](int worker) {
    for (;;) {
      const int64_t t = next.fetch_add(1);
      if (t >= ntasks) return;
      try {
        f(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next.store(ntasks);
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(nw - 1));
  for (int w = 1; w < nw; ++w) pool.emplace_back(work, w);
  work(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Splits n items into chunks of `chunk`; returns the chunk count.
inline int64_t chunks(int64_t n, int64_t chunk) { return (n + chunk - 1) / chunk; }

}  // namespace detfuse::reference::detail
