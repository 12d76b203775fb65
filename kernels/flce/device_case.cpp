#include "kernels/flce/device_case.h"

#include "kernels/common/cuda_check.h"
#include "kernels/common/host_bf16.h"

namespace detfuse::flce {

namespace {

void upload_as(DeviceBytes& dst, const std::vector<float>& src, DType t) {
  dst.allocate(src.size() * dtype_bytes(t));
  if (src.empty()) return;
  if (t == DType::f32) {
    DETFUSE_CUDA_CHECK(cudaMemcpy(dst.get(), src.data(), dst.bytes(), cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> bits = to_bf16_bits(src);
    DETFUSE_CUDA_CHECK(cudaMemcpy(dst.get(), bits.data(), dst.bytes(), cudaMemcpyHostToDevice));
  }
}

std::vector<float> download_as(const DeviceBytes& src, size_t count, DType t) {
  if (t == DType::f32) {
    std::vector<float> out(count);
    if (count) DETFUSE_CUDA_CHECK(cudaMemcpy(out.data(), src.get(), count * 4, cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<uint16_t> bits(count);
  if (count) DETFUSE_CUDA_CHECK(cudaMemcpy(bits.data(), src.get(), count * 2, cudaMemcpyDeviceToHost));
  return from_bf16_bits(bits);
}

void check_size(size_t got, size_t want, const char* what) {
  if (got != want)
    throw invalid_argument(std::string(what) + ": expected " + std::to_string(want) + " elements, got " +
                           std::to_string(got));
}

}  // namespace

DeviceCase::DeviceCase(const FlceProblem& p, const std::vector<float>& X, const std::vector<float>& W,
                       const std::vector<int64_t>& y, const std::vector<float>& dloss)
    : p_(p) {
  p.validate();
  // Repeated runs of an accumulating problem would sum onto their own dW, so
  // the repeats the tuner and the tests compare would differ by design: it is
  // measured as its plain twin (tuner::FamilyTraits<FlceProblem>::record).
  if (p.accumulate_dW)
    throw invalid_argument("accumulate_dW: a device case runs the plain problem (repeats would sum onto their own dW)");
  const size_t N = size_t(p.N), D = size_t(p.D), V = size_t(p.V);
  check_size(X.size(), N * D, "X");
  check_size(W.size(), V * D, "W");
  check_size(y.size(), N, "y");
  if (p.reduction == Reduction::none) check_size(dloss.size(), N, "dloss");
  upload_as(X_, X, p.dtype);
  upload_as(W_, W, p.dtype);
  y_.upload(y);
  if (!dloss.empty()) dloss_.upload(dloss);
  loss_.resize(loss_count());
  lse_.resize(N);
  dX_.allocate(N * D * dtype_bytes(p.grad_dtype));
  dW_.allocate(V * D * dtype_bytes(p.grad_dtype));
}

FlceArgs DeviceCase::args(FlceMode mode) const {
  FlceArgs a;
  a.X = X_.get();
  a.W = W_.get();
  a.y = y_.data();
  a.dloss = p_.reduction == Reduction::none ? dloss_.data() : nullptr;
  if (mode != FlceMode::backward) {
    a.loss = loss_.data();
    a.lse = lse_.data();
  } else {
    a.lse_in = lse_.data();
  }
  if (mode != FlceMode::forward) {
    a.dX = dX_.get();
    a.dW = dW_.get();
  }
  return a;
}

void DeviceCase::set_lse(const std::vector<float>& lse) { lse_.upload(lse); }

void DeviceCase::poison(cudaStream_t stream) {
  loss_.fill_bytes(0xFF, stream);
  lse_.fill_bytes(0xFF, stream);
  DETFUSE_CUDA_CHECK(cudaMemsetAsync(dX_.get(), 0xFF, dX_.bytes(), stream));
  DETFUSE_CUDA_CHECK(cudaMemsetAsync(dW_.get(), 0xFF, dW_.bytes(), stream));
  DETFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<float> DeviceCase::loss() const { return loss_.download(); }
std::vector<float> DeviceCase::lse() const { return lse_.download(); }
std::vector<float> DeviceCase::dX() const { return download_as(dX_, size_t(p_.N * p_.D), p_.grad_dtype); }
std::vector<float> DeviceCase::dW() const { return download_as(dW_, size_t(p_.V * p_.D), p_.grad_dtype); }

DeviceCase::Digests DeviceCase::digests(FlceMode mode) const {
  Digests d;
  if (mode != FlceMode::backward) {
    d.loss = digest_device(loss_.data(), loss_.bytes());
    d.lse = digest_device(lse_.data(), lse_.bytes());
  }
  if (mode != FlceMode::forward) {
    d.dX = digest_device(dX_.get(), dX_.bytes());
    d.dW = digest_device(dW_.get(), dW_.bytes());
  }
  return d;
}

}  // namespace detfuse::flce
