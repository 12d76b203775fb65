#include "cli/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "cli/common.h"
#include "db/store.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/host_bf16.h"
#include "tuner/best.h"
#include "tuner/attention_gpu.h"
#include "tuner/footprint.h"
#include "tuner/json.h"
#include "tuner/npy.h"
#include "tuner/records.h"
#include "tuner/text.h"

namespace detfuse::cli {

namespace {

const char* kTopUsage =
    "usage: detfuse <command> [options]\n"
    "\n"
    "commands:\n"
    "  devices   the CUDA devices and the facts results are keyed on\n"
    "  list      registered kernel variants (no GPU needed)\n"
    "  tune      measure every variant for this GPU and shapes, store the results\n"
    "            (--kernel flce | attention)\n"
    "  best      the tuned best variant for a shape (nearest tuned shape, else the heuristic)\n"
    "  verify    run a variant K times and compare digests with the stored ones\n"
    "  bench     time variants (bench flce: against three cuBLAS GEMMs; bench attention: forward\n"
    "            and forward+backward)\n"
    "  db        export --csv DIR | merge OTHER.db\n"
    "  study     contention --kernel flce | attention: the contention study's sweep, tagged in\n"
    "            the store\n"
    "\n"
    "`detfuse <command> --help` describes each command.\n";

}  // namespace

bool parse(const std::vector<std::string>& args, const po::options_description& desc,
           const po::positional_options_description* pos, po::variables_map& vm, const std::string& usage,
           std::ostream& out) {
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    out << usage << "\n" << desc;
    return false;
  }
  po::command_line_parser p(args);
  p.options(desc);
  if (pos) p.positional(*pos);
  else p.positional(po::positional_options_description{});
  po::store(p.run(), vm);
  po::notify(vm);
  return true;
}

void add_problem_options(po::options_description& d, bool) {
  d.add_options()
      ("kernel", po::value<std::string>()->default_value("flce"), "kernel family: flce or attention")
      ("shape", po::value<std::string>(),
       "flce: N,D,V: rows, hidden size, vocabulary (e.g. 16384,4096,128256); attention: B,H,Hkv,Sq,Sk,d (e.g. "
       "4,32,8,4096,4096,128)")
      ("dtype", po::value<std::string>()->default_value("bf16"), "input dtype: bf16 or fp32")
      ("reduction", po::value<std::string>()->default_value("mean"), "flce: mean, sum or none")
      ("ignore-index", po::value<int64_t>()->default_value(-100), "flce: target value of ignored rows")
      ("label-smoothing", po::value<double>()->default_value(0.0), "flce: label smoothing in [0, 1)")
      ("z-loss", po::value<double>()->default_value(0.0), "flce: z-loss weight (lse_square_scale)")
      ("softcap", po::value<double>()->default_value(0.0),
       "flce: logit softcap; attention: score softcap c, s = c*tanh(s/c) (Gemma-2: 50) (0: off)")
      ("grad-output", po::value<double>()->default_value(1.0), "flce: upstream gradient scale")
      ("grad-dtype", po::value<std::string>()->default_value("fp32"), "flce: dX/dW dtype: fp32 or the input dtype")
      ("causal", "attention: causal mask (bottom-right aligned when Sq != Sk)")
      ("scale", po::value<double>()->default_value(0.0), "attention: softmax scale (0: 1/sqrt(d))")
      ("window", po::value<int64_t>()->default_value(0),
       "attention: sliding window, each query sees at most this many keys ending at its diagonal (0: off)");
}

Family kernel_family(const po::variables_map& vm, std::optional<Family> family) {
  if (family) return *family;
  return parse_family(vm["kernel"].as<std::string>());  // throws invalid_argument on an unknown family
}

