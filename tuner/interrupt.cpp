#include "tuner/interrupt.h"

#include <atomic>
#include <csignal>
#include <ctime>

namespace detfuse::tuner {

namespace {
std::atomic<bool> g_interrupted{false};
std::atomic<long> g_first_ms{0};

long now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return long(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

extern "C" void on_sigint(int) {
  const long now = now_ms();
  if (!g_interrupted.exchange(true)) {
    g_first_ms.store(now);
    return;
  }
  // A second Ctrl-C ends the process at once. Signals that arrive together
  // (`timeout` signals the process and its group) count as one.
  if (now - g_first_ms.load() > 1000) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}
}  // namespace

void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
}
bool interrupt_requested() { return g_interrupted.load(); }
void request_interrupt() { g_interrupted.store(true); }
void clear_interrupt() { g_interrupted.store(false); }

}  // namespace detfuse::tuner
