// RAII device memory. DeviceBuffer<T> owns count elements allocated with
// cudaMalloc (never managed memory) and frees them in its destructor; it is
// movable, not copyable. Allocation failure throws detfuse::Error naming the size.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/cuda_check.h"

namespace detfuse {

class DeviceBytes {
 public:
  DeviceBytes() = default;
  explicit DeviceBytes(size_t bytes) { allocate(bytes); }
  ~DeviceBytes() { release(); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  DeviceBytes(DeviceBytes&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBytes& operator=(DeviceBytes&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  void allocate(size_t bytes) {
    release();
    if (bytes == 0) return;
    cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      (void)cudaGetLastError();
      throw Error("cannot allocate " + std::to_string(bytes) + " bytes of device memory: " +
                  cudaGetErrorString(err));
    }
    bytes_ = bytes;
  }
  void release() noexcept {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : mem_(count * sizeof(T)), count_(count) {}
  T* data() const { return static_cast<T*>(mem_.get()); }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void resize(size_t count) {
    if (count != count_) {
      mem_.allocate(count * sizeof(T));
      count_ = count;
    }
  }

  void upload(const T* host, size_t count, cudaStream_t stream = nullptr) {
    resize(count);
    DETFUSE_CUDA_CHECK(cudaMemcpyAsync(data(), host, count * sizeof(T), cudaMemcpyHostToDevice, stream));
    DETFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  void upload(const std::vector<T>& host, cudaStream_t stream = nullptr) { upload(host.data(), host.size(), stream); }
  std::vector<T> download(cudaStream_t stream = nullptr) const {
    std::vector<T> host(count_);
    if (count_) {
      DETFUSE_CUDA_CHECK(cudaMemcpyAsync(host.data(), data(), bytes(), cudaMemcpyDeviceToHost, stream));
      DETFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return host;
  }
  // Fill every byte with `byte` (0xFF poisons floats as NaN before a check run).
  void fill_bytes(int byte, cudaStream_t stream = nullptr) {
    if (count_) DETFUSE_CUDA_CHECK(cudaMemsetAsync(data(), byte, bytes(), stream));
  }

 private:
  DeviceBytes mem_;
  size_t count_ = 0;
};

}  // namespace detfuse