namespace {

// (--softcap is both families'.)
const char* kFlceOptions[] = {"reduction", "ignore-index", "label-smoothing", "z-loss", "grad-output", "grad-dtype"};

FlceProblem flce_problem_from(const po::variables_map& vm, bool need_shape) {
  for (const char* o : {"causal", "scale", "window"})
    if (vm.count(o) && !vm[o].defaulted())
      throw UsageError(std::string("--") + o + ": an attention option (use --kernel attention)");
  FlceProblem p;
  if (vm.count("shape")) {
    auto s = tuner::parse_shape(vm["shape"].as<std::string>());
    p.N = s.N;
    p.D = s.D;
    p.V = s.V;
  } else if (need_shape) {
    throw UsageError("--shape N,D,V is required");
  }
  p.dtype = parse_dtype(vm["dtype"].as<std::string>());
  p.reduction = parse_reduction(vm["reduction"].as<std::string>());
  p.ignore_index = vm["ignore-index"].as<int64_t>();
  p.label_smoothing = vm["label-smoothing"].as<double>();
  p.lse_square_scale = vm["z-loss"].as<double>();
  p.softcap = vm["softcap"].as<double>();
  p.grad_output = vm["grad-output"].as<double>();
  p.grad_dtype = parse_dtype(vm["grad-dtype"].as<std::string>());
  if (need_shape || vm.count("shape")) p.validate();
  return p;
}

AttentionProblem attention_problem_from(const po::variables_map& vm, bool need_shape) {
  for (const char* o : kFlceOptions)
    if (vm.count(o) && !vm[o].defaulted())
      throw UsageError(std::string("--") + o + ": an FLCE option, not for --kernel attention");
  AttentionProblem p;
  if (vm.count("shape")) {
    auto s = tuner::parse_dims(vm["shape"].as<std::string>(), 6, "--shape",
                               "B,H,Hkv,Sq,Sk,d for --kernel attention, e.g. 4,32,8,4096,4096,128");
    p.B = s[0];
    p.H = s[1];
    p.Hkv = s[2];
    p.Sq = s[3];
    p.Sk = s[4];
    p.d = s[5];
  } else if (need_shape) {
    throw UsageError("--shape B,H,Hkv,Sq,Sk,d is required with --kernel attention");
  }
  p.dtype = parse_dtype(vm["dtype"].as<std::string>());
  p.causal = vm.count("causal") > 0;
  p.scale = vm["scale"].as<double>();
  p.softcap = vm["softcap"].as<double>();
  p.window = vm["window"].as<int64_t>();
  if (need_shape || vm.count("shape")) p.validate();
  return p;
}

}  // namespace

tuner::Problem problem_from(const po::variables_map& vm, bool need_shape, std::optional<Family> family) {
  switch (kernel_family(vm, family)) {
    case Family::flce: return flce_problem_from(vm, need_shape);
    case Family::attention: return attention_problem_from(vm, need_shape);
  }
  throw UsageError("--kernel: unknown family");
}

DeviceInfo require_device(const Env& env, int ordinal) {
  std::string why;
  int n = env.ctx.device_count ? env.ctx.device_count(&why) : cuda_device_count(&why);
  if (n <= 0) throw NoDevice("no CUDA device: " + (why.empty() ? std::string("none found") : why));
  if (ordinal < 0 || ordinal >= n)
    throw UsageError("--device " + std::to_string(ordinal) + ": only " + std::to_string(n) + " CUDA device(s)");
  DETFUSE_CUDA_CHECK(cudaSetDevice(ordinal));
  return query_device(ordinal);
}

tuner::HeuristicFn heuristic(const Env& env) {
  return tuner::heuristic_from(env.reg, env.ctx.heuristic, env.ctx.attention_heuristic);
}

