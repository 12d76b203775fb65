// Host time of one attention call and of its parts (issue 16: the host's share of the timed window).
// Each figure is microseconds of host wall time per call while the GPU is held by a spin kernel queued
// first, so launches queue and never wait for the GPU: median of 7 batches of N calls.
//   attention_host_cost [B H Hkv Sq Sk d causal(0/1)]     (default 4 32 32 4096 4096 64 1)
// What it times: the CUDA runtime calls a launch makes (cudaGetDevice, the driver entry point CUTLASS
// looks up for every TMA descriptor, the descriptor's encoding, cudaFuncSetAttribute, an empty launch,
// a memset), the heuristic and can_run, a registered variant's launch alone, attention::run, and the C
// ABI's detfuse_attention_run (heuristic and by name), forward and backward.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capi/detfuse_c.h"
#include "kernels/attention/attention.h"
#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/registry.h"

using namespace detfuse;

namespace {

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
__global__ void empty_kernel() {}

// Median over 7 batches of the host microseconds per call of fn, each batch of n calls queued behind
// a spin kernel of ~spin_ms so that no launch waits for the GPU.
template <class Fn>
double host_us(int n, Fn&& fn, double spin_ms = 60) {
  for (int w = 0; w < 3; ++w) fn();
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> v;
  for (int b = 0; b < 7; ++b) {
    spin_kernel<<<1, 1>>>(static_cast<long long>(spin_ms * 2.0e6));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    v.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void line(const char* what, double us) { std::printf("  %-64s %9.2f us\n", what, us); }

void check_c(int32_t rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "%s: %s\n", what, detfuse_last_error());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  AttentionProblem p;
  p.B = 4, p.H = 32, p.Hkv = 32, p.Sq = 4096, p.Sk = 4096, p.d = 64, p.causal = true;
  if (argc == 8) {
    p.B = std::atoll(argv[1]), p.H = std::atoll(argv[2]), p.Hkv = std::atoll(argv[3]);
    p.Sq = std::atoll(argv[4]), p.Sk = std::atoll(argv[5]), p.d = std::atoll(argv[6]);
    p.causal = std::atoi(argv[7]) != 0;
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: attention_host_cost [B H Hkv Sq Sk d causal]\n");
    return 2;
  }
  p.dtype = DType::bf16;
  p.validate();
  std::printf("attention_host_cost %s on %s\n", p.key().c_str(), cached_device(0).name.c_str());

  const size_t nq = size_t(p.B * p.H * p.Sq * p.d), nk = size_t(p.B * p.Hkv * p.Sk * p.d);
  DeviceBytes Q(nq * 2), K(nk * 2), V(nk * 2), O(nq * 2), dO(nq * 2), dQ(nq * 2), dK(nk * 2), dV(nk * 2);
  DeviceBytes L(size_t(p.B * p.H * p.Sq) * 4);
  DETFUSE_CUDA_CHECK(cudaMemset(Q.get(), 0, Q.bytes()));
  DETFUSE_CUDA_CHECK(cudaMemset(K.get(), 0, K.bytes()));
  DETFUSE_CUDA_CHECK(cudaMemset(V.get(), 0, V.bytes()));
  DETFUSE_CUDA_CHECK(cudaMemset(dO.get(), 0, dO.bytes()));

  std::printf("CUDA runtime and driver calls:\n");
  int dev = 0;
  line("cudaGetDevice", host_us(1000, [&] { cudaGetDevice(&dev); }));
  int count = 0;
  line("cudaGetDeviceCount", host_us(1000, [&] { cudaGetDeviceCount(&count); }));
  void* pfn = nullptr;
  cudaDriverEntryPointQueryResult qr;
  line("cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled) (CUTLASS, per descriptor)",
       host_us(1000, [&] { cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000,
                                                            cudaEnableDefault, &qr); }));
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pfn);
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(p.d), cuuint64_t(p.Sq), cuuint64_t(p.B * p.H)};
  const cuuint64_t strides[2] = {cuuint64_t(p.d * 2), cuuint64_t(p.Sq * p.d * 2)};
  const cuuint32_t box[3] = {cuuint32_t(p.d), 128, 1}, estr[3] = {1, 1, 1};
  line("cuTensorMapEncodeTiled (the pointer kept)", host_us(1000, [&] {
         encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, Q.get(), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
       }));
  line("cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", host_us(1000, [&] {
         cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
       }));
  line("empty kernel launch <<<1, 1>>>", host_us(200, [&] { empty_kernel<<<1, 1>>>(); }));
  line("empty kernel launch, 200 KB dynamic shared memory", host_us(200, [&] {
         empty_kernel<<<1, 1, 200 * 1024>>>();
       }));
  line("cudaMemsetAsync 4 KB", host_us(200, [&] { cudaMemsetAsync(dQ.get(), 0, 4096); }));
  line("cudaGetLastError", host_us(1000, [&] { (void)cudaGetLastError(); }));

  const Registry& reg = builtin_registry();
  const DeviceInfo& di = cached_device(0);
  std::printf("detfuse (C++), %zu attention variants registered:\n", reg.attention().size());
  const AttentionVariant* hv_f = nullptr;
  const AttentionVariant* hv_b = nullptr;
  line("cached_device(0)", host_us(1000, [&] { (void)cached_device(0); }));
  line("heuristic_variant, forward", host_us(1000, [&] {
         hv_f = &attention::heuristic_variant(p, AttentionMode::forward, di);
       }));
  line("heuristic_variant, backward", host_us(1000, [&] {
         hv_b = &attention::heuristic_variant(p, AttentionMode::backward, di);
       }));
  std::printf("  (forward %s, backward %s)\n", hv_f->desc.name.c_str(), hv_b->desc.name.c_str());
  line("registry find_attention(the backward's name)", host_us(1000, [&] {
         (void)reg.find_attention(hv_b->desc.name);
       }));
  line("can_run, forward", host_us(1000, [&] { (void)hv_f->can_run(p, AttentionMode::forward, di); }));
  line("can_run, backward", host_us(1000, [&] { (void)hv_b->can_run(p, AttentionMode::backward, di); }));
  line("workspace_bytes, backward", host_us(1000, [&] { (void)hv_b->workspace_bytes(p, AttentionMode::backward); }));
  line("p.validate()", host_us(1000, [&] { p.validate(); }));

  AttentionArgs fa;
  fa.Q = Q.get(), fa.K = K.get(), fa.V = V.get(), fa.O = O.get(), fa.lse = static_cast<float*>(L.get());
  AttentionArgs ba;
  ba.Q = Q.get(), ba.K = K.get(), ba.V = V.get(), ba.dO = dO.get(), ba.O_in = O.get();
  ba.lse_in = static_cast<const float*>(L.get());
  ba.dQ = dQ.get(), ba.dK = dK.get(), ba.dV = dV.get();
  DeviceBytes ws(std::max<size_t>(1, hv_b->workspace_bytes(p, AttentionMode::backward)));
  ba.workspace = ws.get(), ba.workspace_size = ws.bytes();
  // At most 20 calls a batch: the GPU runs none of them during the batch (the spin), so the launch
  // queue must hold them all.
  const int n = 20;
  const double spin = 100;
  line("variant.launch, forward (no checks)", host_us(n, [&] {
         hv_f->launch(p, AttentionMode::forward, fa, nullptr);
       }, spin));
  line("attention::run, forward", host_us(n, [&] {
         attention::run(*hv_f, p, AttentionMode::forward, fa, nullptr);
       }, spin));
  line("variant.launch, backward (no checks)", host_us(n, [&] {
         hv_b->launch(p, AttentionMode::backward, ba, nullptr);
       }, spin));
  line("attention::run, backward", host_us(n, [&] {
         attention::run(*hv_b, p, AttentionMode::backward, ba, nullptr);
       }, spin));

  std::printf("C ABI (libdetfuse_c.so):\n");
  detfuse_attention_problem cp;
  std::memset(&cp, 0, sizeof cp);
  cp.B = p.B, cp.H = p.H, cp.Hkv = p.Hkv, cp.Sq = p.Sq, cp.Sk = p.Sk, cp.d = p.d;
  cp.dtype = DETFUSE_DTYPE_BF16, cp.causal = p.causal ? 1 : 0;
  // The C ABI's arguments: the C++ ones above, field for field.
  auto to_c = [](const AttentionArgs& a) {
    detfuse_attention_args c;
    c.Q = a.Q, c.K = a.K, c.V = a.V, c.dO = a.dO, c.O_in = a.O_in, c.lse_in = a.lse_in, c.O = a.O, c.lse = a.lse;
    c.dQ = a.dQ, c.dK = a.dK, c.dV = a.dV, c.workspace = a.workspace, c.workspace_size = a.workspace_size;
    return c;
  };
  const detfuse_attention_args cf = to_c(fa), cb = to_c(ba);
  detfuse_selection heur;
  std::memset(&heur, 0, sizeof heur);
  heur.kind = DETFUSE_SELECT_HEURISTIC;
  detfuse_selection named_f = heur, named_b = heur;
  named_f.kind = named_b.kind = DETFUSE_SELECT_NAME;
  named_f.name = hv_f->desc.name.c_str();
  named_b.name = hv_b->desc.name.c_str();
  detfuse_choice choice;
  line("detfuse_attention_problem_key (a call that launches nothing)", host_us(1000, [&] {
         char key[512];
         check_c(detfuse_attention_problem_key(&cp, key, sizeof key), "problem_key");
       }));
  line("detfuse_attention_run forward, heuristic", host_us(n, [&] {
         check_c(detfuse_attention_run(&cp, DETFUSE_ATTENTION_FORWARD, &cf, &heur, nullptr, &choice), "fwd");
       }, spin));
  line("detfuse_attention_run forward, by name", host_us(n, [&] {
         check_c(detfuse_attention_run(&cp, DETFUSE_ATTENTION_FORWARD, &cf, &named_f, nullptr, &choice), "fwd");
       }, spin));
  line("detfuse_attention_run backward, heuristic", host_us(n, [&] {
         check_c(detfuse_attention_run(&cp, DETFUSE_ATTENTION_BACKWARD, &cb, &heur, nullptr, &choice), "bwd");
       }, spin));
  line("detfuse_attention_run backward, by name", host_us(n, [&] {
         check_c(detfuse_attention_run(&cp, DETFUSE_ATTENTION_BACKWARD, &cb, &named_b, nullptr, &choice), "bwd");
       }, spin));
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
