#include "tuner/flce_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "db/store.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/timer.h"
#include "kernels/flce/flce.h"
#include "reference/emulate.h"
#include "tuner/levels.h"
#include "reference/inputs.h"
#include "tuner/npy.h"
#include "tuner/sm_slice.h"

namespace detfuse::tuner {

std::vector<std::pair<std::string, Digest>> flce_digest_list(const flce::DeviceCase::Digests& d, FlceMode mode) {
  std::vector<std::pair<std::string, Digest>> out;
  if (mode != FlceMode::backward) {
    out.emplace_back("loss", d.loss);
    out.emplace_back("lse", d.lse);
  }
  if (mode != FlceMode::forward) {
    out.emplace_back("dX", d.dX);
    out.emplace_back("dW", d.dW);
  }
  return out;
}

FlceHostInputs inputs_or_seeded(const std::optional<FlceHostInputs>& user, const FlceProblem& p, int64_t seed) {
  return user ? *user : reference::make_flce_inputs(p, uint64_t(seed));
}

FlceGpuCase::FlceGpuCase(const FlceProblem& p, FlceMode mode, const FlceHostInputs& in, const DeviceInfo& dev)
    : mode_(mode), dev_(dev), case_(p, in.X, in.W, in.y, in.dloss) {
  if (mode == FlceMode::backward)
    throw invalid_argument("mode: the tuner measures forward and forward_backward only");
  flce::validate_call(p, mode, case_.args(mode));
  // The portable check (tuner/levels.h) emulates problems up to kPortableMaxFlops: keep their inputs.
  if (p.flops_forward_backward() <= kPortableMaxFlops) host_ = in;
  // Twice the L2 size, written between repetitions, evicts the inputs from L2.
  flush_.allocate(size_t(std::max(dev.l2_bytes, 1 << 20)) * 2);
}

void FlceGpuCase::launch(const FlceVariant& v, const DeviceBytes& ws) {
  FlceArgs a = case_.args(mode_);
  a.workspace = ws.get();
  a.workspace_size = ws.bytes();
  measure_launch([&](cudaStream_t s) { v.launch(case_.problem(), mode_, a, s); });  // a --sms slice, or the device
}

void FlceGpuCase::flush_l2() { DETFUSE_CUDA_CHECK(cudaMemsetAsync(flush_.get(), 0, flush_.bytes(), nullptr)); }

void FlceGpuCase::run_once(const FlceVariant& v) {
  DeviceBytes ws(v.workspace_bytes(case_.problem(), mode_));
  case_.poison();
  launch(v, ws);
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<FlceGpuCase::OutputView> FlceGpuCase::output_views() {
  const FlceProblem& p = case_.problem();
  const FlceArgs a = case_.args(mode_);
  std::vector<OutputView> v;
  if (mode_ != FlceMode::backward) {
    v.push_back({"loss", a.loss, case_.loss_count(), DType::f32});
    v.push_back({"lse", a.lse, size_t(p.N), DType::f32});
  }
  if (mode_ != FlceMode::forward) {
    v.push_back({"dX", a.dX, size_t(p.N) * size_t(p.D), p.grad_dtype});
    v.push_back({"dW", a.dW, size_t(p.V) * size_t(p.D), p.grad_dtype});
  }
  return v;
}

bool FlceGpuCase::repeat_digests(const FlceVariant& v, int repeats, const std::function<bool()>& stop,
                                 db::Determinism& d, const std::function<bool()>& cap_spent) {
  DeviceBytes ws(v.workspace_bytes(case_.problem(), mode_));
  return repeat_with_digests(
      [&] {
        case_.poison();
        launch(v, ws);
      },
      [&] { return digest_outputs(); }, [&] { return output_views(); }, repeats, stop, d, cap_spent);
}

std::vector<std::pair<std::string, Digest>> FlceGpuCase::digest_outputs() {
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const FlceProblem& p = case_.problem();
  const FlceArgs a = case_.args(mode_);
  const size_t g = dtype_bytes(p.grad_dtype);
  std::vector<std::pair<std::string, Digest>> out;
  if (mode_ != FlceMode::backward) {
    out.emplace_back("loss", digester_.digest(a.loss, case_.loss_count() * sizeof(float)));
    out.emplace_back("lse", digester_.digest(a.lse, size_t(p.N) * sizeof(float)));
  }
  if (mode_ != FlceMode::forward) {
    out.emplace_back("dX", digester_.digest(a.dX, size_t(p.N) * size_t(p.D) * g));
    out.emplace_back("dW", digester_.digest(a.dW, size_t(p.V) * size_t(p.D) * g));
  }
  return out;
}

bool FlceGpuCase::time(const FlceVariant& v, const RepetitionPolicy& policy, const std::function<bool()>& stop,
                       db::Timing& t, int* uncapped) {
  const FlceProblem& p = case_.problem();
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t free0 = free_device_memory();
  const size_t ws_bytes = v.workspace_bytes(p, mode_);
  DeviceBytes ws(ws_bytes);
  return time_launches([&] { launch(v, ws); }, [&] { flush_l2(); }, dev_.ordinal, free0, ws_bytes,
                       mode_ == FlceMode::forward ? p.flops_forward() : p.flops_forward_backward(), policy, stop, t,
                       uncapped);
}

bool FlceGpuCase::time_mode(const Variant& v, Mode timed, const RepetitionPolicy& policy,
                            const std::function<bool()>& stop, db::Timing& t, int* uncapped) {
  if (FamilyTraits<FlceProblem>::family_mode(timed) != mode_)
    throw invalid_argument(std::string("FLCE case: prepared for ") + to_string(mode_) + ", asked to time " + to_string(timed));
  return time(v.as<FlceVariant>(), policy, stop, t, uncapped);
}

void FlceGpuCase::dump_outputs(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const FlceProblem& p = case_.problem();
  write_npy(dir / "loss.npy", case_.loss(), {int64_t(case_.loss_count())});
  write_npy(dir / "lse.npy", case_.lse(), {p.N});
  write_npy(dir / "dX.npy", case_.dX(), {p.N, p.D});
  write_npy(dir / "dW.npy", case_.dW(), {p.V, p.D});
}

std::vector<int64_t> sample_rows(int64_t N, int count, int64_t seed) {
  std::set<int64_t> rows;
  if (N <= 0) return {};
  if (count >= N) {
    std::vector<int64_t> all(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) all[size_t(i)] = i;
    return all;
  }
  rows.insert(0);
  if (count > 1) rows.insert(N - 1);
  const uint64_t key = reference::stream_key(uint64_t(seed), 0x726f7773ull /* "rows" */);
  for (uint64_t i = 0; int(rows.size()) < count; ++i) rows.insert(int64_t(reference::splitmix64_at(key, i) % uint64_t(N)));
  return {rows.begin(), rows.end()};
}

std::optional<std::vector<std::pair<std::string, std::string>>> FlceGpuCase::emulated_digests(const Variant& v,
                                                                                              double max_flops,
                                                                                              std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return std::optional<std::vector<std::pair<std::string, std::string>>>();
  };
  if (!reference::has_emulation(v.name())) return no("no CPU emulation of this variant");
  if (mode_ != FlceMode::forward_backward) return no("the case runs the forward pass only");
  if (problem().flops_forward_backward() > max_flops)
    return no("the problem is too large to emulate (" + std::to_string(problem().flops_forward_backward()) +
              " FLOPs, limit " + std::to_string(max_flops) + ")");
  if (!host_) return no("the inputs were not kept");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& o : reference::emulate_flce(v.name(), problem(), *host_))
    out.emplace_back(o.name, digest_host(o.bytes.data(), o.bytes.size()).hex());
  return out;
}

}  // namespace detfuse::tuner
