// The detfuse command, as a function the tests call in-process:
//   detfuse devices | list | tune | best | verify | bench | db export | db merge
// main() only forwards to run_cli(). Exit codes: 0 success; 1 runtime failure
// (including "no CUDA device"); 2 bad usage or bad input (one line on stderr);
// 130 when a tuning run was interrupted by Ctrl-C (the run is marked so).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "tuner/best.h"
#include "tuner/supervisor.h"

namespace detfuse::cli {

// What the command depends on, replaceable by tests (a fake registry,
// heuristics over it, no GPU).
struct CliContext {
  const Registry* registry = nullptr;           // null: builtin_registry()
  tuner::FlceHeuristicFn heuristic;             // empty: flce::heuristic_variant
  tuner::AttentionHeuristicFn attention_heuristic;  // empty: the attention family's default
  std::function<int(std::string*)> device_count;  // empty: cuda_device_count
  // What `tune`'s measuring worker builds for `--gpu SPEC` (runs after the fork,
  // or in-process with --in-process). Empty: the GPU measurer on that device.
  std::function<tuner::WorkerSetup(const std::string& gpu)> worker_setup;
};

int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err);
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
            const CliContext& ctx = {});

}  // namespace detfuse::cli
