// detfuse study contention: the contention study (issue 10), thin over
// experiments/study (planning, and the runner over the tuner).
#include <algorithm>
#include <string>
#include <vector>

#include "cli/common.h"
#include "db/store.h"
#include "experiments/study/contention_study.h"
#include "kernels/common/error.h"
#include "tuner/interrupt.h"
#include "tuner/supervisor.h"
#include "tuner/text.h"

namespace detfuse::cli {

int cmd_study(Env& env, const std::vector<std::string>& args) {
  po::options_description d("study options");
  d.add_options()
      ("kind", po::value<std::string>(), "the study: contention")
      ("kernel", po::value<std::string>()->default_value("flce"), "kernel family: flce or attention")
      ("quick", "a few points, one or two variants per (engine, strategy): minutes")
      ("plan", "print the problems and variants the study would measure, then exit (no GPU)")
      ("db", po::value<std::string>()->default_value(db::kDefaultPath), "the database (created if missing)")
      ("budget", po::value<std::string>(), "stop cleanly after this long (e.g. 30m); --resume continues")
      ("resume", "continue this study's unfinished run (or do nothing when it is complete)")
      ("engine", po::value<std::vector<std::string>>()->composing(), "only these engines (repeatable)")
      ("seed", po::value<int64_t>()->default_value(0), "seed of the random inputs")
      ("in-process", "measure in this process instead of a supervised worker")
      ("gpu", po::value<std::string>()->default_value("0"), "the GPU: ordinal, UUID or UUID prefix");
  po::positional_options_description pos;
  pos.add("kind", 1);
  po::variables_map vm;
  if (!parse(args, d, &pos, vm,
             "usage: detfuse study contention --kernel flce|attention [--quick] [--db PATH] [--budget T] [--resume] "
             "[--engine E...] [--plan]\n\n"
             "The contention study: every strategy (atomic, partials, owning, ordered, ...) of every engine, a\n"
             "few block shapes and the strategies' knobs, over the contention level of the family:\n"
             "  flce:      N from 512 to 64k at fixed D, V (N / bm row blocks add into each dW tile), and V\n"
             "             and D at a fixed N; knobs: chunk budget mb, row splits sk, slab rows vs;\n"
             "  attention: Sq = Sk from 512 to 32k at about 16k tokens (B*S), H=32, d=128 (Sk / bc key blocks\n"
             "             add into each dQ tile), causal or not, GQA group size H/Hkv (Hkv 32, 8, 4, 1 at\n"
             "             S=4096); forward+backward (forward-only variants are left out); knob: partials'\n"
             "             workspace bound mb.\n"
             "The fma engine (CUDA-core fp32) is planned only when no other engine has variants, or with\n"
             "--engine fma. Measured by the tuner (correctness against float64, K repeats with digests and\n"
             "run-to-run spread, timing, peak memory) into --db, every run tagged with the study's name\n"
             "(contention-<kernel>[-quick][-<engine>...]). Plots and report: experiments/contention/plot.py.",
             env.out))
    return 0;
  if (!vm.count("kind")) throw UsageError("study: which study? (contention)");
  if (vm["kind"].as<std::string>() != "contention")
    throw UsageError("study: unknown study '" + vm["kind"].as<std::string>() + "' (expected contention)");
  study::ContentionOptions co;
  co.family = kernel_family(vm);  // invalid_argument (exit 2) on an unknown family
  co.quick = vm.count("quick") > 0;
  if (vm.count("engine")) {
    for (const auto& e : vm["engine"].as<std::vector<std::string>>()) {
      const auto& known = known_engines();
      if (std::find(known.begin(), known.end(), e) == known.end())
        throw UsageError("--engine: unknown engine '" + e + "' (expected " + known_engines_text() + ")");
      co.engines.push_back(e);
    }
  }
  std::vector<std::string> names;
  if (co.family == Family::attention)
    for (const auto& v : env.reg.attention()) names.push_back(v.desc.name);
  else
    for (const auto& v : env.reg.flce()) names.push_back(v.desc.name);
  study::StudyRunOptions o;
  o.plan = study::plan_contention(names, co);
  if (vm.count("plan")) {
    env.out << "study " << o.plan.name << ": " << o.plan.problems.size() << " problem(s) x " << o.plan.variants.size()
            << " variant(s), K=" << o.plan.repeats << ", time cap " << tuner::format_duration(o.plan.time_cap_s)
            << " per variant\naxes " << o.plan.axes_json << "\n";
    for (const auto& p : o.plan.problems) env.out << "problem " << p.shape() << "\n";
    for (const auto& v : o.plan.variants) env.out << "variant " << v << "\n";
    return 0;
  }
  if (vm.count("budget")) {
    o.budget_s = tuner::parse_duration(vm["budget"].as<std::string>());
    if (!(o.budget_s > 0)) throw UsageError("--budget: must be > 0 (leave it out for no budget)");
  }
  o.resume = vm.count("resume") > 0;
  o.seed = vm["seed"].as<int64_t>();
  o.kill_after_s = o.plan.time_cap_s + 120;
  o.command_line = env.command_line;

  if (env.ctx.device_count) {
    std::string why;
    if (env.ctx.device_count(&why) <= 0) throw NoDevice("no CUDA device: " + (why.empty() ? "none found" : why));
  }
  const std::string gpu = vm["gpu"].as<std::string>();
  tuner::WorkerFactory factory = env.ctx.worker_setup
                                     ? tuner::WorkerFactory([&env, gpu] { return env.ctx.worker_setup(gpu); })
                                     : tuner::WorkerFactory([gpu] { return gpu_worker_setup(gpu); });
  db::Store store(vm["db"].as<std::string>());
  tuner::clear_interrupt();
  tuner::install_sigint_handler();
  std::unique_ptr<tuner::Measurer> in_process;
  std::unique_ptr<tuner::SupervisedMeasurer> supervised;
  DeviceInfo dev;
  if (vm.count("in-process")) {
    tuner::WorkerSetup setup = factory();
    dev = setup.device;
    in_process = std::move(setup.measurer);
  } else {
    supervised = std::make_unique<tuner::SupervisedMeasurer>(env.reg, factory);
    dev = supervised->start();
  }
  tuner::Measurer& measurer = in_process ? *in_process : static_cast<tuner::Measurer&>(*supervised);
  env.err << "study " << o.plan.name << ": " << o.plan.problems.size() << " problem(s) x " << o.plan.variants.size()
          << " variant(s) on " << dev.name << " into " << store.path().string()
          << (o.budget_s > 0 ? ", budget " + tuner::format_duration(o.budget_s) : "") << "\n";
  const study::StudyReport r = study::run_contention_study(store, env.reg, dev, measurer, o, &env.err);
  if (r.already_complete) {
    env.out << r.note << "\n";
    return 0;
  }
  const tuner::TuneReport& t = r.tune;
  env.out << "study " << o.plan.name << ", run " << t.run_uid << ": " << t.status << "; " << t.measured
          << " measured, " << t.cannot_run << " cannot run, " << t.skipped << " already done";
  if (t.remaining > 0) env.out << ", " << t.remaining << " left (detfuse study contention ... --resume continues)";
  env.out << "\nplots and report: python3 experiments/contention/plot.py --db " << store.path().string() << "\n";
  if (t.status == db::kRunInterrupted) return 130;
  if (t.status == db::kRunFailed) return 1;
  return 0;
}

}  // namespace detfuse::cli
