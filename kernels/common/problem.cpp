#include "kernels/common/problem.h"

#include <cmath>
#include <sstream>

#include "kernels/common/error.h"

namespace detfuse {

const char* to_string(DType t) { return t == DType::f32 ? "fp32" : "bf16"; }

DType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw invalid_argument("unknown dtype '" + s + "' (expected fp32 or bf16)");
}

size_t dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

const char* to_string(Reduction r) {
  switch (r) {
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
    case Reduction::none: return "none";
  }
  return "?";
}

Reduction parse_reduction(const std::string& s) {
  if (s == "mean") return Reduction::mean;
  if (s == "sum") return Reduction::sum;
  if (s == "none") return Reduction::none;
  throw invalid_argument("unknown reduction '" + s + "' (expected mean, sum or none)");
}

namespace {
// Shortest text that reads back to the same double.
std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  double back = std::stod(os.str());
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream s;
    s.precision(p);
    s << v;
    if (std::stod(s.str()) == back) return s.str();
  }
  return os.str();
}

void require(bool ok, const char* field, const std::string& why) {
  if (!ok) throw invalid_argument(std::string(field) + ": " + why);
}
}  // namespace

std::optional<std::string> dim_limit_error(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  for (const auto& [name, v] : dims)
    if (v > kMaxDim)
      return std::string(name) + ": must be at most " + kMaxDimText + ", got " + std::to_string(v);
  return std::nullopt;
}

std::optional<uint64_t> checked_bytes(std::initializer_list<int64_t> dims, uint64_t elem) {
  uint64_t n = elem;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > UINT64_MAX / uint64_t(d)) return std::nullopt;
    n *= uint64_t(d);
  }
  return n;
}

std::optional<uint64_t> checked_add(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a || !b || *a > UINT64_MAX - *b) return std::nullopt;
  return *a + *b;
}

std::optional<std::string> FlceProblem::dim_error() const { return dim_limit_error({{"N", N}, {"D", D}, {"V", V}}); }

std::optional<uint64_t> FlceProblem::device_io_bytes() const {
  const uint64_t in = dtype_bytes(dtype), g = dtype_bytes(grad_dtype);
  std::optional<uint64_t> b = checked_bytes({N, D}, in);               // X
  b = checked_add(b, checked_bytes({V, D}, in));                      // W
  b = checked_add(b, checked_bytes({N}, 8));                          // y
  b = checked_add(b, checked_bytes({N, D}, g));                       // dX
  b = checked_add(b, checked_bytes({V, D}, g));                       // dW
  b = checked_add(b, checked_bytes({N}, 3 * sizeof(float)));          // loss, lse, dloss
  return b;
}

std::optional<std::string> AttentionProblem::dim_error() const {
  return dim_limit_error({{"B", B}, {"H", H}, {"Hkv", Hkv}, {"Sq", Sq}, {"Sk", Sk}, {"d", d}});
}

void FlceProblem::validate() const {
  require(N >= 1, "N", "must be >= 1, got " + std::to_string(N));
  require(D >= 1, "D", "must be >= 1, got " + std::to_string(D));
  require(V >= 1, "V", "must be >= 1, got " + std::to_string(V));
  if (auto e = dim_error()) throw invalid_argument(*e);
  require(grad_dtype == DType::f32 || grad_dtype == dtype, "grad_dtype",
          "must be fp32 or the input dtype");
  require(ignore_index < 0 || ignore_index >= V, "ignore_index",
          "must be negative or >= V so it cannot be a class, got " + std::to_string(ignore_index));
  require(std::isfinite(label_smoothing) && label_smoothing >= 0 && label_smoothing < 1, "label_smoothing",
          "must be in [0, 1), got " + num(label_smoothing));
  require(std::isfinite(lse_square_scale) && lse_square_scale >= 0, "lse_square_scale",
          "must be finite and >= 0, got " + num(lse_square_scale));
  require(std::isfinite(softcap) && softcap >= 0, "softcap", "must be finite and >= 0 (0 disables), got " + num(softcap));
  require(std::isfinite(grad_output), "grad_output", "must be finite, got " + num(grad_output));
}

std::string FlceProblem::shape() const {
  return std::to_string(N) + "," + std::to_string(D) + "," + std::to_string(V);
}

std::string FlceProblem::key() const {
  std::ostringstream os;
  os << "flce:N=" << N << ",D=" << D << ",V=" << V << ",dtype=" << to_string(dtype)
     << ",grad=" << to_string(grad_dtype) << ",ii=" << ignore_index << ",red=" << to_string(reduction)
     << ",ls=" << num(label_smoothing) << ",z=" << num(lse_square_scale) << ",cap=" << num(softcap)
     << ",go=" << num(grad_output);
  if (accumulate_dW) os << ",acc=1";
  return os.str();
}

double AttentionProblem::softmax_scale() const { return scale > 0 ? scale : 1.0 / std::sqrt(double(d)); }

void AttentionProblem::validate() const {
  require(B >= 1, "B", "must be >= 1, got " + std::to_string(B));
  require(H >= 1, "H", "must be >= 1, got " + std::to_string(H));
  require(Hkv >= 1 && Hkv <= H && H % Hkv == 0, "Hkv",
          "must divide H (GQA), got Hkv=" + std::to_string(Hkv) + " H=" + std::to_string(H));
  require(Sq >= 1, "Sq", "must be >= 1, got " + std::to_string(Sq));
  require(Sk >= 1, "Sk", "must be >= 1, got " + std::to_string(Sk));
  require(d >= 1, "d", "must be >= 1, got " + std::to_string(d));
  if (auto e = dim_error()) throw invalid_argument(*e);
  require(std::isfinite(scale) && scale >= 0, "scale", "must be finite and >= 0 (0 means 1/sqrt(d))");
  require(std::isfinite(softcap) && softcap >= 0, "softcap", "must be finite and >= 0 (0 disables), got " + num(softcap));
  require(window >= 0, "window", "must be >= 0 (0 disables), got " + std::to_string(window));
  if (auto e = dim_limit_error({{"window", window}})) throw invalid_argument(*e);
}

std::string AttentionProblem::key() const {
  std::ostringstream os;
  os << "attention:B=" << B << ",H=" << H << ",Hkv=" << Hkv << ",Sq=" << Sq << ",Sk=" << Sk << ",d=" << d
     << ",causal=" << (causal ? 1 : 0) << ",scale=" << num(softmax_scale()) << ",dtype=" << to_string(dtype);
  if (softcap > 0) os << ",cap=" << num(softcap);
  if (window > 0) os << ",win=" << window;
  return os.str();
}

double AttentionProblem::flops_forward() const {
  double f = 4.0 * double(B) * double(H) * double(Sq) * double(Sk) * double(d);
  return causal ? f / 2 : f;
}

}  // namespace detfuse
