// Registration of the Hopper attention forward variants (attention_wgmma.h):
// attention.bf16.wgmma.fwd.br128_bc128_st2_d128 and friends. Forward only:
// can_run refuses the backward mode until the wgmma backward exists.
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/attention/wgmma/attention_wgmma.h"
#include "kernels/common/error.h"
#include "kernels/registry.h"

namespace detfuse::attention::wg {
namespace {

constexpr const char* kForwardOnly = "forward only: the wgmma backward is not implemented yet";

template <class Cfg>
std::optional<std::string> can_run(const AttentionProblem& p, AttentionMode mode, const DeviceInfo& dev) {
  if (mode == AttentionMode::backward) return std::string(kForwardOnly);
  if (p.dtype != DType::bf16)
    return std::string("bf16 only: the wgmma forward has no ") + to_string(p.dtype) + " path";
  if (p.d != Cfg::D)
    return "head dim d=" + std::to_string(p.d) + ": this variant is built for d=" + std::to_string(Cfg::D) +
           " (the wgmma forward supports d=64 and d=128)";
  // sm_90a code runs on compute capability 9.0 exactly (H100, H200, GH200).
  if (dev.compute_capability() != 90)
    return "wgmma/TMA code is built for sm_90a and runs on compute capability 9.0 only, device has " +
           std::to_string(dev.compute_capability());
  if (auto e = p.dim_error()) return e;
  if (p.H > 65535 || p.B > 65535)
    return "H and B must be at most 65535 (grid y and z), got H=" + std::to_string(p.H) +
           " B=" + std::to_string(p.B);
  // TMA: a tensor map's strides must stay below 2^40 bytes (the batch stride is the largest).
  const int64_t lim = int64_t(1) << 40;
  if (p.H * p.Sq * p.d * 2 >= lim || p.Hkv * p.Sk * p.d * 2 >= lim)
    return std::string("H*Sq*d and Hkv*Sk*d bf16 bytes must stay below 2^40 (TMA stride limit)");
  // The dynamic SharedStorage plus the 1 KB of static shared memory the
  // kernel's 1024-byte aligned declaration reserves (cuobjdump -res-usage).
  const size_t smem = fwd_smem_bytes<Cfg>() + 1024;
  if (dev.max_smem_per_block_optin > 0 && smem > size_t(dev.max_smem_per_block_optin))
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, device allows " +
           std::to_string(dev.max_smem_per_block_optin);
  return std::nullopt;
}

template <class Cfg>
void add(Registry& r) {
  AttentionVariant v;
  v.desc.family = Family::attention;
  v.desc.dtype = DType::bf16;
  v.desc.engine = "wgmma";
  v.desc.strategy = "fwd";
  v.desc.params = {{"br", Cfg::BR}, {"bc", Cfg::BC}, {"st", Cfg::STAGES}, {"ov", Cfg::OVERLAP ? 1 : 0},
                    {"pp", Cfg::PINGPONG ? 1 : 0}, {"d", Cfg::D}};
  v.desc.name = VariantDesc::canonical_name(v.desc.family, v.desc.dtype, v.desc.engine, v.desc.strategy, v.desc.params);
  // Every output element is written once by one thread after a fixed sequence
  // of key blocks: no atomics, nothing depends on timing.
  v.desc.deterministic = true;
  v.desc.summary = "Hopper forward: TMA producer + 2 consumer warpgroups (wgmma SS QK^T, RS PV), " +
                   std::to_string(Cfg::BR) + "x" + std::to_string(Cfg::BC) + " tiles, " +
                   std::to_string(Cfg::STAGES) + "-stage K/V ring" +
                   (Cfg::OVERLAP ? ", softmax overlapped with P V in each warpgroup" : "") +
                   (Cfg::PINGPONG ? ", warpgroups take turns on the tensor cores" : "") + "; forward only";
  v.can_run = can_run<Cfg>;
  v.workspace_bytes = [](const AttentionProblem&, AttentionMode) -> size_t { return 0; };
  v.launch = [](const AttentionProblem& p, AttentionMode mode, const AttentionArgs& a, cudaStream_t s) {
    if (mode == AttentionMode::backward) throw Error(std::string("attention wgmma: ") + kForwardOnly);
    launch_fwd<Cfg>(p, a, s);
  };
  r.add(std::move(v));
}

}  // namespace
}  // namespace detfuse::attention::wg

namespace detfuse {

void register_attention_wgmma(Registry& r) {
  using namespace attention::wg;
  add<FwdD128Bc128St2>(r);
  add<FwdD128Bc176St2>(r);
  add<FwdD128Bc80St3>(r);
  add<FwdD64Bc128St3>(r);
  add<FwdD64Bc192St2>(r);
  add<FwdD64Bc64St4>(r);
  add<FwdD128Bc128St2Ov>(r);
  add<FwdD64Bc128St3Ov>(r);
  add<FwdD128Bc128St2OvPp>(r);
}

}  // namespace detfuse