tuner::FlceHostInputs load_inputs(const std::filesystem::path& dir, FlceProblem& p, bool shape_given) {
  tuner::NpyArray X = tuner::read_npy(dir / "X.npy");
  tuner::NpyArray W = tuner::read_npy(dir / "W.npy");
  tuner::NpyArray y = tuner::read_npy(dir / "y.npy");
  auto name = [&](const char* f) { return (dir / f).string(); };
  if (X.descr != "<f4" || X.shape.size() != 2) throw invalid_argument(name("X.npy") + ": expected a 2-d float32 array [N, D]");
  if (W.descr != "<f4" || W.shape.size() != 2) throw invalid_argument(name("W.npy") + ": expected a 2-d float32 array [V, D]");
  if (y.descr != "<i8" || y.shape.size() != 1) throw invalid_argument(name("y.npy") + ": expected a 1-d int64 array [N]");
  const int64_t N = X.shape[0], D = X.shape[1], V = W.shape[0];
  if (W.shape[1] != D)
    throw invalid_argument(name("W.npy") + ": has D=" + std::to_string(W.shape[1]) + ", X.npy has D=" + std::to_string(D));
  if (y.shape[0] != N)
    throw invalid_argument(name("y.npy") + ": has " + std::to_string(y.shape[0]) + " targets, X.npy has N=" + std::to_string(N));
  if (shape_given && (p.N != N || p.D != D || p.V != V))
    throw invalid_argument("--shape " + p.shape() + " does not match the inputs in " + dir.string() + " (" +
                           std::to_string(N) + "," + std::to_string(D) + "," + std::to_string(V) + ")");
  p.N = N;
  p.D = D;
  p.V = V;
  p.validate();
  // Non-finite inputs would make every variant "incorrect" or its digests
  // meaningless: refused, saying how many and where the first is.
  if (auto bad = tuner::nonfinite_values(X)) throw invalid_argument(name("X.npy") + ": " + *bad + "; inputs must be finite");
  if (auto bad = tuner::nonfinite_values(W)) throw invalid_argument(name("W.npy") + ": " + *bad + "; inputs must be finite");
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < N; ++i) {
    int64_t t = y.i64[size_t(i)];
    if (t != p.ignore_index && (t < 0 || t >= V)) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad)
    throw invalid_argument(name("y.npy") + ": " + std::to_string(bad) + " target(s) outside [0, " + std::to_string(V) +
                           ") that are not ignore_index=" + std::to_string(p.ignore_index) + "; first at row " +
                           std::to_string(first) + " (value " + std::to_string(y.i64[size_t(first)]) + ")");
  tuner::FlceHostInputs in;
  in.X = std::move(X.f32);
  in.W = std::move(W.f32);
  in.y = std::move(y.i64);
  if (p.dtype == DType::bf16) {
    for (float& v : in.X) v = round_to_bf16(v);
    for (float& v : in.W) v = round_to_bf16(v);
  }
  if (p.reduction == Reduction::none) in.dloss.assign(size_t(N), 1.0f);
  return in;
}

