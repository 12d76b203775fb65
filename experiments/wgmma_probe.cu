// Development probe for the Hopper engine alone (llm.c habit): times
// launch_gemm_wgmma on the three FLCE products at a full shape, as cuBLAS
// computes them (logits X W^T [N, V] fp32, dX = G W [N, D], dW = G^T X [V, D]),
// for each registered wgmma configuration, beside three cuBLASLt GEMMs timed
// in the same process. Random bf16 data, L2 flushed before every timing,
// median of the repetitions. The logits are timed with and without the fused
// row statistics, so the cost of that epilogue shows, and with the ex16
// epilogue (bf16 exp(z - m_tile), statistics and target logit: the `ex16` and
// `wgmmalt` variants' logits GEMM). Then the logits alone, bf16 out, ex16 and
// ex16 with softcap 30 (Gemma-2's final logits), for the TMA-epilogue
// configurations (ot1) beside the register epilogue of the same tile
// ("logits ..." rows). A config substring (e.g. c22) keeps only
// the configurations whose name holds it.
//   wgmma_probe N D V [reps] [config substring]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/baseline/three_gemms.h"
#include "kernels/common/buffer.h"
#include "kernels/common/timer.h"
#include "kernels/flce/wgmma_configs.h"

using namespace detfuse;
using namespace detfuse::flce;

