#include "tuner/study/contention_plan.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "kernels/common/error.h"

namespace detfuse::study {

int64_t ParsedVariant::param(const std::string& key, int64_t def) const {
  for (const auto& [k, v] : params)
    if (k == key) return v;
  return def;
}

bool is_strategy_knob(const std::string& p) { return p == "mb" || p == "sk" || p == "vs"; }

std::string ParsedVariant::tile() const {
  std::string t;
  for (const auto& [k, v] : params)
    if (!is_strategy_knob(k)) t += (t.empty() ? "" : "_") + k + std::to_string(v);
  return t;
}

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}
}  // namespace

std::optional<ParsedVariant> parse_variant_name(const std::string& name) {
  const auto parts = split(name, '.');
  if (parts.size() != 5) return std::nullopt;
  for (const auto& p : parts)
    if (p.empty()) return std::nullopt;
  ParsedVariant v;
  v.name = name;
  v.family = parts[0];
  v.dtype = parts[1];
  v.engine = parts[2];
  v.strategy = parts[3];
  for (const auto& tok : split(parts[4], '_')) {
    size_t i = 0;
    while (i < tok.size() && std::isalpha(static_cast<unsigned char>(tok[i]))) ++i;
    if (i == 0 || i == tok.size()) return std::nullopt;
    size_t j = i + (tok[i] == '-' ? 1 : 0);
    if (j == tok.size()) return std::nullopt;
    for (size_t k = j; k < tok.size(); ++k)
      if (!std::isdigit(static_cast<unsigned char>(tok[k]))) return std::nullopt;
    if (tok.size() - j > 15) return std::nullopt;
    v.params.emplace_back(tok.substr(0, i), std::stoll(tok.substr(i)));
  }
  return v;
}

ContentionAxes contention_axes(bool quick) {
  ContentionAxes a;
  if (quick) {
    // The adders axis at N_fixed (every sk level of the first block shape),
    // and the smallest N, where the chunk holds few row blocks.
    a.N_sweep = {512, 8192};
    a.V_sweep = {};
    a.D_sweep = {};
  } else {
    a.N_sweep = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    a.V_sweep = {8192, 32768, 131072};
    a.D_sweep = {1024, 2048, 4096, 8192};
  }
  return a;
}

namespace {

// Problems in the order first added, each key once.
template <class P>
struct UniqueProblems {
  std::vector<P> out;
  std::set<std::string> keys;
  void add(const P& p) {
    if (keys.insert(p.key()).second) out.push_back(p);
  }
};

}  // namespace

std::vector<FlceProblem> contention_problems(const ContentionAxes& a, DType dtype) {
  UniqueProblems<FlceProblem> u;
  auto add = [&](int64_t N, int64_t D, int64_t V) {
    FlceProblem p;
    p.N = N;
    p.D = D;
    p.V = V;
    p.dtype = dtype;
    u.add(p);
  };
  for (int64_t n : a.N_sweep) add(n, a.D, a.V);
  for (int64_t v : a.V_sweep) add(a.N_fixed, a.D, v);
  for (int64_t d : a.D_sweep) add(a.N_fixed, d, a.V);
  return u.out;
}

AttentionContentionAxes attention_contention_axes(bool quick) {
  AttentionContentionAxes a;
  if (quick) {
    // Three contention levels a decade apart in key blocks per dQ tile (8,
    // 32 and 128 at bc=128), the causal and GQA axes at the middle point only
    // (S=4096, the shape of the attention bench log), Hkv=8 being Llama-3's
    // group of 4. Five problems; the largest, S=16384, is one forward+backward
    // of 1.5e13 FLOP (about 40 ms on an H200 with the wgmma owning variant).
    // Every problem above 2e10 MACs is checked on a float64 slice of 2e10 MACs
    // (tuner/attention_measurer.h), a few seconds of the host's cores each.
    a.S_sweep = {1024, 4096, 16384};
    a.causal_S = {4096};
    a.Hkv_sweep = {32, 8};
  } else {
    // S=32768 cannot keep 16k tokens (B=1 holds 32k); its tensors stay 256 MiB
    // each in bf16.
    a.S_sweep = {512, 1024, 2048, 4096, 8192, 16384, 32768};
    a.causal_S = a.S_sweep;
    a.Hkv_sweep = {32, 8, 4, 1};
  }
  return a;
}

