#include "tuner/interrupt.h"

#include <atomic>
#include <csignal>

namespace detfuse::tuner {

namespace {
std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process
}
}  // namespace

void install_sigint_handler() { std::signal(SIGINT, on_sigint); }
bool interrupt_requested() { return g_interrupted.load(); }
void request_interrupt() { g_interrupted.store(true); }
void clear_interrupt() { g_interrupted.store(false); }

}  // namespace detfuse::tuner
