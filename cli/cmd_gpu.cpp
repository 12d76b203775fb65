// detfuse verify and detfuse bench: commands that run variants on the GPU
// without tuning.
#include <cstdio>
#include <sstream>

#include "cli/common.h"
#include "db/store.h"
#include "kernels/common/error.h"
#include "tuner/bench.h"
#include "tuner/best.h"
#include "tuner/footprint.h"
#include "tuner/interrupt.h"
#include "tuner/json.h"
#include "tuner/records.h"
#include "tuner/sm_slice.h"
#include "tuner/text.h"
#include "tuner/tuner.h"
#include "tuner/verify.h"

namespace detfuse::cli {

namespace {
// --sms K: every variant launches on a green-context slice of K SMs from here
// on (tuner/sm_slice.h); says what it got.
void use_sm_slice(Env& env, const po::variables_map& vm, const DeviceInfo& dev) {
  if (!vm.count("sms")) return;
  auto slice = std::make_shared<tuner::SmSlice>(dev.ordinal, vm["sms"].as<int>());
  env.err << "measuring on " << slice->sm_count() << " of " << dev.sm_count << " SMs"
          << (slice->plan().note.empty() ? "" : " (" + slice->plan().note + ")") << "\n";
  tuner::set_measure_slice(std::move(slice));
}
const char* const kSmsHelp =
    "run every variant on a green-context slice of K SMs (rounded up to the device's SM granularity)";
}  // namespace

namespace {
std::unique_ptr<db::Store> open_if_exists(const std::string& path) {
  if (!std::filesystem::exists(path)) return nullptr;
  return std::make_unique<db::Store>(db::Store::open_read_only(path));  // verify only reads the store
}
}  // namespace

int cmd_verify(Env& env, const std::vector<std::string>& args) {
  po::options_description d("verify options");
  add_problem_options(d);
  d.add_options()
      ("variant", po::value<std::vector<std::string>>()->composing(), "a variant name, or `best` (repeatable)")
      ("all-variants", "every variant that can run; groups bitwise-identical ones (config-invariance classes)")
      ("seed", po::value<int64_t>()->default_value(0), "seed of the random inputs (as tuned)")
      ("repeats", po::value<int>()->default_value(5), "K: runs per variant")
      ("inputs", po::value<std::string>(),
       "DIR of .npy inputs instead of seeded ones: flce X.npy, W.npy (float32), y.npy (int64); attention Q.npy, "
       "K.npy, V.npy, dO.npy (float32)")
      ("dump", po::value<std::string>(), "DIR to write every output as .npy (per variant when several)")
      ("db", po::value<std::string>()->default_value(db::kDefaultPath), "the database holding the stored digests")
      ("allow-nondeterministic", "`best` may resolve to a nondeterministic variant")
      ("levels", "check the sm_count level (repeat 0 on 16 and 66 SMs) and the portable level (CPU emulation) too")
      ("sms", po::value<int>(), kSmsHelp)
      ("device", po::value<int>()->default_value(0), "CUDA device ordinal");
  po::variables_map vm;
  if (!parse(args, d, nullptr, vm,
             "usage: detfuse verify --kernel flce --shape N,D,V --dtype bf16 (--variant NAME|best | --all-variants)\n"
             "                      [--seed S] [--repeats K] [--inputs DIR] [--dump DIR] [--db PATH]\n"
             "       detfuse verify --kernel attention --shape B,H,Hkv,Sq,Sk,d [--causal] [--softcap C] [--window W] (--variant NAME|best |\n"
             "                      --all-variants) [...]\n\n"
             "Runs each variant K times (forward+backward) on the seeded inputs, prints the digest of every\n"
             "output (flce: loss, lse, dX, dW; attention: O, lse, dQ, dK, dV), and compares them with the\n"
             "digests stored for this GPU, build, variant, problem and seed: `reproduced` (exit 0) or\n"
             "`mismatch` (exit 1); says so when nothing was stored. --all-variants prints the\n"
             "config-invariance classes (variants whose outputs are bitwise identical).\n\n"
             "Each variant's determinism level is printed with the outcome of every check (shown, failed,\n"
             "not_checked): run_to_run (the K repeats), config (same bits as the other variants of its\n"
             "family, dtype, engine and strategy in this call), and with --levels sm_count (repeat 0 on\n"
             "16 and 66 SMs, rounded to the GPU's granularity, vs the whole GPU) and portable (the CPU\n"
             "emulation). Nothing is stored; `tune --levels` stores the levels.",
             env.out))
    return 0;
  const bool all = vm.count("all-variants") > 0;
  if (!all && !vm.count("variant")) throw UsageError("give --variant NAME|best or --all-variants");
  if (all && vm.count("variant")) throw UsageError("--all-variants and --variant exclude each other");
  if (vm.count("levels") && vm.count("sms"))
    throw UsageError("--levels compares slices with the whole GPU: it cannot be combined with --sms");
  tuner::VerifyOptions o;
  o.levels = vm.count("levels") > 0;
  o.problem = problem_from(vm, !vm.count("inputs"));
  o.seed = vm["seed"].as<int64_t>();
  o.repeats = vm["repeats"].as<int>();
  if (o.repeats < 1) throw UsageError("--repeats: must be >= 1");
  if (!vm.count("inputs")) o.problem.check_fits(nullptr);  // before seeded inputs are made
  if (vm.count("inputs")) o.inputs = load_inputs(vm["inputs"].as<std::string>(), o.problem, vm.count("shape") > 0);
  if (vm.count("dump")) o.dump_dir = vm["dump"].as<std::string>();
  const std::string path = vm["db"].as<std::string>();
  // Names are checked before the GPU is touched (bad names: exit 2).
  std::vector<std::string> names;
  if (vm.count("variant"))
    for (const auto& n : vm["variant"].as<std::vector<std::string>>())
      if (n != "best") tuner::plan_variants(env.reg, o.problem, {n});

  if (vm.count("sms")) tuner::check_sms_argument(vm["sms"].as<int>());  // exit 2 before the GPU
  const DeviceInfo dev = require_device(env, vm["device"].as<int>());
  o.problem.check_fits(&dev);
  use_sm_slice(env, vm, dev);
  auto store = open_if_exists(path);
  if (vm.count("variant")) {
    for (const auto& n : vm["variant"].as<std::vector<std::string>>()) {
      if (n != "best") {
        names.push_back(n);
        continue;
      }
      std::vector<db::Id> ids = store ? tuner::device_rows_for(*store, dev) : std::vector<db::Id>{};
      auto a = tuner::resolve_best(store.get(), ids, dev, o.problem, tuner::Mode::forward_backward,
                                   vm.count("allow-nondeterministic") > 0, env.reg, heuristic(env));
      env.out << "best: " << a.variant << " (" << tuner::to_string(a.source) << ")\n";
      names.push_back(a.variant);
    }
  }
  o.variants = names;
  tuner::clear_interrupt();
  tuner::install_sigint_handler();
  auto rows = tuner::run_verify(store.get(), env.reg, dev, o, &env.err);

  env.out << "problem " << o.problem.key() << ", seed " << o.seed << (o.inputs.has_value() ? " (inputs from " + vm["inputs"].as<std::string>() + ")" : "")
          << ", " << o.repeats << " repeats on " << dev.name << " (" << dev.uuid << ")\n";
  bool failed = false;
  for (const auto& r : rows) {
    env.out << "\n" << r.variant << ": " << r.status << (r.reason.empty() ? "" : " (" + r.reason + ")") << "\n";
    if (!r.local.digests.empty()) {
      for (const auto& out : o.problem.output_names()) {
        std::vector<std::string> ds;
        for (const auto& dr : r.local.digests)
          if (dr.output == out) ds.push_back(dr.digest);
        if (ds.empty()) continue;
        char b[64];
        std::snprintf(b, sizeof b, "  %-5s", out.c_str());
        env.out << b;
        bool same = true;
        for (const auto& x : ds) same = same && x == ds.front();
        if (same) env.out << ds.front() << "  x" << ds.size();
        else for (size_t i = 0; i < ds.size(); ++i) env.out << (i ? "\n         " : "") << ds[i] << "  (repeat " << i << ")";
        if (r.stored) {
          for (const auto& sd : r.stored->digests)
            if (sd.output == out && sd.repeat == 0) env.out << "  stored " << (sd.digest == ds.front() ? "same" : sd.digest);
        }
        env.out << "\n";
      }
    }
    if (!r.local.digests.empty()) {
      const db::LevelChecks& c = r.local.checks;
      env.out << "  level " << r.local.level << " (run_to_run " << c.run_to_run << ", sm_count " << c.sm_count
              << ", config " << c.config << ", portable " << c.portable << ")\n";
      if (!c.notes.empty()) env.out << "    " << c.notes << "\n";
    }
    for (const auto& w : r.differences) env.out << "  differs: " << w << "\n";
    if (r.status == tuner::kMismatch || r.status == "error") failed = true;
    if (r.status == tuner::kNotStored && !r.differences.empty()) failed = true;
    if (!all && r.status == "cannot_run") failed = true;
  }
  if (all) {
    auto classes = tuner::invariance_classes(rows);
    env.out << "\nconfig-invariance classes (bitwise-identical outputs): " << classes.size() << "\n";
    int k = 0;
    for (const auto& c : classes) {
      env.out << "  class " << ++k << (c.self_consistent ? "" : " (differs run to run)") << ":";
      for (const auto& v : c.variants) env.out << " " << v;
      env.out << "\n";
    }
  }
  return failed ? 1 : 0;
}

int cmd_bench(Env& env, const std::vector<std::string>& args) {
  po::options_description d("bench options");
  add_problem_options(d);
  d.add_options()
      ("family", po::value<std::string>(), "positional: flce or attention")
      ("variant", po::value<std::vector<std::string>>()->composing(), "only these variants (repeatable)")
      ("repeats", po::value<int>()->default_value(5), "K: repeats for the distinct-digest count")
      ("seed", po::value<int64_t>()->default_value(0), "seed of the random inputs")
      ("inputs", po::value<std::string>(),
       "DIR of .npy inputs: flce X.npy, W.npy (float32), y.npy (int64); attention Q.npy, K.npy, V.npy, dO.npy")
      ("no-baseline", "flce: skip the three cuBLAS GEMMs")
      ("json", "machine-readable output")
      ("sms", po::value<int>(), kSmsHelp)
      ("device", po::value<int>()->default_value(0), "CUDA device ordinal");
  po::positional_options_description pos;
  pos.add("family", 1);
  po::variables_map vm;
  if (!parse(args, d, &pos, vm,
             "usage: detfuse bench flce --shape N,D,V --dtype bf16|fp32 [--variant NAME] [--repeats K] [--json]\n"
             "                          [--inputs DIR]\n"
             "       detfuse bench attention --shape B,H,Hkv,Sq,Sk,d [--causal] [--softcap C] [--window W] [--dtype bf16|fp32] [...]\n\n"
             "flce, per variant: median and spread of forward_backward time, TFLOP/s (6*N*D*V), ratio to\n"
             "three cuBLAS GEMMs of the shape timed in the same run, peak extra device memory, and the\n"
             "number of distinct dW digests over K repeats.\n"
             "attention, per variant: forward time and TFLOP/s (4*B*H*Sq*Sk*d, half if causal), forward+\n"
             "backward time and TFLOP/s (3.5 times the forward's count), peak extra device memory, and the\n"
             "number of distinct dQ digests (and of any other output that varies) over K repeats.",
             env.out))
    return 0;
  std::optional<Family> family;
  if (vm.count("family")) {
    const std::string f = vm["family"].as<std::string>();
    if (!vm["kernel"].defaulted() && vm["kernel"].as<std::string>() != f)
      throw UsageError("bench " + f + " and --kernel " + vm["kernel"].as<std::string>() + " disagree");
    family = parse_family(f);
  }
  tuner::BenchOptions o;
  o.problem = problem_from(vm, !vm.count("inputs"), family);
  o.repeats = vm["repeats"].as<int>();
  if (o.repeats < 1) throw UsageError("--repeats: must be >= 1");
  o.seed = vm["seed"].as<int64_t>();
  if (vm.count("variant")) o.variants = vm["variant"].as<std::vector<std::string>>();
  o.baseline = !vm.count("no-baseline");
  if (!vm.count("inputs")) o.problem.check_fits(nullptr);  // before seeded inputs are made
  if (vm.count("inputs")) o.inputs = load_inputs(vm["inputs"].as<std::string>(), o.problem, vm.count("shape") > 0);
  tuner::plan_variants(env.reg, o.problem, o.variants);  // bad names: exit 2 before the GPU
  if (vm.count("sms")) tuner::check_sms_argument(vm["sms"].as<int>());
  const DeviceInfo dev = require_device(env, vm["device"].as<int>());
  o.problem.check_fits(&dev);
  use_sm_slice(env, vm, dev);  // the cuBLAS baseline GEMMs stay on the whole GPU
  tuner::clear_interrupt();
  tuner::install_sigint_handler();
  auto r = tuner::run_bench(env.reg, dev, o, &env.err);
  env.out << (vm.count("json") ? tuner::bench_json(r) : tuner::format_bench_table(r));
  for (const auto& row : r.rows)
    if (row.status == "error") return 1;
  return 0;
}

}  // namespace detfuse::cli