std::vector<AttentionProblem> attention_contention_problems(const AttentionContentionAxes& a, DType dtype) {
  UniqueProblems<AttentionProblem> u;
  auto add = [&](int64_t S, int64_t Hkv, bool causal) {
    AttentionProblem p;
    p.B = a.batch(S);
    p.H = a.H;
    p.Hkv = Hkv;
    p.Sq = p.Sk = S;
    p.d = a.d;
    p.causal = causal;
    p.dtype = dtype;
    u.add(p);
  };
  for (int64_t s : a.S_sweep) add(s, a.H, false);
  for (int64_t s : a.causal_S) add(s, a.H, true);
  for (int64_t h : a.Hkv_sweep) add(a.S_gqa, h, false);
  return u.out;
}

std::vector<std::string> contention_variants(const std::vector<std::string>& names, const ContentionOptions& o) {
  const std::string dtype = to_string(o.dtype);
  const std::string family = to_string(o.family);
  const bool attention = o.family == Family::attention;
  const int64_t head_dim = attention ? attention_contention_axes(o.quick).d : 0;
  // (engine, strategy) -> parsed variants in registry order.
  std::vector<std::pair<std::string, std::string>> group_order;
  std::map<std::pair<std::string, std::string>, std::vector<ParsedVariant>> groups;
  for (const auto& n : names) {
    auto v = parse_variant_name(n);
    if (!v || v->family != family || v->dtype != dtype) continue;
    if (!o.engines.empty() && std::find(o.engines.begin(), o.engines.end(), v->engine) == o.engines.end()) continue;
    if (attention && v->strategy == "fwd") continue;  // forward only: no backward to study
    if (attention && v->param("d", head_dim) != head_dim) continue;
    const auto key = std::make_pair(v->engine, v->strategy);
    if (!groups.count(key)) group_order.push_back(key);
    groups[key].push_back(*v);
  }
  // The reference-grade CUDA-core engine only when nothing faster is there
  // (or --engine asks for it; see the header).
  const bool fma_named = std::find(o.engines.begin(), o.engines.end(), "fma") != o.engines.end();
  const bool other_engine = std::any_of(group_order.begin(), group_order.end(),
                                        [](const auto& k) { return k.first != "fma"; });
  if (!fma_named && other_engine)
    group_order.erase(std::remove_if(group_order.begin(), group_order.end(),
                                     [](const auto& k) { return k.first == "fma"; }),
                      group_order.end());
  std::set<std::string> keep;
  for (const auto& key : group_order) {
    const auto& g = groups[key];
    std::vector<std::string> tiles;
    for (const auto& v : g)
      if (std::find(tiles.begin(), tiles.end(), v.tile()) == tiles.end()) tiles.push_back(v.tile());
    auto of_tile = [&](const std::string& t) {
      std::vector<const ParsedVariant*> r;
      for (const auto& v : g)
        if (v.tile() == t) r.push_back(&v);
      // Knob order: chunk budget, then row splits (sk0, every row block,
      // last), then slab rows.
      const auto sk = [](const ParsedVariant* v) {
        const int64_t k = v->param("sk", 1);
        return k == 0 ? std::numeric_limits<int64_t>::max() : k;
      };
      std::stable_sort(r.begin(), r.end(), [&](const ParsedVariant* a, const ParsedVariant* b) {
        return std::make_tuple(a->param("mb"), sk(a), a->param("vs")) <
               std::make_tuple(b->param("mb"), sk(b), b->param("vs"));
      });
      return r;
    };
    const std::set<std::string> study(o.study_variants.begin(), o.study_variants.end());
    // A shape's default: its variants that are not study variants.
    auto defaults = [&](const std::vector<const ParsedVariant*>& r) {
      std::vector<const ParsedVariant*> d;
      for (const auto* v : r)
        if (!study.count(v->name)) d.push_back(v);
      return d.empty() ? r : d;
    };
    const bool knob_sweep = !attention && (key.second == "atomic" || key.second == "partials");
    const bool owning = key.second == "owning";
    if (o.quick) {
      const auto r = of_tile(tiles.front());
      if (knob_sweep) {
        for (const auto* v : r) keep.insert(v->name);  // every row-split level: the adders axis
        continue;
      }
      const auto d = defaults(r);
      keep.insert(d.front()->name);
      if (owning) keep.insert(d.back()->name);
      continue;
    }
    for (size_t i = 0; i < tiles.size(); ++i) {
      const auto r = of_tile(tiles[i]);
      if (i == 0) {
        for (const auto* v : r) keep.insert(v->name);  // every knob of the first shape
      } else {
        const auto d = defaults(r);
        keep.insert((owning ? d[(d.size() - 1) / 2] : d.front())->name);  // median budget
      }
    }
  }
  std::vector<std::string> out;
  for (const auto& n : names)
    if (keep.count(n)) out.push_back(n);
  return out;
}