namespace {

tuner::AttentionHostInputs load_attention_inputs(const std::filesystem::path& dir, AttentionProblem& p, bool shape_given) {
  auto name = [&](const char* f) { return (dir / f).string(); };
  tuner::NpyArray Q = tuner::read_npy(dir / "Q.npy");
  tuner::NpyArray K = tuner::read_npy(dir / "K.npy");
  tuner::NpyArray V = tuner::read_npy(dir / "V.npy");
  tuner::NpyArray dO = tuner::read_npy(dir / "dO.npy");
  const char* files[] = {"Q.npy", "K.npy", "V.npy", "dO.npy"};
  tuner::NpyArray* arrays[] = {&Q, &K, &V, &dO};
  const char* layout[] = {"[B, H, Sq, d]", "[B, Hkv, Sk, d]", "[B, Hkv, Sk, d]", "[B, H, Sq, d]"};
  for (int i = 0; i < 4; ++i)
    if (arrays[i]->descr != "<f4" || arrays[i]->shape.size() != 4)
      throw invalid_argument(name(files[i]) + ": expected a 4-d float32 array " + layout[i]);
  auto dims = [](const tuner::NpyArray& a) {
    return std::to_string(a.shape[0]) + "," + std::to_string(a.shape[1]) + "," + std::to_string(a.shape[2]) + "," +
           std::to_string(a.shape[3]);
  };
  if (V.shape != K.shape) throw invalid_argument(name("V.npy") + ": has shape " + dims(V) + ", K.npy has " + dims(K));
  if (dO.shape != Q.shape) throw invalid_argument(name("dO.npy") + ": has shape " + dims(dO) + ", Q.npy has " + dims(Q));
  if (K.shape[0] != Q.shape[0])
    throw invalid_argument(name("K.npy") + ": has B=" + std::to_string(K.shape[0]) + ", Q.npy has B=" + std::to_string(Q.shape[0]));
  if (K.shape[3] != Q.shape[3])
    throw invalid_argument(name("K.npy") + ": has d=" + std::to_string(K.shape[3]) + ", Q.npy has d=" + std::to_string(Q.shape[3]));
  AttentionProblem q = p;
  q.B = Q.shape[0];
  q.H = Q.shape[1];
  q.Sq = Q.shape[2];
  q.d = Q.shape[3];
  q.Hkv = K.shape[1];
  q.Sk = K.shape[2];
  if (shape_given && (p.B != q.B || p.H != q.H || p.Hkv != q.Hkv || p.Sq != q.Sq || p.Sk != q.Sk || p.d != q.d))
    throw invalid_argument("--shape " + tuner::FamilyTraits<AttentionProblem>::shape(p) + " does not match the inputs in " +
                           dir.string() + " (" + tuner::FamilyTraits<AttentionProblem>::shape(q) + ")");
  q.validate();  // names the field: Hkv must divide H, ...
  p = q;
  for (int i = 0; i < 4; ++i)
    if (auto bad = tuner::nonfinite_values(*arrays[i]))
      throw invalid_argument(name(files[i]) + ": " + *bad + "; inputs must be finite");
  tuner::AttentionHostInputs in;
  in.Q = std::move(Q.f32);
  in.K = std::move(K.f32);
  in.V = std::move(V.f32);
  in.dO = std::move(dO.f32);
  if (p.dtype == DType::bf16)
    for (auto* t : {&in.Q, &in.K, &in.V, &in.dO})
      for (float& v : *t) v = round_to_bf16(v);
  return in;
}

}  // namespace

tuner::HostInputs load_inputs(const std::filesystem::path& dir, tuner::Problem& p, bool shape_given) {
  if (p.is<FlceProblem>()) {
    FlceProblem q = p.as<FlceProblem>();
    tuner::HostInputs in = load_inputs(dir, q, shape_given);
    p = q;
    return in;
  }
  AttentionProblem q = p.as<AttentionProblem>();
  tuner::HostInputs in = load_attention_inputs(dir, q, shape_given);
  p = q;
  return in;
}