namespace {

struct Bufs {
  DeviceBytes X, W, G, Z, S, Y, dX, dW, flush;
};

double time_ms(const std::function<void()>& f, Bufs& b, int reps) {
  f();  // warm-up (descriptor encode, occupancy query, module load)
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  EventTimer t;
  for (int r = 0; r < reps; ++r) {
    DETFUSE_CUDA_CHECK(cudaMemsetAsync(b.flush.get(), 0, b.flush.bytes()));
    t.start();
    f();
    ms.push_back(t.stop_ms());
  }
  return baseline::median_ms(ms);
}

template <class Cfg>
void probe(const char* name, int N, int D, int V, Bufs& b, int reps, const char* only) {
  if (only && !std::strstr(name, only)) return;
  const double f = 2.0 * N * double(D) * V;
  GemmParams lg;  // logits: A = X [N, D] (K), B = W [V, D] (K)
  lg.M = N; lg.N = V; lg.K = D; lg.A = b.X.get(); lg.lda = D; lg.B = b.W.get(); lg.ldb = D;
  GemmParams dx;  // dX: A = G [N, V] (K), B = W (MN)
  dx.M = N; dx.N = D; dx.K = V; dx.A = b.G.get(); dx.lda = V; dx.B = b.W.get(); dx.ldb = D;
  GemmParams dw;  // dW: A = G^T (MN), B = X (MN)
  dw.M = V; dw.N = D; dw.K = N; dw.A = b.G.get(); dw.lda = V; dw.B = b.X.get(); dw.ldb = D;
  const int64_t tiles = (V + Cfg::BN - 1) / Cfg::BN;
  auto* Z = static_cast<float*>(b.Z.get());
  const double t_logits = time_ms([&] {
    launch_gemm_wgmma<Cfg, Major::K, Major::K>(lg, to_wg_epilogue(EpiStoreLogits{Z, V, 0.f}), 1 << 30, nullptr);
  }, b, reps);
  const double t_stats = time_ms([&] {
    launch_gemm_wgmma<Cfg, Major::K, Major::K>(
        lg, to_wg_epilogue(EpiLogitsStats{Z, V, 0.f, static_cast<float*>(b.S.get()), tiles}), 1 << 30, nullptr);
  }, b, reps);
  const double t_ex16 = time_ms([&] {
    launch_gemm_wgmma<Cfg, Major::K, Major::K>(
        lg,
        to_wg_epilogue(EpiLogitsExp16{static_cast<__nv_bfloat16*>(b.Z.get()), V, 0.f, static_cast<float*>(b.S.get()),
                                      tiles, static_cast<const int64_t*>(b.Y.get())}),
        1 << 30, nullptr);
  }, b, reps);
  const double t_dx = time_ms([&] {
    launch_gemm_wgmma<Cfg, Major::K, Major::MN>(dx, to_wg_epilogue(EpiStore<float>{static_cast<float*>(b.dX.get()), D}),
                                                8, nullptr);
  }, b, reps);
  const double t_dw = time_ms([&] {
    launch_gemm_wgmma<Cfg, Major::MN, Major::MN>(
        dw, to_wg_epilogue(EpiAccumulate{static_cast<float*>(b.dW.get()), D, 1}), 1, nullptr);
  }, b, reps);
  std::printf("%-28s logits %7.2f ms (%5.0f TF/s)  +stats %7.2f ms  ex16 %7.2f ms (%5.0f)  dX %7.2f ms (%5.0f)  "
              "dW %7.2f ms (%5.0f)  sum %7.2f\n",
              name, t_logits, f / t_logits / 1e9, t_stats, t_ex16, f / t_ex16 / 1e9, t_dx, f / t_dx / 1e9, t_dw,
              f / t_dw / 1e9, t_stats + t_dx + t_dw);
  std::fflush(stdout);
}

// The logits product alone with the two bf16 epilogues (store_bf16: bf16 out,
// as gemm_cutlass_probe times CUTLASS; ex16), for the configurations that
// instantiate only the logits layout (EPI_TMA, ot1) beside those they compare
// with. Names start with "logits" (select them with that substring).
template <class Cfg>
void probe_logits(const char* name, int N, int D, int V, Bufs& b, int reps, const char* only) {
  if (only && !std::strstr(name, only)) return;
  const double f = 2.0 * N * double(D) * V;
  GemmParams lg;
  lg.M = N; lg.N = V; lg.K = D; lg.A = b.X.get(); lg.lda = D; lg.B = b.W.get(); lg.ldb = D;
  const int64_t tiles = (V + Cfg::BN - 1) / Cfg::BN;
  auto* E = static_cast<__nv_bfloat16*>(b.Z.get());
  const double t_bf16 = time_ms([&] {
    launch_gemm_wgmma<Cfg, Major::K, Major::K>(lg, to_wg_epilogue(EpiStore<__nv_bfloat16>{E, V}), 1 << 30, nullptr);
  }, b, reps);
  auto ex16 = [&](float cap) {
    return time_ms([&] {
      launch_gemm_wgmma<Cfg, Major::K, Major::K>(
          lg,
          to_wg_epilogue(EpiLogitsExp16{E, V, cap, static_cast<float*>(b.S.get()), tiles,
                                        static_cast<const int64_t*>(b.Y.get())}),
          1 << 30, nullptr);
    }, b, reps);
  };
  const double t_ex16 = ex16(0.f);
  // With Gemma-2's final-logit softcap (30): the epilogue's tanh on every value.
  const double t_cap = ex16(30.f);
  std::printf("%-32s bf16 out %7.2f ms (%5.0f TF/s)  ex16 %7.2f ms (%5.0f TF/s)  ex16 cap30 %7.2f ms (%5.0f TF/s)\n",
              name, t_bf16, f / t_bf16 / 1e9, t_ex16, f / t_ex16 / 1e9, t_cap, f / t_cap / 1e9);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: wgmma_probe N D V [reps] [config substring]\n");
    return 2;
  }
  const int N = std::atoi(argv[1]), D = std::atoi(argv[2]), V = std::atoi(argv[3]);
  const int reps = argc > 4 ? std::atoi(argv[4]) : 5;
  const char* only = argc > 5 ? argv[5] : nullptr;
  if (N <= 0 || D <= 0 || V <= 0 || D % 8 != 0 || reps <= 0) {
    std::fprintf(stderr, "wgmma_probe: N, D, V and reps must be positive and D a multiple of 8\n");
    return 2;
  }
  FlceProblem p;
  p.N = N; p.D = D; p.V = V;
  auto base = baseline::time_three_gemms(p, 2, reps);
  const double f = 2.0 * N * double(D) * V;
  std::printf("shape %d,%d,%d: cuBLASLt logits %.2f ms (%.0f TF/s)  dX %.2f ms (%.0f)  dW %.2f ms (%.0f)  sum %.2f\n", N,
              D, V, base.logits_ms, f / base.logits_ms / 1e9, base.dx_ms, f / base.dx_ms / 1e9, base.dw_ms,
              f / base.dw_ms / 1e9, base.total_ms());
  Bufs b;
  b.X.allocate(size_t(N) * D * 2);
  b.W.allocate(size_t(V) * D * 2);
  b.G.allocate(size_t(N) * V * 2);
  b.Z.allocate(size_t(N) * V * 4);
  b.S.allocate(size_t(N) * ((V + 63) / 64) * 16);
  b.Y.allocate(size_t(N) * 8);
  DETFUSE_CUDA_CHECK(cudaMemset(b.Y.get(), 0, b.Y.bytes()));  // targets: column 0
  b.dX.allocate(size_t(N) * D * 4);
  b.dW.allocate(size_t(V) * D * 4);
  b.flush.allocate(size_t(100) << 20);
  baseline::fill_random(b.X.get(), DType::bf16, uint64_t(N) * D, 1u, 1.0f);
  baseline::fill_random(b.W.get(), DType::bf16, uint64_t(V) * D, 2u, 0.05f);
  baseline::fill_random(b.G.get(), DType::bf16, uint64_t(N) * V, 3u, 1e-3f);
  probe<WgCoop256c2>("coop bm128_bn256_c2_st4", N, D, V, b, reps, only);
  probe<WgCoop256c1>("coop bm128_bn256_c1_st4", N, D, V, b, reps, only);
  probe<WgCoop128c2>("coop bm128_bn128_c2_st6", N, D, V, b, reps, only);
  probe<WgPing128c2>("ping bm128_bn128_c2_st6", N, D, V, b, reps, only);
  probe<WgPing128c1>("ping bm128_bn128_c1_st6", N, D, V, b, reps, only);
  probe<WgPing128c22>("ping bm128_bn128_c22_st6", N, D, V, b, reps, only);
  probe<WgCoop256c22>("coop bm128_bn256_c22_st4", N, D, V, b, reps, only);
  // The TMA epilogue (ot1) beside the register epilogue of the same tile.
  probe_logits<WgPing128c2>("logits ping bm128_bn128_c2_st6", N, D, V, b, reps, only);
  probe_logits<WgPing128c2t>("logits ping bm128_bn128_c2_st5_ot1", N, D, V, b, reps, only);
  probe_logits<WgPing128c22>("logits ping bm128_bn128_c22_st6", N, D, V, b, reps, only);
  probe_logits<WgPing128c22t>("logits ping bm128_bn128_c22_st5_ot1", N, D, V, b, reps, only);
  // The cooperative tiles with the TMA store (two passes through one 32 KiB
  // shared tile, 4 stages) beside their register epilogues (session 10).
  probe_logits<WgCoop256c2>("logits coop bm128_bn256_c2_st4", N, D, V, b, reps, only);
  probe_logits<WgCoop256c2t>("logits coop bm128_bn256_c2_st4_ot1", N, D, V, b, reps, only);
  probe_logits<WgCoop256x128c12>("logits coop bm256_bn128_c12_st4", N, D, V, b, reps, only);
  probe_logits<WgCoop256x128c12t>("logits coop bm256_bn128_c12_st4_ot1", N, D, V, b, reps, only);
  return 0;
}
