// detfuse study contention: the contention study, thin over tuner/study
// (planning, and the runner over the tuner).
#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/common.h"
#include "db/store.h"
#include "tuner/study/contention_study.h"
#include "kernels/common/error.h"
#include "tuner/interrupt.h"
#include "tuner/sm_slice.h"
#include "tuner/supervisor.h"
#include "tuner/text.h"

namespace detfuse::cli {

namespace {
std::string sms_text(int k) { return k > 0 ? std::to_string(k) + " SMs" : "all SMs"; }

// "16,66,all" (or repeated --sms) -> {16, 66, 0}; exit 2 on anything else.
std::vector<int> parse_sms_list(const std::vector<std::string>& args) {
  std::vector<int> out;
  for (const auto& a : args) {
    std::stringstream ss(a);
    std::string tok;
    while (std::getline(ss, tok, ',')) {
      if (tok == "all" || tok == "0") {
        out.push_back(0);
        continue;
      }
      size_t used = 0;
      int k = 0;
      try {
        k = std::stoi(tok, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (tok.empty() || used != tok.size())
        throw UsageError("--sms: '" + tok + "' is not an SM count (a list such as 16,66,all)");
      tuner::check_sms_argument(k);  // K < 1: exit 2
      out.push_back(k);
    }
  }
  if (out.empty()) throw UsageError("--sms: give at least one SM count (e.g. 16,all)");
  return out;
}
}  // namespace

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
      ("sms", po::value<std::vector<std::string>>()->composing(),
       "the SM-count axis: SM counts to measure on, e.g. 16,66,all (green-context slices; all: the whole GPU; "
       "default quick 16,all, full 8,16,33,66,all)")
      ("seed", po::value<int64_t>()->default_value(0), "seed of the random inputs")
      ("in-process", "measure in this process instead of a supervised worker")
      ("gpu", po::value<std::string>()->default_value("0"), "the GPU: ordinal, UUID or UUID prefix");
  po::positional_options_description pos;
  pos.add("kind", 1);
  po::variables_map vm;
  if (!parse(args, d, &pos, vm,
             "usage: detfuse study contention --kernel flce|attention [--quick] [--db PATH] [--budget T] [--resume] "
             "[--engine E...] [--sms 16,66,all] [--plan]\n\n"
             "The contention study: every strategy (atomic, partials, owning, ordered, ...) of every engine, a\n"
             "few block shapes and the strategies' knobs, over the contention level of the family:\n"
             "  flce:      adders per dW element: the row splits sk of atomic and partials (1, 2, 4, 16, 64 and\n"
             "             sk0, every row block of the chunk) at every problem; N from 512 to 64k at fixed D, V,\n"
             "             and V and D at a fixed N; knobs: chunk budget mb, row splits sk, slab rows vs;\n"
             "  attention: Sq = Sk from 512 to 32k at about 16k tokens (B*S), H=32, d=128 (Sk / bc key blocks\n"
             "             add into each dQ tile), causal or not, GQA group size H/Hkv (Hkv 32, 8, 4, 1 at\n"
             "             S=4096); forward+backward (forward-only variants are left out); knob: partials'\n"
             "             workspace bound mb.\n"
             "The fma engine (CUDA-core fp32) is planned only when no other engine has variants, or with\n"
             "--engine fma. Measured by the tuner (correctness against float64, K repeats with digests and\n"
             "run-to-run spread, timing, peak memory) into --db, every run tagged with the study's name\n"
             "(contention-<kernel>[-quick][-<engine>...]). The SM-count axis (--sms): one run per SM count,\n"
             "on a green-context slice of the GPU (at the fixed point of the contention axis), the whole GPU\n"
             "at every problem; --budget spans them, --resume continues the unfinished one.\n"
             "Plots and report: experiments/contention/plot.py.",
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
  if (vm.count("sms")) co.sms = parse_sms_list(vm["sms"].as<std::vector<std::string>>());
  std::vector<std::string> names;
  auto take = [&](const VariantDesc& d) {
    names.push_back(d.name);
    if (d.study_only) co.study_variants.push_back(d.name);
  };
  if (co.family == Family::attention)
    for (const auto& v : env.reg.attention()) take(v.desc);
  else
    for (const auto& v : env.reg.flce()) take(v.desc);
  study::StudyRunOptions o;
  o.plan = study::plan_contention(names, co);
  if (vm.count("plan")) {
    env.out << "study " << o.plan.name << ": " << o.plan.problems.size() << " problem(s) x " << o.plan.variants.size()
            << " variant(s), K=" << o.plan.repeats << ", time cap " << tuner::format_duration(o.plan.time_cap_s)
            << " per variant\naxes " << o.plan.axes_json << "\n";
    for (const auto& p : o.plan.problems) env.out << "problem " << p.shape() << "\n";
    for (const auto& v : o.plan.variants) env.out << "variant " << v << "\n";
    // The two contention axes, as the report reads them.
    std::set<std::string> levels;
    for (const auto& v : o.plan.variants) {
      const auto pv = study::parse_variant_name(v);
      if (pv && (pv->strategy == "atomic" || pv->strategy == "partials") && pv->param("sk", -1) >= 0)
        levels.insert(pv->strategy + " " + pv->engine);
    }
    if (co.family == Family::flce) {
      env.out << "adders axis: row splits sk per chunk (adders per dW element; sk0: every row block) of";
      for (const auto& l : levels) env.out << " [" << l << "]";
      env.out << " at every problem; the fixed point:";
      for (const auto& p : o.plan.sm_problems) env.out << " " << p.shape();
      env.out << "\n";
    } else {
      env.out << "adders axis: Sk / bc key blocks per dQ tile, along the Sq = Sk sweep\n";
    }
    env.out << "sm-count axis:";
    for (int k : o.plan.sms) env.out << " " << sms_text(k);
    env.out << " (one run each; sliced levels at";
    for (const auto& p : o.plan.sm_problems) env.out << " " << p.shape();
    env.out << ", the whole GPU at every problem)\n";
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
  db::Store store(vm["db"].as<std::string>());
  tuner::clear_interrupt();
  tuner::install_sigint_handler();
  const double budget = o.budget_s;
  const auto t0 = std::chrono::steady_clock::now();
  int code = 0;
  // One tuning run per level of the SM-count axis, each in its own worker
  // (the green context is the worker's); the budget spans them all.
  for (int level : o.plan.sms) {
    if (level > 0 && o.plan.sm_problems.empty()) continue;
    if (budget > 0) {
      const double left = budget - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (left <= 0) {
        env.out << "study " << o.plan.name << ": budget spent before the level on " << sms_text(level)
                << " (detfuse study contention ... --resume continues)\n";
        break;
      }
      o.budget_s = left;
    }
    tuner::WorkerFactory factory =
        env.ctx.worker_setup ? tuner::WorkerFactory([&env, gpu] { return env.ctx.worker_setup(gpu); })
                             : tuner::WorkerFactory([gpu, level] { return gpu_worker_setup(gpu, level); });
    StartedMeasurer started = start_measurer(env, factory, vm.count("in-process") > 0);
    const DeviceInfo& dev = started.dev;
    const int granted = started.granted;
    o.sms = level;
    o.run_sms = granted > 0 ? std::optional<int64_t>(granted) : std::nullopt;
    tuner::Measurer& measurer = started.get();
    const size_t np = level > 0 ? o.plan.sm_problems.size() : o.plan.problems.size();
    env.err << "study " << o.plan.name << ": " << np << " problem(s) x " << o.plan.variants.size() << " variant(s) on "
            << dev.name << (granted > 0 ? ", " + std::to_string(granted) + " of " + std::to_string(dev.sm_count) + " SMs"
                                        : std::string())
            << " into " << store.path().string()
            << (o.budget_s > 0 ? ", budget " + tuner::format_duration(o.budget_s) : "") << "\n";
    const study::StudyReport r = study::run_contention_study(store, env.reg, dev, measurer, o, &env.err);
    if (r.already_complete) {
      env.out << r.note << "\n";
      continue;
    }
    const tuner::TuneReport& t = r.tune;
    env.out << "study " << o.plan.name << " on " << (granted > 0 ? std::to_string(granted) + " SMs" : sms_text(level))
            << ", run " << t.run_uid << ": " << t.status << "; " << t.measured << " measured, " << t.cannot_run
            << " cannot run, " << t.skipped << " already done";
    if (t.remaining > 0) env.out << ", " << t.remaining << " left (detfuse study contention ... --resume continues)";
    env.out << "\n";
    if (t.status == db::kRunInterrupted) return 130;
    if (t.status == db::kRunFailed) code = 1;
    if (t.status == db::kRunBudget) break;
  }
  env.out << "plots and report: python3 experiments/contention/plot.py --db " << store.path().string() << "\n";
  return code;
}

}  // namespace detfuse::cli