namespace {
std::string json_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
std::string json_strings(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ",\"" : "\"") + v[i] + "\"";
  return s + "]";
}
}  // namespace

ContentionPlan plan_contention(const std::vector<std::string>& names, const ContentionOptions& o) {
  ContentionPlan p;
  const bool attention = o.family == Family::attention;
  // A plan narrowed to some engines is its own study (a --resume of the
  // unfiltered study never takes it for complete, nor the other way round).
  p.name = std::string("contention-") + to_string(o.family) + (o.quick ? "-quick" : "");
  for (const auto& e : o.engines) p.name += "-" + e;
  p.variants = contention_variants(names, o);
  if (p.variants.empty())
    throw invalid_argument("study contention: no registered " + std::string(to_string(o.dtype)) +
                           (attention ? " attention" : " FLCE") + " variant matches" +
                           (o.engines.empty() ? "" : " --engine") +
                           (attention ? " (see `detfuse list --kernel attention`)" : " (see `detfuse list`)"));
  p.sms = !o.sms.empty() ? o.sms : o.quick ? std::vector<int>{16, 0} : std::vector<int>{8, 16, 33, 66, 0};
  for (int k : p.sms)
    if (k < 0) throw invalid_argument("--sms " + std::to_string(k) + ": an SM count is >= 1 (0: the whole GPU)");
  p.repeats = o.quick ? 3 : 5;
  p.time_cap_s = o.quick ? 2 : 10;
  std::ostringstream j;
  if (attention) {
    const AttentionContentionAxes a = attention_contention_axes(o.quick);
    for (const auto& q : attention_contention_problems(a, o.dtype)) {
      p.problems.emplace_back(q);
      if (q.Sq == a.S_gqa && q.Hkv == a.H && !q.causal) p.sm_problems.emplace_back(q);
    }
    j << "{\"kind\":\"contention\",\"family\":\"attention\",\"quick\":" << (o.quick ? "true" : "false")
      << ",\"dtype\":\"" << to_string(o.dtype) << "\",\"H\":" << a.H << ",\"d\":" << a.d << ",\"tokens\":" << a.tokens
      << ",\"S_sweep\":" << json_list(a.S_sweep) << ",\"causal_S\":" << json_list(a.causal_S)
      << ",\"S_gqa\":" << a.S_gqa << ",\"Hkv_sweep\":" << json_list(a.Hkv_sweep);
  } else {
    const ContentionAxes a = contention_axes(o.quick);
    for (const auto& q : contention_problems(a, o.dtype)) {
      p.problems.emplace_back(q);
      if (q.N == a.N_fixed && q.D == a.D && q.V == a.V) p.sm_problems.emplace_back(q);
    }
    j << "{\"kind\":\"contention\",\"family\":\"flce\",\"quick\":" << (o.quick ? "true" : "false") << ",\"dtype\":\""
      << to_string(o.dtype) << "\",\"D\":" << a.D << ",\"V\":" << a.V << ",\"N_sweep\":" << json_list(a.N_sweep)
      << ",\"N_fixed\":" << a.N_fixed << ",\"V_sweep\":" << json_list(a.V_sweep)
      << ",\"D_sweep\":" << json_list(a.D_sweep);
  }
  std::vector<int64_t> sms(p.sms.begin(), p.sms.end());
  j << ",\"engines\":" << json_strings(o.engines) << ",\"repeats\":" << p.repeats << ",\"time_cap_s\":" << p.time_cap_s
    << ",\"sms\":" << json_list(sms) << "}";
  p.axes_json = j.str();
  return p;
}

}  // namespace detfuse::study
