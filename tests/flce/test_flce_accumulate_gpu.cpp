// GPU tests of FlceProblem::accumulate_dW (dW += the gradient into a caller's
// fp32 main grad, Python's main_grad=): every registered FLCE variant that
// runs, each strategy and engine, at a shape of several chunks' worth of row
// blocks, forward_backward:
//   - onto zeros: the same dW values as the plain problem's fp32 dW (the first
//     chunk adds onto 0 where the plain run stores: equal floats, +0 and -0
//     aside), and the same dX (bf16, the input dtype: accumulate_dW types dW
//     only);
//   - onto a start M0: M0 + dW within fp32 rounding of the float64 sum;
//   - deterministic variants: two runs from the same start, identical bits.
// Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/buffer.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/error.h"
#include "kernels/flce/device_case.h"
#include "kernels/flce/flce.h"
#include "kernels/registry.h"
#include "reference/inputs.h"
#include "tests/gpu_test.h"

namespace detfuse::flce {
namespace {

FlceProblem problem(DType t) {
  FlceProblem p;
  p.N = 333;  // odd: a partial row block
  p.D = 136;
  p.V = 1031;
  p.dtype = t;
  p.grad_dtype = t;  // dX in the input dtype; dW fp32 whatever it says
  return p;
}

// Runs v on the case's inputs with accumulate_dW onto `start`; returns dW.
std::vector<float> run_onto(const FlceVariant& v, const DeviceCase& c, const std::vector<float>& start,
                            std::vector<float>* dX = nullptr) {
  FlceProblem p = c.problem();
  p.accumulate_dW = true;
  DeviceBuffer<float> dW;
  dW.upload(start);
  // dX in the case's own buffer (its dtype is grad_dtype: the input dtype here).
  FlceArgs a = c.args(FlceMode::forward_backward);
  a.dW = dW.data();
  run(v, p, FlceMode::forward_backward, a);
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  if (dX) *dX = c.dX();
  return dW.download();
}

TEST(FlceAccumulateGpu, EveryVariantSumsOntoTheCallersFp32Dw) {
  DETFUSE_REQUIRE_GPU();
  const DeviceInfo dev = query_device(0);
  int checked = 0;
  for (DType t : {DType::bf16, DType::f32}) {
    const FlceProblem p = problem(t);
    const auto in = reference::make_flce_inputs(p, 7);
    FlceProblem pf = p;
    pf.grad_dtype = DType::f32;  // the plain twin's fp32 dW to compare with
    DeviceCase plain(pf, in.X, in.W, in.y);
    DeviceCase acc(p, in.X, in.W, in.y);
    DeviceCase plain_dx(p, in.X, in.W, in.y);  // dX in the input dtype, as the accumulating run writes it
    std::vector<float> start(size_t(p.V * p.D));
    for (size_t i = 0; i < start.size(); ++i) start[i] = float(0.01 * reference::normal_at(99, i));
    const std::vector<float> zeros(start.size(), 0.f);
    for (const FlceVariant& v : builtin_registry().flce()) {
      if (v.desc.dtype != t || v.desc.study_only) continue;
      if (v.can_run(p, FlceMode::forward_backward, dev)) continue;
      SCOPED_TRACE(v.desc.name);
      run(v, pf, FlceMode::forward_backward, plain.args(FlceMode::forward_backward));
      run(v, p, FlceMode::forward_backward, plain_dx.args(FlceMode::forward_backward));
      DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> ref = plain.dW(), ref_dx = plain_dx.dX();

      std::vector<float> dx;
      const std::vector<float> onto0 = run_onto(v, acc, zeros, &dx);
      if (v.desc.deterministic) {
        size_t bad = 0;
        for (size_t i = 0; i < ref.size(); ++i) bad += onto0[i] != ref[i];  // -0 == +0
        EXPECT_EQ(bad, 0u) << "dW elements onto zeros differing from the plain run";
        EXPECT_EQ(std::memcmp(dx.data(), ref_dx.data(), dx.size() * sizeof(float)), 0) << "dX";
      }
      const std::vector<float> got = run_onto(v, acc, start);
      double err = 0, norm = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const double want = double(start[i]) + double(ref[i]);
        err = std::max(err, std::fabs(double(got[i]) - want));
        norm = std::max(norm, std::fabs(want));
      }
      // fp32 sums of a few terms of this size: a few ulps of the largest value
      // (atomic variants add in another order than the plain run).
      EXPECT_LE(err, 1e-5 * norm) << "max |dW - (start + plain dW)|, max |start + plain dW| " << norm;
      if (v.desc.deterministic) {
        const std::vector<float> again = run_onto(v, acc, start);
        EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0) << "two runs onto one start";
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no FLCE variant could run";
}

TEST(FlceAccumulateGpu, ADeviceCaseRefusesAnAccumulatingProblem) {
  DETFUSE_REQUIRE_GPU();
  FlceProblem p = problem(DType::bf16);
  p.accumulate_dW = true;
  const auto in = reference::make_flce_inputs(p, 1);
  try {
    DeviceCase c(p, in.X, in.W, in.y);
    FAIL() << "expected invalid_argument";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("accumulate_dW"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace detfuse::flce
