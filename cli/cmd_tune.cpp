// detfuse tune: the autotuner over one shape or a preset of shapes.
#include <cstdio>

#include "cli/common.h"
#include "db/store.h"
#include "kernels/common/error.h"
#include "tuner/flce_measurer.h"
#include "tuner/interrupt.h"
#include "tuner/presets.h"
#include "tuner/text.h"
#include "tuner/tuner.h"

namespace detfuse::cli {

int cmd_tune(Env& env, const std::vector<std::string>& args) {
  std::string presets;
  for (const auto& n : tuner::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  po::options_description d("tune options");
  add_problem_options(d);
  d.add_options()
      ("preset", po::value<std::string>(), ("a named set of shapes instead of --shape (" + presets + ")").c_str())
      ("db", po::value<std::string>()->default_value(db::kDefaultPath), "the database (created if missing)")
      ("budget", po::value<std::string>(), "stop cleanly after this long with the best so far (e.g. 10m, 90s, 1h)")
      ("repeats", po::value<int>()->default_value(5), "K: repeats digesting every output (determinism check)")
      ("seed", po::value<int64_t>()->default_value(0), "seed of the random inputs")
      ("resume", "continue the latest unfinished run for these problems")
      ("allow-nondeterministic", "let nondeterministic (atomic) variants win")
      ("variant", po::value<std::vector<std::string>>()->composing(), "only these variants (repeatable)")
      ("time-cap", po::value<std::string>()->default_value("20s"), "timing cap per variant")
      ("device", po::value<int>()->default_value(0), "CUDA device ordinal");
  po::variables_map vm;
  if (!parse(args, d, nullptr, vm,
             "usage: detfuse tune --kernel flce (--shape N,D,V | --preset llm-heads) [--dtype bf16] [options]\n\n"
             "Measures every registered variant of the dtype on this GPU: can_run refusals, correctness\n"
             "against the float64 reference, K repeats with digests of every output, timing (L2 flushed,\n"
             "median of >= 5 repetitions, every sample stored). Results go to --db; the ranked table is\n"
             "printed at the end. Ctrl-C stops cleanly (run marked interrupted, exit 130); --resume\n"
             "continues it. Progress and ETA go to stderr.",
             env.out))
    return 0;
  require_flce(vm);
  const bool has_shape = vm.count("shape") > 0, has_preset = vm.count("preset") > 0;
  if (has_shape == has_preset) throw UsageError("give exactly one of --shape N,D,V or --preset NAME");
  FlceProblem base = problem_from(vm, false);
  tuner::TuneOptions o;
  if (has_preset) {
    o.problems = tuner::expand_preset(vm["preset"].as<std::string>(), base);
  } else {
    o.problems = {problem_from(vm, true)};
  }
  for (const auto& p : o.problems) p.validate();
  o.seed = vm["seed"].as<int64_t>();
  o.repeats = vm["repeats"].as<int>();
  if (o.repeats < 2) throw UsageError("--repeats: must be >= 2 to check determinism");
  if (vm.count("budget")) o.budget_s = tuner::parse_duration(vm["budget"].as<std::string>());
  o.variant_time_cap_s = tuner::parse_duration(vm["time-cap"].as<std::string>());
  o.resume = vm.count("resume") > 0;
  o.allow_nondeterministic = vm.count("allow-nondeterministic") > 0;
  if (vm.count("variant")) o.variants = vm["variant"].as<std::vector<std::string>>();
  o.command_line = env.command_line;
  for (const auto& p : o.problems) tuner::plan_variants(env.reg, p, o.variants);  // bad names: exit 2 now
  bool any = false;
  for (const auto& p : o.problems) any = any || !tuner::plan_variants(env.reg, p, o.variants).empty();
  if (!any) throw Error("no " + std::string(to_string(base.dtype)) + " FLCE variant is registered in this build (see `detfuse list`)");

  const DeviceInfo dev = require_device(env, vm["device"].as<int>());
  db::Store store(vm["db"].as<std::string>());
  tuner::FlceGpuMeasurer measurer(dev);
  tuner::Tuner t(store, env.reg, dev, measurer, &env.err);
  tuner::clear_interrupt();
  tuner::install_sigint_handler();
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
  }
  env.out << "\nrun " << r.run_uid << ": " << r.status << "; " << r.measured << " measured, " << r.cannot_run
          << " cannot run, " << r.skipped << " already done" << (r.crashed_marked ? ", " + std::to_string(r.crashed_marked) + " recorded as crashed" : "");
  if (r.remaining > 0) env.out << ", " << r.remaining << " left (detfuse tune ... --resume continues)";
  env.out << "\n";
  if (r.status == db::kRunInterrupted) return 130;
  if (r.status == db::kRunFailed) return 1;
  return 0;
}

}  // namespace detfuse::cli