// ------------------------------------------------------------------- list
int cmd_list(Env& env, const std::vector<std::string>& args) {
  po::options_description d("list options");
  d.add_options()("kernel", po::value<std::string>()->default_value("all"), "flce, attention or all")(
      "dtype", po::value<std::string>(), "only this dtype (bf16 or fp32)")(
      "engine", po::value<std::string>(), "only this engine (fma, mma, wgmma, wgmmalt or cublaslt)");
  po::variables_map vm;
  if (!parse(args, d, nullptr, vm,
             "usage: detfuse list [--kernel flce|attention|all] [--dtype bf16|fp32] [--engine E]\n\n"
                                   "Prints every registered variant: canonical name, strategy, dtype, whether it is\n"
                                   "deterministic by design, its parameters and a summary. No GPU needed. [study]: a study\n"
                                   "variant (the contention study's row-split levels), tuned only when named.",
             env.out))
    return 0;
  const std::string k = vm["kernel"].as<std::string>();
  std::optional<Family> fam;
  if (k != "all") fam = parse_family(k);
  std::optional<DType> dt;
  if (vm.count("dtype")) dt = parse_dtype(vm["dtype"].as<std::string>());
  std::optional<std::string> engine;
  if (vm.count("engine")) {
    engine = vm["engine"].as<std::string>();
    const auto& known = known_engines();
    if (std::find(known.begin(), known.end(), *engine) == known.end())
      throw invalid_argument("--engine: unknown engine '" + *engine + "' (expected " + known_engines_text() + ")");
  }
  std::vector<const VariantDesc*> ds;
  for (const VariantDesc* v : env.reg.descriptors())
    if ((!fam || v->family == *fam) && (!dt || v->dtype == *dt) && (!engine || v->engine == *engine)) ds.push_back(v);
  for (Family f : {Family::flce, Family::attention}) {
    if (fam && f != *fam) continue;
    std::vector<const VariantDesc*> fs;
    for (auto* v : ds)
      if (v->family == f) fs.push_back(v);
    if (fs.empty()) {
      env.out << to_string(f) << ": no variants registered in this build"
              << (dt ? std::string(" for ") + to_string(*dt) : "") << (engine ? " on engine " + *engine : "") << "\n";
      continue;
    }
    size_t w = 4;
    for (auto* v : fs) w = std::max(w, v->name.size());
    char buf[256];
    const auto study = std::count_if(fs.begin(), fs.end(), [](const VariantDesc* v) { return v->study_only; });
    env.out << to_string(f) << ": " << fs.size() << " variant(s)"
            << (study ? " (" + std::to_string(study) + " study variants, marked [study]: `detfuse tune` measures "
                        "them only when named; `detfuse study contention` plans them)"
                      : std::string())
            << "\n";
    std::snprintf(buf, sizeof buf, "  %-*s  %-9s %-5s %-13s %s\n", int(w), "name", "strategy", "dtype", "deterministic",
                  "params / summary");
    env.out << buf;
    for (auto* v : fs) {
      std::snprintf(buf, sizeof buf, "  %-*s  %-9s %-5s %-13s ", int(w), v->name.c_str(), v->strategy.c_str(),
                    to_string(v->dtype), v->deterministic ? "yes" : "no");
      env.out << buf << v->params_text() << (v->study_only ? " [study]" : "") << "\n" << std::string(w + 2, ' ')
              << "  " << v->summary << "\n";
    }
  }
  return 0;
}

// ---------------------------------------------------------------- devices
int cmd_devices(Env& env, const std::vector<std::string>& args) {
  po::options_description d("devices options");
  d.add_options()("json", "machine-readable output");
  po::variables_map vm;
  if (!parse(args, d, nullptr, vm, "usage: detfuse devices [--json]\n\nThe CUDA devices and the facts the store keys results on.",
             env.out))
    return 0;
  require_device(env, 0);
  auto devs = query_all_devices();
  if (vm.count("json")) {
    tuner::Json list = tuner::Json::array();
    for (const auto& x : devs)
      list.push_back({{"ordinal", x.ordinal},
                      {"name", x.name},
                      {"uuid", x.uuid},
                      {"cc", x.cc_string()},
                      {"sm_count", x.sm_count},
                      {"memory_bytes", x.total_memory_bytes},
                      {"l2_bytes", x.l2_bytes},
                      {"driver_version", x.driver_version},
                      {"driver_release", x.driver_release},
                      {"runtime_version", x.runtime_version},
                      {"max_sm_clock_mhz", x.max_sm_clock_mhz},
                      {"current_sm_clock_mhz",
                       x.current_sm_clock_mhz ? tuner::Json(*x.current_sm_clock_mhz) : tuner::Json(nullptr)}});
    env.out << tuner::json_text(list) << "\n";
    return 0;
  }
  for (const auto& x : devs) {
    env.out << x.ordinal << ": " << x.name << "\n"
            << "   uuid             " << x.uuid << "\n"
            << "   compute cap.     " << x.cc_string() << ", " << x.sm_count << " SMs\n"
            << "   memory           " << tuner::format_bytes(double(x.total_memory_bytes)) << ", L2 "
            << tuner::format_bytes(x.l2_bytes) << "\n"
            << "   SM clock         max " << x.max_sm_clock_mhz << " MHz, now "
            << (x.current_sm_clock_mhz ? std::to_string(*x.current_sm_clock_mhz) + " MHz" : "unknown (no NVML)")
            << "\n"
            << "   driver           " << (x.driver_release.empty() ? "?" : x.driver_release) << " (CUDA "
            << x.driver_version / 1000 << "." << (x.driver_version % 1000) / 10 << "), runtime "
            << x.runtime_version / 1000 << "." << (x.runtime_version % 1000) / 10 << "\n";
  }
  const auto b = tuner::this_build();
  env.out << "build: detfuse " << b.version << " " << b.git_commit << " (" << b.build_type << ", " << b.compiler << ")\n";
  return 0;
}

