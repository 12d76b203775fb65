#include "tuner/attention_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "kernels/common/cuda_check.h"
#include "kernels/common/host_bf16.h"
#include "reference/emulate.h"
#include "tuner/levels.h"
#include "tuner/npy.h"
#include "tuner/sm_slice.h"

namespace detfuse::tuner {

AttentionHostInputs attention_inputs_or_seeded(const std::optional<AttentionHostInputs>& user,
                                               const AttentionProblem& p, int64_t seed) {
  return user ? *user : reference::make_attention_inputs(p, uint64_t(seed));
}

namespace {

void upload(DeviceBytes& dst, const std::vector<float>& src, DType t) {
  if (t == DType::f32) {
    dst.allocate(src.size() * sizeof(float));
    DETFUSE_CUDA_CHECK(cudaMemcpy(dst.get(), src.data(), dst.bytes(), cudaMemcpyHostToDevice));
  } else {
    const std::vector<uint16_t> bits = to_bf16_bits(src);
    dst.allocate(bits.size() * sizeof(uint16_t));
    DETFUSE_CUDA_CHECK(cudaMemcpy(dst.get(), bits.data(), dst.bytes(), cudaMemcpyHostToDevice));
  }
}

void check_size(const char* name, const std::vector<float>& v, size_t want) {
  if (v.size() != want)
    throw invalid_argument(std::string(name) + ": " + std::to_string(v.size()) + " values, the problem needs " +
                           std::to_string(want));
}

}  // namespace

AttentionGpuCase::AttentionGpuCase(const AttentionProblem& p, Mode mode, const AttentionHostInputs& in,
                                   const DeviceInfo& dev)
    : p_(p), mode_(mode), dev_(dev) {
  p.validate();
  nq_ = size_t(p.B * p.H * p.Sq * p.d);
  nk_ = size_t(p.B * p.Hkv * p.Sk * p.d);
  nrows_ = size_t(p.B * p.H * p.Sq);
  check_size("Q", in.Q, nq_);
  check_size("K", in.K, nk_);
  check_size("V", in.V, nk_);
  if (mode == Mode::forward_backward) check_size("dO", in.dO, nq_);
  // The portable check (tuner/levels.h) emulates problems up to kPortableMaxFlops: keep their inputs.
  if (p.flops_forward() + p.flops_backward() <= kPortableMaxFlops) host_ = in;
  const size_t e = dtype_bytes(p.dtype);
  upload(Q_, in.Q, p.dtype);
  upload(K_, in.K, p.dtype);
  upload(V_, in.V, p.dtype);
  O_.allocate(nq_ * e);
  lse_.resize(nrows_);
  if (mode == Mode::forward_backward) {
    has_backward_ = true;
    upload(dO_, in.dO, p.dtype);
    dQ_.allocate(nq_ * e);
    dK_.allocate(nk_ * e);
    dV_.allocate(nk_ * e);
  }
  // Twice the L2 size, written between repetitions, evicts the inputs from L2.
  flush_.allocate(size_t(std::max(dev.l2_bytes, 1 << 20)) * 2);
}

AttentionArgs AttentionGpuCase::args(AttentionMode pass) const {
  AttentionArgs a;
  a.Q = Q_.get();
  a.K = K_.get();
  a.V = V_.get();
  if (pass == AttentionMode::forward) {
    a.O = O_.get();
    a.lse = lse_.data();
  } else {
    a.dO = dO_.get();
    a.O_in = O_.get();
    a.lse_in = lse_.data();
    a.dQ = dQ_.get();
    a.dK = dK_.get();
    a.dV = dV_.get();
  }
  return a;
}

void AttentionGpuCase::poison() {
  for (DeviceBytes* b : {&O_, &dQ_, &dK_, &dV_})
    if (b->bytes()) DETFUSE_CUDA_CHECK(cudaMemset(b->get(), 0xFF, b->bytes()));
  DETFUSE_CUDA_CHECK(cudaMemset(lse_.data(), 0xFF, lse_.bytes()));
}

size_t AttentionGpuCase::workspace_bytes(const AttentionVariant& v, const AttentionProblem& p, Mode m) {
  size_t ws = v.workspace_bytes(p, AttentionMode::forward);
  if (m == Mode::forward_backward) ws = std::max(ws, v.workspace_bytes(p, AttentionMode::backward));
  return ws;
}

bool AttentionGpuCase::set_mode(Mode m) {
  if (m == Mode::forward_backward && !has_backward_) return false;
  mode_ = m;
  return true;
}

void AttentionGpuCase::launch(const AttentionVariant& v, Mode m, const DeviceBytes& ws) {
  if (m == Mode::forward_backward && !has_backward_)
    throw invalid_argument("attention case: prepared for the forward only, asked for forward_backward");
  AttentionArgs f = args(AttentionMode::forward);
  f.workspace = ws.get();
  f.workspace_size = ws.bytes();
  // On a --sms slice's stream when one is installed (tuner/sm_slice.h).
  measure_launch([&](cudaStream_t s) {
    v.launch(p_, AttentionMode::forward, f, s);
    if (m == Mode::forward_backward) {
      AttentionArgs b = args(AttentionMode::backward);
      b.workspace = ws.get();
      b.workspace_size = ws.bytes();
      v.launch(p_, AttentionMode::backward, b, s);
    }
  });
}

void AttentionGpuCase::run_once(const AttentionVariant& v) {
  DeviceBytes ws(workspace_bytes(v, p_, mode_));
  poison();
  launch(v, mode_, ws);
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
}

bool AttentionGpuCase::repeat_digests(const AttentionVariant& v, int repeats, const std::function<bool()>& stop,
                                      db::Determinism& d, const std::function<bool()>& cap_spent) {
  DeviceBytes ws(workspace_bytes(v, p_, mode_));
  return repeat_with_digests(
      [&] {
        poison();
        launch(v, mode_, ws);
      },
      [&] { return digest_outputs(); }, [&] { return output_views(); }, repeats, stop, d, cap_spent);
}

std::vector<OutputView> AttentionGpuCase::output_views() const {
  std::vector<OutputView> v;
  v.push_back({"O", O_.get(), nq_, p_.dtype});
  v.push_back({"lse", lse_.data(), nrows_, DType::f32});
  if (mode_ == Mode::forward_backward) {
    v.push_back({"dQ", dQ_.get(), nq_, p_.dtype});
    v.push_back({"dK", dK_.get(), nk_, p_.dtype});
    v.push_back({"dV", dV_.get(), nk_, p_.dtype});
  }
  return v;
}

NamedDigests AttentionGpuCase::digest_outputs() {
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  NamedDigests out;
  out.emplace_back("O", digester_.digest(O_.get(), O_.bytes()));
  out.emplace_back("lse", digester_.digest(lse_.data(), lse_.bytes()));
  if (mode_ == Mode::forward_backward) {
    out.emplace_back("dQ", digester_.digest(dQ_.get(), dQ_.bytes()));
    out.emplace_back("dK", digester_.digest(dK_.get(), dK_.bytes()));
    out.emplace_back("dV", digester_.digest(dV_.get(), dV_.bytes()));
  }
  return out;
}

bool AttentionGpuCase::time(const AttentionVariant& v, Mode timed, const RepetitionPolicy& policy,
                            const std::function<bool()>& stop, db::Timing& t, int* uncapped) {
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t free0 = free_device_memory();
  const size_t ws_bytes = workspace_bytes(v, p_, timed);
  DeviceBytes ws(ws_bytes);
  return time_launches([&] { launch(v, timed, ws); },
                       [&] { DETFUSE_CUDA_CHECK(cudaMemsetAsync(flush_.get(), 0, flush_.bytes(), nullptr)); },
                       dev_.ordinal, free0, ws_bytes, FamilyTraits<AttentionProblem>::flops(p_, timed), policy, stop, t,
                       uncapped);
}

std::vector<float> AttentionGpuCase::download(const DeviceBytes& b, size_t count) const {
  if (!b.bytes()) throw invalid_argument("attention case: this output is not computed in mode " + std::string(to_string(mode_)));
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(count);
  if (p_.dtype == DType::f32) {
    DETFUSE_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), count * sizeof(float), cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> bits(count);
    DETFUSE_CUDA_CHECK(cudaMemcpy(bits.data(), b.get(), count * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    out = from_bf16_bits(bits);
  }
  return out;
}

std::vector<float> AttentionGpuCase::O() const { return download(O_, nq_); }
std::vector<float> AttentionGpuCase::lse() const { return lse_.download(); }
std::vector<float> AttentionGpuCase::dQ() const { return download(dQ_, nq_); }
std::vector<float> AttentionGpuCase::dK() const { return download(dK_, nk_); }
std::vector<float> AttentionGpuCase::dV() const { return download(dV_, nk_); }

void AttentionGpuCase::dump_outputs(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const AttentionProblem& p = p_;
  write_npy(dir / "O.npy", O(), {p.B, p.H, p.Sq, p.d});
  write_npy(dir / "lse.npy", lse(), {p.B, p.H, p.Sq});
  if (mode_ == Mode::forward_backward) {  // the last run's mode
    write_npy(dir / "dQ.npy", dQ(), {p.B, p.H, p.Sq, p.d});
    write_npy(dir / "dK.npy", dK(), {p.B, p.Hkv, p.Sk, p.d});
    write_npy(dir / "dV.npy", dV(), {p.B, p.Hkv, p.Sk, p.d});
  }
}

std::optional<std::vector<std::pair<std::string, std::string>>> AttentionGpuCase::emulated_digests(
    const Variant& v, double max_flops, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return std::optional<std::vector<std::pair<std::string, std::string>>>();
  };
  if (!reference::has_emulation(v.name())) return no("no CPU emulation of this variant");
  if (mode_ != Mode::forward_backward) return no("the case runs the forward pass only");
  const double flops = p_.flops_forward() + p_.flops_backward();
  if (flops > max_flops)
    return no("the problem is too large to emulate (" + std::to_string(flops) + " FLOPs, limit " +
              std::to_string(max_flops) + ")");
  if (!host_) return no("the inputs were not kept");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& o : reference::emulate_attention(v.name(), p_, *host_))
    out.emplace_back(o.name, digest_host(o.bytes.data(), o.bytes.size()).hex());
  return out;
}

}  // namespace detfuse::tuner
