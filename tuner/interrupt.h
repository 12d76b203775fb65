// Ctrl-C handling for long commands: the first SIGINT sets a flag that the
// tuner (and verify/bench) poll between steps, so the current variant is
// abandoned cleanly and the run is marked interrupted; a second SIGINT kills the
// process at once (the default action).
#pragma once

namespace detfuse::tuner {

void install_sigint_handler();
bool interrupt_requested();
void request_interrupt();  // as if SIGINT arrived (tests)
void clear_interrupt();

}  // namespace detfuse::tuner