// --------------------------------------------------------------------- db
int cmd_db(Env& env, const std::vector<std::string>& args) {
  const std::string usage =
      "usage: detfuse db export --csv DIR [--db PATH]\n"
      "       detfuse db merge OTHER.db [--db PATH]\n\n"
      "export writes one CSV file per table; merge imports every result of another\n"
      "detfuse database (idempotent: merging twice adds nothing).";
  po::options_description d("db options");
  d.add_options()("db", po::value<std::string>()->default_value(db::kDefaultPath), "the database")(
      "csv", po::value<std::string>(), "export: the output directory")(
      "action", po::value<std::string>(), "export or merge")("other", po::value<std::string>(), "merge: the other database");
  po::positional_options_description pos;
  pos.add("action", 1).add("other", 1);
  po::variables_map vm;
  if (!parse(args, d, &pos, vm, usage, env.out)) return 0;
  if (!vm.count("action")) throw UsageError("db: expected `export --csv DIR` or `merge OTHER.db`");
  const std::string action = vm["action"].as<std::string>();
  const std::string path = vm["db"].as<std::string>();
  if (action == "export") {
    if (!vm.count("csv")) throw UsageError("db export: --csv DIR is required");
    if (vm.count("other")) throw UsageError("db export: unexpected argument '" + vm["other"].as<std::string>() + "'");
    if (!std::filesystem::exists(path)) throw invalid_argument("--db: no database at " + path);
    db::Store store = db::Store::open_read_only(path);  // never writes, works on a read-only store
    auto files = store.export_csv(vm["csv"].as<std::string>());
    for (const auto& f : files) env.out << f.string() << "\n";
    return 0;
  }
  if (action == "merge") {
    if (!vm.count("other")) throw UsageError("db merge: the other database is required (detfuse db merge OTHER.db)");
    const std::string other = vm["other"].as<std::string>();
    if (!std::filesystem::exists(other)) throw invalid_argument("db merge: no database at " + other);
    // The source is validated in full before the target is created or changed;
    // on failure a target it created is removed (db::merge_into).
    auto c = db::merge_into(path, other);
    env.out << "merged " << other << " into " << path << ": " << c.devices << " devices, " << c.builds << " builds, "
            << c.problems << " problems, " << c.variants << " variants, " << c.runs << " runs, " << c.results
            << " results added\n";
    return 0;
  }
  throw UsageError("db: unknown action '" + action + "' (expected export or merge)");
}

