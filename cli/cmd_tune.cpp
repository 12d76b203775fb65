// detfuse tune: the autotuner over one shape or a preset of shapes.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/common.h"
#include "db/store.h"
#include "kernels/common/cuda_check.h"
#include "tuner/gpu_measurer.h"
#include "tuner/footprint.h"
#include "tuner/interrupt.h"
#include "tuner/presets.h"
#include "tuner/sm_slice.h"
#include "tuner/supervisor.h"
#include "tuner/text.h"
#include "tuner/tuner.h"

namespace detfuse::cli {

tuner::WorkerSetup gpu_worker_setup(const std::string& gpu, int sms) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n <= 0) {
    // After fork, CUDA works in the child only if the parent never initialised it.
    const bool init = why.find("InitializationError") != std::string::npos;
    throw Error("no CUDA device: " + (why.empty() ? std::string("none found") : why) +
                (init ? " (in the measuring worker: did the parent initialise CUDA before forking? see tuner/supervisor.h)" : ""));
  }
  int ordinal = -1;
  if (!gpu.empty() && gpu.find_first_not_of("0123456789") == std::string::npos && gpu.size() < 6) {
    ordinal = std::stoi(gpu);
    if (ordinal >= n)
      throw invalid_argument("--gpu " + gpu + ": only " + std::to_string(n) + " CUDA device(s) visible");
  } else {
    std::string found;
    for (const DeviceInfo& d : query_all_devices())
      if (!gpu.empty() && d.uuid.compare(0, gpu.size(), gpu) == 0) {
        if (ordinal >= 0) throw invalid_argument("--gpu " + gpu + ": matches several GPUs (" + found + ", " + d.uuid + ")");
        ordinal = d.ordinal;
        found = d.uuid;
      }
    if (ordinal < 0) throw invalid_argument("--gpu '" + gpu + "': no visible GPU has that ordinal or UUID prefix (see detfuse devices)");
  }
  DETFUSE_CUDA_CHECK(cudaSetDevice(ordinal));
  tuner::WorkerSetup s;
  s.device = query_device(ordinal);
  s.sms = s.device.sm_count;
  if (sms > 0) {
    auto slice = std::make_shared<tuner::SmSlice>(ordinal, sms);  // invalid_argument past the device's SMs
    s.sms = slice->sm_count();
    if (!slice->plan().note.empty()) std::fprintf(stderr, "%s\n", slice->plan().note.c_str());
    tuner::set_measure_slice(std::move(slice));
  }
  s.measurer = tuner::make_gpu_measurer(s.device);
  return s;
}

StartedMeasurer start_measurer(const Env& env, const tuner::WorkerFactory& factory, bool in_process) {
  StartedMeasurer m;
  if (in_process) {
    tuner::WorkerSetup setup = factory();
    m.dev = setup.device;
    m.granted = setup.sms;
    m.in_process = std::move(setup.measurer);
  } else {
    m.supervised = std::make_unique<tuner::SupervisedMeasurer>(env.reg, factory);
    m.dev = m.supervised->start();
    m.granted = m.supervised->sms();
  }
  return m;
}

