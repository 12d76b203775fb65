// Problem types: plain descriptions of one FLCE or attention call (shapes and
// options, no pointers), with validation that names the bad field and a
// canonical text key used by the results database, tests and the command line.
// Host-only C++: included by kernels/, reference/, tuner/, db-facing code alike.
//
// FLCE semantics (the contract that reference/ and every kernel implement):
//   z_ij   = x_i . w_j                       (X [N,D], W [V,D], fp32 accumulation)
//   if softcap > 0: z_ij = softcap * tanh(z_ij / softcap)
//   lse_i  = log sum_j exp(z_ij)
//   row i is ignored when y_i == ignore_index: loss_i = 0, its gradients are 0,
//   and lse_i is still computed (it is well defined).
//   loss_i = lse_i - (1 - eps) z_{i,y_i} - (eps / V) sum_j z_ij + s * lse_i^2
//            (eps = label_smoothing, s = lse_square_scale, the z-loss weight)
//   reduction mean: L = sum_i loss_i / n_valid (L = 0 when n_valid == 0)
//             sum:  L = sum_i loss_i
//             none: the per-row losses loss_i are the output
//   Backward: c_i = grad_output * (mean ? 1/n_valid : 1) * (none ? dloss_i : 1)
//     dL/dz_ij = c_i * ((1 + 2 s lse_i) p_ij - (1 - eps) [j == y_i] - eps / V),
//     p_ij = exp(z_ij - lse_i); with softcap the chain rule multiplies by
//     1 - (z_ij / softcap)^2. G = dL/d(x_i . w_j);  dX = G W,  dW = G^T X.
//
// Attention semantics:
//   Q [B,H,Sq,d], K,V [B,Hkv,Sk,d], O [B,H,Sq,d], LSE [B,H,Sq] (natural log),
//   head h reads kv head h / (H / Hkv) (GQA). S = scale * Q K^T.
//   causal: query i sees key j iff j <= i + (Sk - Sq) (bottom-right aligned, as
//   FlashAttention >= 2.1). A row that sees no key has O = 0, LSE = -inf and
//   zero gradients (never NaN).
//   softcap > 0: every score is capped before the mask and the softmax,
//   s_ij = softcap * tanh(S_ij / softcap) (Gemma-2 uses 50); the backward
//   multiplies dS by 1 - (s_ij / softcap)^2.
//   window W > 0 (sliding window, bottom-right aligned like causal): query i
//   sees key j only if j > i + (Sk - Sq) - W, i.e. at most the W keys that end
//   at its diagonal position (Hugging Face's sliding_window, FlashAttention's
//   window_size left = W - 1). With causal it is Mistral's and Gemma-2's local
//   mask; without causal it bounds the keys on the left only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

namespace detfuse {

// The one size rule of detfuse, shared by validation (FlceProblem::validate,
// AttentionProblem::validate), every variant's can_run, the .npy reader and the
// tuner: each dimension (FLCE N, D, V; attention B, H, Hkv, Sq, Sk, d) is at
// most kMaxDim. Products of two such dimensions, times 8 bytes, fit in int64,
// so per-array byte counts of a valid problem never overflow.
inline constexpr int64_t kMaxDim = int64_t(1) << 30;
inline constexpr const char* kMaxDimText = "2^30 (1073741824)";

// "N: must be at most 2^30 (1073741824), got 2147483648" for the first
// dimension of `dims` (name, value) above kMaxDim, else nullopt. can_run calls
// it with the problem's dimensions so its refusal and validation agree.
std::optional<std::string> dim_limit_error(std::initializer_list<std::pair<const char*, int64_t>> dims);

// Overflow-safe byte counts: elem * product(dims), or nullopt when a factor is
// negative or the product does not fit in uint64 (checked before anything is
// allocated, on the host and on the device).
std::optional<uint64_t> checked_bytes(std::initializer_list<int64_t> dims, uint64_t elem);
// a + b, or nullopt on overflow (nullopt operands propagate).
std::optional<uint64_t> checked_add(std::optional<uint64_t> a, std::optional<uint64_t> b);

enum class DType { f32, bf16 };
const char* to_string(DType t);
DType parse_dtype(const std::string& s);  // "fp32"/"f32"/"float32", "bf16"/"bfloat16"
size_t dtype_bytes(DType t);

enum class Reduction { mean, sum, none };
const char* to_string(Reduction r);
Reduction parse_reduction(const std::string& s);

struct FlceProblem {
  int64_t N = 0;  // rows (tokens)
  int64_t D = 0;  // hidden size
  int64_t V = 0;  // vocabulary size
  DType dtype = DType::bf16;       // X and W
  DType grad_dtype = DType::f32;   // dX and dW as returned (fp32, or the input dtype)
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;    // in [0, 1)
  double lse_square_scale = 0.0;   // z-loss weight, >= 0
  double softcap = 0.0;            // 0 disables; > 0 caps logits as softcap*tanh(z/softcap)
  double grad_output = 1.0;        // upstream gradient of L (mean/sum), scales all gradients
  // dW += the gradient, in fp32 whatever grad_dtype (which then types dX
  // only): dW is a caller's fp32 "main grad" buffer (Megatron's gradient-
  // accumulation fusion), so no V x D fp32 accumulator and no bf16 copy of dW
  // are made. Keyed only when set (",acc=1"), so stored keys stay valid.
  bool accumulate_dW = false;

  // Throws detfuse::Error (invalid_argument) naming the first bad field.
  void validate() const;
  // Canonical key, every field spelled: "flce:N=..,D=..,V=..,dtype=bf16,grad=fp32,ii=-100,
  // red=mean,ls=0,z=0,cap=0,go=1", then ",acc=1" when accumulate_dW. Equal problems have equal keys.
  std::string key() const;
  // Short shape text "N,D,V".
  std::string shape() const;
  // 6*N*D*V for forward+backward, 2*N*D*V forward only (DESIGN.md conventions).
  double flops_forward_backward() const { return 6.0 * double(N) * double(D) * double(V); }
  double flops_forward() const { return 2.0 * double(N) * double(D) * double(V); }

  // dim_limit_error({{"N", N}, {"D", D}, {"V", V}}): what can_run should refuse with.
  std::optional<std::string> dim_error() const;
  // Device bytes of the inputs and outputs of a forward+backward call (X, W in
  // dtype; y; dX, dW in grad_dtype; loss, lse, dloss as float), workspace not
  // included; nullopt on overflow.
  std::optional<uint64_t> device_io_bytes() const;
};

struct AttentionProblem {
  int64_t B = 0, H = 0, Hkv = 0, Sq = 0, Sk = 0, d = 0;
  bool causal = false;
  double scale = 0.0;  // 0 means 1/sqrt(d)
  DType dtype = DType::bf16;
  double softcap = 0.0;  // 0 disables; > 0 caps scores as softcap*tanh(s/softcap)
  int64_t window = 0;    // 0 disables; > 0: sliding window of `window` keys (above)

  double softmax_scale() const;
  void validate() const;
  // "attention:B=..,H=..,Hkv=..,Sq=..,Sk=..,d=..,causal=0,scale=..,dtype=bf16",
  // then ",cap=.." and ",win=.." only when softcap or window is set (so the
  // keys of problems stored before those options existed stay valid).
  std::string key() const;
  double flops_forward() const;   // 4*B*H*Sq*Sk*d, half if causal
  double flops_backward() const { return 2.5 * flops_forward(); }
  std::optional<std::string> dim_error() const;
};

}  // namespace detfuse