// ------------------------------------------------------------------- best
int cmd_best(Env& env, const std::vector<std::string>& args) {
  po::options_description d("best options");
  add_problem_options(d);
  d.add_options()("db", po::value<std::string>()->default_value(db::kDefaultPath), "the database")(
      "gpu", po::value<std::string>(), "a GPU of the database (UUID, UUID prefix or name prefix); no GPU needed")(
      "allow-nondeterministic", "let nondeterministic (atomic) variants be the best")(
      "level", po::value<std::string>(),
      "only results that have this determinism level: run_to_run, sm_count, config or portable (none: any)")(
      "json", "machine-readable output")("device", po::value<int>()->default_value(0), "CUDA device ordinal");
  po::variables_map vm;
  if (!parse(args, d, nullptr, vm,
             "usage: detfuse best --kernel flce --shape N,D,V --dtype bf16 [--gpu UUID|NAME] [--db PATH] [--json]\n"
             "       detfuse best --kernel attention --shape B,H,Hkv,Sq,Sk,d [--causal] [--softcap C] [--window W] [--dtype bf16] ...\n\n"
             "The tuned best variant for this GPU and shape; else the nearest tuned shape with the same\n"
             "options (sum over the shape dims of |log2 ratio|: N, D, V; attention B, H, Hkv, Sq, Sk), marked\n"
             "as such; else the built-in heuristic, marked as such.\n\n"
             "--level L: only stored results that have level L (its check and run_to_run shown; `tune` stores\n"
             "run_to_run and config, `tune --levels` sm_count and portable too). Exit 1 when no stored result\n"
             "has it (the heuristic choice is printed, its level never shown).",
             env.out))
    return 0;
  const std::string level = vm.count("level") ? vm["level"].as<std::string>() : "";
  if (!level.empty()) db::check_level_name(level, "--level");  // exit 2 before anything else
  tuner::Problem p = problem_from(vm);
  const bool allow_nd = vm.count("allow-nondeterministic") > 0;
  const std::string path = vm["db"].as<std::string>();
  std::unique_ptr<db::Store> store;
  if (std::filesystem::exists(path)) {
    store = std::make_unique<db::Store>(db::Store::open_read_only(path));
  }
  DeviceInfo dev;
  std::vector<db::Id> ids;
  if (vm.count("gpu")) {
    if (!store) throw invalid_argument("--gpu: no database at " + path + " to look the GPU up in");
    const std::string q = vm["gpu"].as<std::string>();
    auto found = store->find_devices(q);
    if (found.empty()) throw invalid_argument("--gpu: no GPU matching '" + q + "' in " + path + " (see `detfuse db export`)");
    for (const auto& e : found)
      if (e.record.uuid != found.front().record.uuid) {
        std::string names;
        for (const auto& f : found) names += (names.empty() ? "" : ", ") + f.record.name + " " + f.record.uuid;
        throw invalid_argument("--gpu: '" + q + "' matches several GPUs: " + names);
      }
    for (const auto& e : found) ids.push_back(e.id);
    dev = tuner::device_info_from(found.front().record);
  } else {
    dev = require_device(env, vm["device"].as<int>());
    if (store) ids = tuner::device_rows_for(*store, dev);
  }
  tuner::BestAnswer a = tuner::resolve_best(store.get(), ids, dev, p, tuner::Mode::forward_backward, allow_nd, env.reg,
                                            heuristic(env), level);
  // A level asked for and no stored result has it: exit 1 (the answer is still printed).
  const int code = !level.empty() && level != db::kLevelNone && a.source == tuner::ChoiceSource::heuristic ? 1 : 0;
  if (!store) a.notes.insert(a.notes.begin(), "no database at " + path);
  if (vm.count("json")) {
    tuner::Json j = {{"source", tuner::to_string(a.source)},
                     {"variant", a.variant},
                     {"problem", a.problem_key},
                     {"device", a.device}};
    if (a.result) {
      j["tuned_problem"] = a.tuned_problem_key;
      j["distance"] = tuner::json_number(a.distance);
      j["median_ms"] = tuner::json_number(a.result->median_ms);
      j["tflops"] = tuner::json_number(a.result->tflops);
      j["level"] = a.result->level;
      const db::LevelChecks& c = a.result->checks;
      j["checks"] = {{"run_to_run", c.run_to_run}, {"sm_count", c.sm_count}, {"config", c.config},
                     {"portable", c.portable}, {"notes", c.notes}};
      j["seed"] = a.result->seed;
      j["recorded_at"] = a.result->recorded_at;
      j["build"] = a.result->build.version + " " + a.result->build.git_commit;
    }
    if (!level.empty()) j["level_asked"] = level;
    j["notes"] = a.notes;
    env.out << tuner::json_text(j) << "\n";
    return code;
  }
  env.out << a.variant << "  (" << tuner::to_string(a.source) << ")\n";
  env.out << "  problem  " << a.problem_key << "\n  gpu      " << a.device << "\n";
  if (a.result) {
    char b[160];
    std::snprintf(b, sizeof b, "  median   %.3f ms, %.1f TFLOP/s, determinism %s", a.result->median_ms, a.result->tflops,
                  a.result->level.c_str());
    env.out << b << "\n";
    const db::LevelChecks& c = a.result->checks;
    env.out << "  checks   run_to_run " << c.run_to_run << ", sm_count " << c.sm_count << ", config " << c.config
            << ", portable " << c.portable << "\n";
    if (a.source == tuner::ChoiceSource::nearest)
      env.out << "  tuned on " << a.tuned_problem_key << " (distance " << a.distance << ")\n";
  }
  for (const auto& n : a.notes) env.out << "  note: " << n << "\n";
  return code;
}

