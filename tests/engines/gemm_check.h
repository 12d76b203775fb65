// Device-side checks shared by the fp32 and bf16 engine tests. Each check
// takes a `launch(GemmParams, epilogue)` callable (a generic lambda that
// instantiates the engine for the epilogue it is handed), builds host
// operands, uploads them in the engine's input type, poisons the outputs with
// 0xFF bytes, runs, and compares against a float64 GEMM of the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/host_bf16.h"
#include "kernels/flce/gemm.cuh"
#include "tests/engines/engine_test_util.h"

namespace detfuse::engine_test {

// How operands are made for one engine.
struct OperandRules {
  bool bf16 = false;      // upload as bf16 bits (values rounded to bf16 on the host)
  int ld_multiple = 1;    // leading dimensions rounded up to this (8 for the bf16 engine)
  float fill = std::numeric_limits<float>::quiet_NaN();  // padding / offset fill
  size_t off_unit = 1;    // Shape::off is multiplied by this (8 keeps bf16 bases 16-byte aligned)
  double tol = 1e-5;      // relative norm error bound
};

// Device copy of an operand (fp32, or bf16 bits in uint16_t).
struct DeviceOperand {
  DeviceBuffer<float> f32;
  DeviceBuffer<uint16_t> bf16;
  const void* ptr = nullptr;  // the operand's base (allocation + off)
};

inline DeviceOperand upload_operand(const HostOperand& h, bool bf16) {
  DeviceOperand d;
  if (bf16) {
    d.bf16.upload(to_bf16_bits(h.data));
    d.ptr = d.bf16.data() + h.off;
  } else {
    d.f32.upload(h.data);
    d.ptr = d.f32.data() + h.off;
  }
  return d;
}

inline flce::GemmParams params_for(int M, int N, int K, const HostOperand& A, const DeviceOperand& dA,
                                   const HostOperand& B, const DeviceOperand& dB, int splits = 1, int kps = 0) {
  flce::GemmParams p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.A = dA.ptr;
  p.lda = A.ld;
  p.B = dB.ptr;
  p.ldb = B.ld;
  p.splits = splits;
  p.k_per_split = kps;
  return p;
}

inline uint32_t seed_of(const Shape& s, Major am, Major bm) {
  return uint32_t(s.M * 7919 + s.N * 104729 + s.K * 31 + s.pad * 3 + s.off + (am == Major::K ? 5 : 0) +
                  (bm == Major::K ? 11 : 0));
}

// Plain store: C = A B^T, every element written, nothing outside [M, N).
template <class Launch>
void check_store(const Shape& s, Major am, Major bm, const OperandRules& r, Launch&& launch) {
  SCOPED_TRACE(shape_name(s) + " A=" + major_name(am) + " B=" + major_name(bm));
  std::mt19937 rng(seed_of(s, am, bm));
  HostOperand A = make_operand(s.M, s.K, am, s.pad, s.off * r.off_unit, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  HostOperand B = make_operand(s.N, s.K, bm, s.pad, s.off * r.off_unit, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  DeviceOperand dA = upload_operand(A, r.bf16), dB = upload_operand(B, r.bf16);
  const int64_t ldc = s.N + 3;
  DeviceBuffer<float> C(std::max<size_t>(1, size_t(s.M) * ldc));
  C.fill_bytes(0xFF);
  launch(params_for(s.M, s.N, s.K, A, dA, B, dB), flce::EpiStore<float>{C.data(), ldc});
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = C.download();
  const std::vector<double> ref = ref_gemm(A, B, s.M, s.N, 0, s.K);
  EXPECT_EQ(count_nonfinite(out, ldc, s.M, s.N), 0) << "elements not written (poison left)";
  EXPECT_EQ(count_touched_padding(out, ldc, s.M, s.N), 0) << "elements written outside [M, N)";
  const double err = rel_norm_error(out, ldc, ref, s.M, s.N);
  if (s.K == 0) {
    EXPECT_EQ(err, 0.0) << "K == 0 must give exact zeros";
  } else {
    EXPECT_LT(err, r.tol);
  }
}

// The odd shapes every (config, layout) pair is run on.
inline std::vector<Shape> odd_shapes() {
  return {
      {1, 131, 77, 0, 0},     // one row, prime N, K not a multiple of 4 or 8
      {131, 1, 1, 0, 0},      // one column, K = 1
      {1, 1, 1, 0, 0},        // a single element
      {257, 131, 77, 3, 1},   // odd ld, misaligned bases: scalar path
      {200, 300, 129, 4, 0},  // ld > extent, multiple of 4: float4 path with ragged edges
      {128, 128, 64, 0, 0},   // exact tiles
      {130, 262, 515, 0, 0},  // K-major ld odd, MN-major ld % 4 == 2
      {96, 72, 1000, 8, 0},   // many k slices
      {67, 45, 0, 0, 0},      // K == 0: epilogue gets 0
  };
}

// Split-K with atomics: C zeroed, every split adds; compare to the full sum.
template <class Launch>
void check_split_atomic(Major am, Major bm, int M, int N, int K, int splits, int kps, const OperandRules& r,
                        Launch&& launch) {
  SCOPED_TRACE("atomic splits=" + std::to_string(splits) + " kps=" + std::to_string(kps));
  std::mt19937 rng(uint32_t(M * 13 + N * 17 + K + splits));
  HostOperand A = make_operand(M, K, am, 1, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  HostOperand B = make_operand(N, K, bm, 1, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  DeviceOperand dA = upload_operand(A, r.bf16), dB = upload_operand(B, r.bf16);
  const int64_t ldc = N;
  DeviceBuffer<float> C(size_t(M) * ldc);
  C.fill_bytes(0);
  launch(params_for(M, N, K, A, dA, B, dB, splits, kps), flce::EpiAtomic{C.data(), ldc});
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = C.download();
  EXPECT_EQ(count_nonfinite(out, ldc, M, N), 0);
  EXPECT_LT(rel_norm_error(out, ldc, ref_gemm(A, B, M, N, 0, K), M, N), r.tol);
}

// Split-K into partials: every slice written (also empty splits, with 0) and
// equal to its own k range's sum.
template <class Launch>
void check_split_partial(Major am, Major bm, int M, int N, int K, int splits, int kps, const OperandRules& r,
                         Launch&& launch) {
  SCOPED_TRACE("partials splits=" + std::to_string(splits) + " kps=" + std::to_string(kps));
  std::mt19937 rng(uint32_t(M * 19 + N * 23 + K + splits));
  HostOperand A = make_operand(M, K, am, 2, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  HostOperand B = make_operand(N, K, bm, 2, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  DeviceOperand dA = upload_operand(A, r.bf16), dB = upload_operand(B, r.bf16);
  const int64_t ldc = N + 1, stride = int64_t(M) * ldc + 5;
  DeviceBuffer<float> P(size_t(splits) * stride);
  P.fill_bytes(0xFF);
  launch(params_for(M, N, K, A, dA, B, dB, splits, kps), flce::EpiPartial{P.data(), ldc, stride});
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> all = P.download();
  for (int s = 0; s < splits; ++s) {
    SCOPED_TRACE("split " + std::to_string(s));
    const std::vector<float> slice(all.begin() + size_t(s) * stride, all.begin() + size_t(s + 1) * stride);
    const int k0 = std::min(K, s * kps), k1 = std::min(K, (s + 1) * kps);
    EXPECT_EQ(count_nonfinite(slice, ldc, M, N), 0) << "elements not written";
    EXPECT_EQ(count_touched_padding(slice, ldc, M, N), 0);
    const double err = rel_norm_error(slice, ldc, ref_gemm(A, B, M, N, k0, k1), M, N);
    if (k1 <= k0)
      EXPECT_EQ(err, 0.0) << "an empty split must write exact zeros";
    else
      EXPECT_LT(err, r.tol);
  }
}

// Owning accumulation: first chunk overwrites (poisoned C), second adds.
template <class Launch>
void check_accumulate(Major am, Major bm, int M, int N, int K, const OperandRules& r, Launch&& launch) {
  SCOPED_TRACE("accumulate");
  std::mt19937 rng(uint32_t(M * 29 + N * 31 + K));
  HostOperand A1 = make_operand(M, K, am, 0, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  HostOperand B1 = make_operand(N, K, bm, 0, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  HostOperand A2 = make_operand(M, K, am, 0, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  HostOperand B2 = make_operand(N, K, bm, 0, 0, rng, 1.f, r.bf16, r.ld_multiple, r.fill);
  DeviceOperand dA1 = upload_operand(A1, r.bf16), dB1 = upload_operand(B1, r.bf16);
  DeviceOperand dA2 = upload_operand(A2, r.bf16), dB2 = upload_operand(B2, r.bf16);
  const int64_t ldc = N + 2;
  DeviceBuffer<float> C(size_t(M) * ldc);
  C.fill_bytes(0xFF);
  launch(params_for(M, N, K, A1, dA1, B1, dB1), flce::EpiAccumulate{C.data(), ldc, 1});
  launch(params_for(M, N, K, A2, dA2, B2, dB2), flce::EpiAccumulate{C.data(), ldc, 0});
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = C.download();
  std::vector<double> ref = ref_gemm(A1, B1, M, N, 0, K);
  const std::vector<double> ref2 = ref_gemm(A2, B2, M, N, 0, K);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += ref2[i];
  EXPECT_EQ(count_nonfinite(out, ldc, M, N), 0);
  EXPECT_EQ(count_touched_padding(out, ldc, M, N), 0);
  EXPECT_LT(rel_norm_error(out, ldc, ref, M, N), r.tol);
}

// Logits store with softcap (large-magnitude inputs so the cap bites).
template <class Launch>
void check_logits(Major am, Major bm, int M, int N, int K, float softcap, const OperandRules& r, Launch&& launch) {
  SCOPED_TRACE("logits softcap=" + std::to_string(softcap));
  std::mt19937 rng(uint32_t(M * 37 + N * 41 + K));
  HostOperand A = make_operand(M, K, am, 0, 0, rng, 2.f, r.bf16, r.ld_multiple, r.fill);
  HostOperand B = make_operand(N, K, bm, 0, 0, rng, 2.f, r.bf16, r.ld_multiple, r.fill);
  DeviceOperand dA = upload_operand(A, r.bf16), dB = upload_operand(B, r.bf16);
  const int64_t ldc = N + 1;
  DeviceBuffer<float> C(size_t(M) * ldc);
  C.fill_bytes(0xFF);
  launch(params_for(M, N, K, A, dA, B, dB), flce::EpiStoreLogits{C.data(), ldc, softcap});
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = C.download();
  std::vector<double> ref = ref_gemm(A, B, M, N, 0, K);
  if (softcap > 0)
    for (double& v : ref) v = double(softcap) * std::tanh(v / double(softcap));
  EXPECT_EQ(count_nonfinite(out, ldc, M, N), 0);
  EXPECT_EQ(count_touched_padding(out, ldc, M, N), 0);
  EXPECT_LT(rel_norm_error(out, ldc, ref, M, N), r.tol);
}

}  // namespace detfuse::engine_test
