// Internal helpers shared by the subcommands of the detfuse command.
#pragma once

#include <boost/program_options.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"
#include "tuner/family.h"
#include "tuner/flce_gpu.h"
#include "tuner/supervisor.h"

namespace detfuse::cli {

namespace po = boost::program_options;

// Bad usage: exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A GPU is needed and there is none: exit code 1.
struct NoDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Env {
  const CliContext& ctx;
  const Registry& reg;
  std::ostream& out;
  std::ostream& err;
  std::string command_line;
};

// Parses args (after the subcommand) into vm; --help prints `usage` and desc and
// returns false (the caller returns 0).
bool parse(const std::vector<std::string>& args, const po::options_description& desc,
           const po::positional_options_description* pos, po::variables_map& vm, const std::string& usage,
           std::ostream& out);

// Problem options shared by tune, best, verify and bench: --kernel, --shape,
// --dtype, FLCE's options and attention's (--causal, --scale).
void add_problem_options(po::options_description& d, bool shape_required_text = true);
// The family of --kernel (or `family` when given, e.g. bench's positional).
Family kernel_family(const po::variables_map& vm, std::optional<Family> family = {});
// The problem from the options; the shape from --shape (flce N,D,V; attention
// B,H,Hkv,Sq,Sk,d). An option of the other family is bad usage.
tuner::Problem problem_from(const po::variables_map& vm, bool need_shape = true, std::optional<Family> family = {});

// The current device, or NoDevice with the reason.
DeviceInfo require_device(const Env& env, int ordinal = 0);
tuner::HeuristicFn heuristic(const Env& env);

// --inputs DIR, by the problem's family; the problem's shape is set from the
// files (they must agree with --shape when it is given); values rounded to the
// dtype.
//   flce:      X.npy [N,D] <f4, W.npy [V,D] <f4, y.npy [N] <i8
//   attention: Q.npy [B,H,Sq,d], K.npy and V.npy [B,Hkv,Sk,d], dO.npy [B,H,Sq,d], all <f4
tuner::HostInputs load_inputs(const std::filesystem::path& dir, tuner::Problem& p, bool shape_given);
tuner::FlceHostInputs load_inputs(const std::filesystem::path& dir, FlceProblem& p, bool shape_given);

// The GPU measurer on `gpu` (ordinal, UUID or UUID prefix): what tune's worker builds.
// sms > 0: the measurer launches on a green-context slice of that many SMs
// (tuner/sm_slice.h; the count granted is WorkerSetup::sms).
tuner::WorkerSetup gpu_worker_setup(const std::string& gpu, int sms = 0);

// The measurer a command runs on: in this process (--in-process) or in a
// supervised worker built by `factory`; the device it found and the SM count
// its slice was granted (0: no slice).
struct StartedMeasurer {
  std::unique_ptr<tuner::Measurer> in_process;
  std::unique_ptr<tuner::SupervisedMeasurer> supervised;
  DeviceInfo dev;
  int granted = 0;
  tuner::Measurer& get() { return in_process ? *in_process : static_cast<tuner::Measurer&>(*supervised); }
};
StartedMeasurer start_measurer(const Env& env, const tuner::WorkerFactory& factory, bool in_process);

int cmd_devices(Env& env, const std::vector<std::string>& args);
int cmd_list(Env& env, const std::vector<std::string>& args);
int cmd_tune(Env& env, const std::vector<std::string>& args);
int cmd_best(Env& env, const std::vector<std::string>& args);
int cmd_verify(Env& env, const std::vector<std::string>& args);
int cmd_bench(Env& env, const std::vector<std::string>& args);
int cmd_db(Env& env, const std::vector<std::string>& args);
int cmd_study(Env& env, const std::vector<std::string>& args);  // cli/cmd_study.cpp

}  // namespace detfuse::cli