int cmd_tune(Env& env, const std::vector<std::string>& args) {
  std::string presets;
  for (const auto& n : tuner::all_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  po::options_description d("tune options");
  add_problem_options(d);
  d.add_options()
      ("preset", po::value<std::string>(), ("a named set of shapes instead of --shape (" + presets + ")").c_str())
      ("db", po::value<std::string>()->default_value(db::kDefaultPath), "the database (created if missing)")
      ("budget", po::value<std::string>(), "stop cleanly after this long with the best so far (e.g. 10m, 90s, 1h)")
      ("repeats", po::value<int>()->default_value(5), "K: repeats digesting every output (determinism check)")
      ("seed", po::value<int64_t>()->default_value(0), "seed of the random inputs")
      ("resume", "continue the latest unfinished run for these problems (never one whose process is alive)")
      ("retry-crashed", "with --resume: measure again the variants that crashed their worker")
      ("force", "with --resume: measure again the variants this build already measured on this GPU (without it, "
       "a --resume with no unfinished run skips them, so a repeated `make tune` ends at once)")
      ("allow-nondeterministic", "let nondeterministic (atomic) variants win")
      ("levels", "also check the sm_count level (2 more runs per variant, on 16 and 66 SMs) and the portable "
       "level (CPU emulation of the fp32 fma variants); config is always checked")
      ("variant", po::value<std::vector<std::string>>()->composing(), "only these variants (repeatable)")
      ("engine", po::value<std::vector<std::string>>()->composing(),
       "only variants of these engines: fma, mma, wgmma, wgmmalt, cublaslt (repeatable; with --variant, both must hold)")
      ("time-cap", po::value<std::string>()->default_value("20s"),
       "soft cap per variant: its K repeats and timing repetitions stop when it is spent (past 2 repeats and 5 "
       "repetitions); the budget lowers it")
      ("kill-after", po::value<std::string>(),
       "hard cap per variant: a variant still running after this long is killed with its worker process and "
       "recorded crashed (timeout) (default: --time-cap + 2m)")
      ("in-process", "measure in this process instead of a supervised worker (for debuggers and sanitizers; a "
       "variant that loses the CUDA context then ends the run)")
      ("gpu", po::value<std::string>(), "the GPU to tune: ordinal, UUID or UUID prefix (CUDA_VISIBLE_DEVICES applies)")
      ("device", po::value<int>(), "CUDA device ordinal (same as --gpu N)")
      ("sms", po::value<int>(),
       "measure on a slice of K SMs of the GPU (CUDA green context; rounded up to the device's SM granularity, "
       "e.g. multiples of 8 on Hopper; the count granted is recorded with the run)");
  po::variables_map vm;
  if (!parse(args, d, nullptr, vm,
             "usage: detfuse tune --kernel flce (--shape N,D,V | --preset llm-heads) [--dtype bf16] [options]\n"
             "       detfuse tune --kernel attention (--shape B,H,Hkv,Sq,Sk,d | --preset llm-attention) [--causal]\n"
             "                    [--softcap C] [--window W] [--dtype bf16] [options]\n\n"
             "Measures every registered variant of the family and dtype on this GPU: can_run refusals,\n"
             "correctness against the float64 reference, K repeats with digests of every output (flce: loss,\n"
             "lse, dX, dW; attention: O, lse, dQ, dK, dV), timing of forward+backward (L2 flushed, median of\n"
             ">= 5 repetitions, every sample stored). Results go to --db; the ranked table is printed at\n"
             "the end. Ctrl-C stops cleanly (run marked interrupted, exit 130); --resume continues it.\n"
             "Progress and ETA go to stderr. Per problem, the fastest variant at each determinism level\n"
             "(run_to_run, sm_count, config, portable) and its cost against the fastest overall is printed;\n"
             "sm_count and portable are only checked with --levels.",
             env.out))
    return 0;
  const bool has_shape = vm.count("shape") > 0, has_preset = vm.count("preset") > 0;
  if (has_shape == has_preset)
    throw UsageError(kernel_family(vm) == Family::attention ? "give exactly one of --shape B,H,Hkv,Sq,Sk,d or --preset NAME"
                                                            : "give exactly one of --shape N,D,V or --preset NAME");
  const tuner::Problem base = problem_from(vm, false);
  tuner::TuneOptions o;
  if (has_preset) {
    o.problems = tuner::expand_preset_for(vm["preset"].as<std::string>(), base);
  } else {
    o.problems = {problem_from(vm, true)};
  }
  for (const auto& p : o.problems) {
    p.validate();
    p.check_fits(nullptr);  // host memory, before any worker or GPU (the device is checked by the tuner)
  }
  o.seed = vm["seed"].as<int64_t>();
  o.repeats = vm["repeats"].as<int>();
  if (o.repeats < 2) throw UsageError("--repeats: must be >= 2 to check determinism");
  if (vm.count("budget")) {
    o.budget_s = tuner::parse_duration(vm["budget"].as<std::string>());
    if (!(o.budget_s > 0)) throw UsageError("--budget: must be > 0 (leave it out for no budget)");
  }
  o.variant_time_cap_s = tuner::parse_duration(vm["time-cap"].as<std::string>());
  if (!(o.variant_time_cap_s > 0)) throw UsageError("--time-cap: must be > 0 (e.g. 20s)");
  o.resume = vm.count("resume") > 0;
  o.retry_crashed = vm.count("retry-crashed") > 0;
  o.force = vm.count("force") > 0;
  if (o.retry_crashed && !o.resume)
    throw UsageError("--retry-crashed: only with --resume (a new run measures every variant anyway)");
  if (o.force && !o.resume) throw UsageError("--force: only with --resume (a new run measures every variant anyway)");
  o.allow_nondeterministic = vm.count("allow-nondeterministic") > 0;
  if (vm.count("variant")) o.variants = vm["variant"].as<std::vector<std::string>>();
  if (vm.count("engine")) {
    std::set<std::string> engines;
    for (const auto& e : vm["engine"].as<std::vector<std::string>>()) {
      const auto& known = known_engines();
      if (std::find(known.begin(), known.end(), e) == known.end())
        throw UsageError("--engine: unknown engine '" + e + "' (expected " + known_engines_text() + ")");
      engines.insert(e);
    }
    const std::set<std::string> named(o.variants.begin(), o.variants.end());
    std::vector<std::string> keep;
    for (const auto& v : base.variants(env.reg))
      if (v.desc().dtype == base.dtype() && engines.count(v.desc().engine) &&
          (named.empty() ? !v.desc().study_only : named.count(v.name()) > 0))
        keep.push_back(v.name());
    if (keep.empty())
      throw UsageError("--engine: no registered " + std::string(base.label()) +
                       " variant matches (see `detfuse list --engine E`)");
    o.variants = keep;
  }
  o.command_line = env.command_line;
  for (const auto& p : o.problems) tuner::plan_variants(env.reg, p, o.variants);  // bad names: exit 2 now
  bool any = false;
  for (const auto& p : o.problems) any = any || !tuner::plan_variants(env.reg, p, o.variants).empty();
  if (!any)
    throw Error("no " + std::string(to_string(base.dtype())) + " " + base.label() +
                " variant is registered in this build (see `detfuse list`)");

  o.kill_after_s = vm.count("kill-after") ? tuner::parse_duration(vm["kill-after"].as<std::string>())
                                          : o.variant_time_cap_s + 120;
  if (!(o.kill_after_s > 0)) throw UsageError("--kill-after: must be > 0 (e.g. 5m)");
  if (vm.count("gpu") && vm.count("device")) throw UsageError("--gpu and --device exclude each other");
  const std::string gpu = vm.count("gpu") ? vm["gpu"].as<std::string>()
                                          : std::to_string(vm.count("device") ? vm["device"].as<int>() : 0);
  const int sms = vm.count("sms") ? vm["sms"].as<int>() : 0;
  if (vm.count("sms")) tuner::check_sms_argument(sms);  // K < 1: exit 2 before any GPU work
  o.levels = vm.count("levels") > 0;
  if (o.levels && vm.count("sms"))
    throw UsageError("--levels compares slices with the whole GPU: it cannot be combined with --sms");

  // Nothing here touches CUDA: the worker (forked below) queries the device and
  // measures, so a variant that takes its process down is recorded and the
  // run goes on (tuner/supervisor.h).
  if (env.ctx.device_count) {
    std::string why;
    if (env.ctx.device_count(&why) <= 0) throw NoDevice("no CUDA device: " + (why.empty() ? "none found" : why));
  }
  tuner::WorkerFactory factory = env.ctx.worker_setup
                                     ? tuner::WorkerFactory([&env, gpu] { return env.ctx.worker_setup(gpu); })
                                     : tuner::WorkerFactory([gpu, sms] { return gpu_worker_setup(gpu, sms); });
  // An existing store is opened first: a bad or foreign --db file is
  // reported before any worker or GPU starts. (The forked worker inherits its
  // descriptor and never uses it; it leaves only through _exit, so it never
  // closes or checkpoints the connection.) A missing one is created only once
  // the worker has found the GPU: a run that fails before measuring (no GPU,
  // a bad --gpu) leaves no empty store behind.
  const std::filesystem::path db_path = vm["db"].as<std::string>();
  std::unique_ptr<db::Store> opened;
  std::error_code exists_ec;
  if (std::filesystem::exists(db_path, exists_ec)) opened = std::make_unique<db::Store>(db_path);
  tuner::clear_interrupt();
  tuner::install_sigint_handler();
  StartedMeasurer started = start_measurer(env, factory, vm.count("in-process") > 0);
  const DeviceInfo& dev = started.dev;
  const int granted = started.granted;
  if (granted > 0) o.sms = granted;
  if (sms > 0) env.err << "measuring on " << granted << " of " << dev.sm_count << " SMs (--sms " << sms << ")\n";
  tuner::Measurer& measurer = started.get();
  if (!opened) opened = std::make_unique<db::Store>(db_path);
  db::Store& store = *opened;
  tuner::Tuner t(store, env.reg, dev, measurer, &env.err);
  env.err << "tuning " << o.problems.size() << " problem(s) on " << dev.name << " (" << dev.uuid << ") into "
          << store.path().string() << (o.budget_s > 0 ? ", budget " + tuner::format_duration(o.budget_s) : "") << "\n";
  tuner::TuneReport r = t.run(o);

  for (const auto& pr : r.problems) {
    env.out << "\n" << pr.problem.key() << "\n";
    if (pr.ranked.empty()) {
      env.out << "  (no results in this run)\n";
      continue;
    }
    env.out << tuner::format_ranked_table(pr.ranked);
    if (pr.best) {
      char b[96];
      std::snprintf(b, sizeof b, "%.3f ms", *pr.best->median_ms);
      env.out << "best: " << pr.best->variant << " " << b << " (" << pr.best->level << ")\n";
    } else {
      env.out << "best: none qualifies (correct and run_to_run deterministic"
              << (o.allow_nondeterministic ? "" : "; --allow-nondeterministic relaxes the latter") << ")\n";
    }
    env.out << "determinism levels (the fastest variant that has each; cost against the fastest correct one"
            << (o.levels ? "" : "; sm_count and portable need --levels") << "):\n"
            << tuner::format_level_choices(pr.levels);
  }
  env.out << "\nrun " << r.run_uid << ": " << r.status << "; " << r.measured << " measured, " << r.cannot_run
          << " cannot run, " << r.skipped << " already done"
          << (r.crashed_marked ? ", " + std::to_string(r.crashed_marked) + " recorded as crashed" : "")
          << (r.retried ? ", " + std::to_string(r.retried) + " crashed measured again" : "");
  if (r.remaining > 0)
    env.out << ", " << r.remaining << " left" << (r.status == db::kRunBudget ? " (budget spent)" : "")
            << " (detfuse tune ... --resume continues)";
  if (!r.cuts.empty()) {
    env.out << "; cut by the time caps: ";
    for (size_t i = 0; i < r.cuts.size(); ++i) env.out << (i ? "; " : "") << r.cuts[i];
  }
  env.out << "\n";
  if (r.status == db::kRunInterrupted) return 130;
  if (r.status == db::kRunFailed) return 1;
  return 0;
}

}  // namespace detfuse::cli
