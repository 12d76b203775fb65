// Measuring attention variants on the GPU: one problem's device state (Q, K,
// V, dO uploaded in the dtype; O, LSE, dQ, dK, dV allocated; an L2-flush
// buffer) and the GpuCase measurements the tuner, `bench` and `verify` share.
//
// A run of Mode::forward_backward is the forward (O, LSE) then the backward
// (dQ, dK, dV from Q, K, V, O, dO and the saved LSE), one after the other on
// the legacy default stream with one workspace of the larger of the two sizes,
// allocated once per measurement (never timed). Mode::forward runs the forward
// alone. Variants are launched directly: the problem and the inputs are checked
// once here, can_run by the caller.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"
#include "kernels/registry.h"
#include "reference/inputs.h"
#include "tuner/attention_family.h"
#include "tuner/family.h"
#include "tuner/gpu_loop.h"

namespace detfuse::tuner {

// Host inputs of one attention problem (values as the dtype holds them): Q, K,
// V and dO as float, the reference's input type.
using AttentionHostInputs = reference::AttentionInputs;

// The user's inputs when given, else the seeded ones of (problem, seed).
AttentionHostInputs attention_inputs_or_seeded(const std::optional<AttentionHostInputs>& user,
                                               const AttentionProblem& p, int64_t seed);

// The output names in digest order.
inline const std::vector<std::string>& attention_output_names() {
  static const std::vector<std::string> n = {"O", "lse", "dQ", "dK", "dV"};
  return n;
}

class AttentionGpuCase : public GpuCase {
 public:
  // Uploads the inputs (sizes checked against the problem: invalid_argument
  // naming the tensor). `mode`: what run_once and repeat_digests run.
  AttentionGpuCase(const AttentionProblem& p, Mode mode, const AttentionHostInputs& in, const DeviceInfo& dev);

  const AttentionProblem& problem() const { return p_; }
  Mode mode() const { return mode_; }

  // Device pointers of the case for one pass (the workspace is the caller's).
  AttentionArgs args(AttentionMode pass) const;
  // Every output byte 0xFF (NaN in fp32 and bf16).
  void poison();

  void run_once(const AttentionVariant& v);
  bool repeat_digests(const AttentionVariant& v, int repeats, const std::function<bool()>& stop, db::Determinism& d,
                      const std::function<bool()>& cap_spent = {});
  bool time(const AttentionVariant& v, Mode timed, const RepetitionPolicy& policy, const std::function<bool()>& stop,
            db::Timing& t, int* uncapped = nullptr);
  // Digests of the outputs the case's mode writes, attention_output_names() order.
  NamedDigests digest_outputs();
  // The same outputs on the device (the run-to-run spread).
  std::vector<OutputView> output_views() const;

  // Outputs as float (bf16 widened), layouts as in kernels/common/problem.h.
  std::vector<float> O() const;
  std::vector<float> lse() const;
  std::vector<float> dQ() const;
  std::vector<float> dK() const;
  std::vector<float> dV() const;

  // Workspace bytes of a run of `m` (the larger of the passes it runs).
  static size_t workspace_bytes(const AttentionVariant& v, const AttentionProblem& p, Mode m);

  // GpuCase
  void run_once(const Variant& v) override { run_once(v.as<AttentionVariant>()); }
  bool repeat_digests(const Variant& v, int repeats, const std::function<bool()>& stop, db::Determinism& d,
                      const std::function<bool()>& cap_spent) override {
    return repeat_digests(v.as<AttentionVariant>(), repeats, stop, d, cap_spent);
  }
  bool time_mode(const Variant& v, Mode timed, const RepetitionPolicy& policy, const std::function<bool()>& stop,
                 db::Timing& t, int* uncapped) override {
    return time(v.as<AttentionVariant>(), timed, policy, stop, t, uncapped);
  }
  // O.npy [B,H,Sq,d], lse.npy [B,H,Sq], dQ.npy, dK.npy, dV.npy (float32).
  void dump_outputs(const std::filesystem::path& dir) override;
  // A case prepared for forward_backward also runs the forward alone (bench's
  // forward-only variants); one prepared for the forward cannot do more.
  bool set_mode(Mode m) override;
  // The portable check (tuner/levels.h): problems small enough to emulate
  // (kPortableMaxFlops) keep their host inputs for it (reference::emulate_attention).
  std::optional<std::vector<std::pair<std::string, std::string>>> emulated_digests(const Variant& v, double max_flops,
                                                                                   std::string* why) override;

 private:
  void launch(const AttentionVariant& v, Mode m, const DeviceBytes& ws);
  std::vector<float> download(const DeviceBytes& b, size_t count) const;

  AttentionProblem p_;
  Mode mode_;
  bool has_backward_ = false;  // dO, dQ, dK, dV allocated
  DeviceInfo dev_;
  size_t nq_ = 0, nk_ = 0, nrows_ = 0;  // elements of Q-shaped, K-shaped tensors; LSE rows
  DeviceBytes Q_, K_, V_, dO_, O_, dQ_, dK_, dV_;
  DeviceBuffer<float> lse_;
  DeviceBytes flush_;
  DeviceDigester digester_;
  std::optional<AttentionHostInputs> host_;  // the inputs of a problem small enough to emulate
};

}  // namespace detfuse::tuner