// --------------------------------------------------------------- dispatch
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, const CliContext& ctx) {
  std::string cmd = args.empty() ? "" : args[0];
  auto fail = [&](int code, const std::string& msg) {
    err << "detfuse" << (cmd.empty() || cmd[0] == '-' ? "" : " " + tuner::one_line(cmd)) << ": " << tuner::one_line(msg) << "\n";
    return code;
  };
  try {
    const Registry& reg = ctx.registry ? *ctx.registry : builtin_registry();
    std::string line = "detfuse";
    for (const auto& a : args) line += " " + a;
    Env env{ctx, reg, out, err, line};
    if (args.empty()) {
      err << kTopUsage;
      return 2;
    }
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      if (cmd == "help" && !rest.empty()) {
        std::vector<std::string> h = {rest[0], "--help"};
        return run_cli(h, out, err, ctx);
      }
      out << kTopUsage;
      return 0;
    }
    if (cmd == "--version") {
      auto b = tuner::this_build();
      out << "detfuse " << b.version << " " << b.git_commit << "\n";
      return 0;
    }
    if (cmd == "devices") return cmd_devices(env, rest);
    if (cmd == "list") return cmd_list(env, rest);
    if (cmd == "tune") return cmd_tune(env, rest);
    if (cmd == "best") return cmd_best(env, rest);
    if (cmd == "verify") return cmd_verify(env, rest);
    if (cmd == "bench") return cmd_bench(env, rest);
    if (cmd == "db") return cmd_db(env, rest);
    if (cmd == "study") return cmd_study(env, rest);
    return fail(2, "unknown command '" + cmd + "' (commands: devices, list, tune, best, verify, bench, db, study; see detfuse --help)");
  } catch (const UsageError& e) {
    return fail(2, e.what());
  } catch (const po::error& e) {
    return fail(2, e.what());
  } catch (const NoDevice& e) {
    return fail(1, e.what());
  } catch (const Error& e) {
    // The library's and the store's (a bad store path or a file that is not a
    // detfuse store is invalid_argument): bad input 2, run time 1.
    return fail(e.kind() == Error::Kind::invalid_argument ? 2 : 1, e.what());
  } catch (const std::bad_alloc&) {
    return fail(1, "out of host memory (std::bad_alloc); a smaller shape may fit");
  } catch (const std::length_error& e) {
    return fail(1, std::string("out of host memory (a size too large: ") + e.what() + ")");
  } catch (const nlohmann::json::exception& e) {
    return fail(1, std::string("internal JSON error: ") + e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}

int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return run_cli(args, out, err, CliContext{});
}

}  // namespace detfuse::cli
