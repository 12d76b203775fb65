// CUDA-event timer: time a region of device work on one stream.
//   EventTimer t; t.start(stream); ...launches...; float ms = t.stop_ms(stream);
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/cuda_check.h"

namespace detfuse {

class EventTimer {
 public:
  EventTimer() {
    DETFUSE_CUDA_CHECK(cudaEventCreate(&start_));
    DETFUSE_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(cudaStream_t stream = nullptr) { DETFUSE_CUDA_CHECK(cudaEventRecord(start_, stream)); }
  // Records the stop event, waits for it and returns the elapsed milliseconds.
  float stop_ms(cudaStream_t stream = nullptr) {
    record_stop(stream);
    return wait_ms();
  }
  // The two halves of stop_ms: the stop event recorded (the host is then free
  // while the GPU runs what was launched, e.g. to read the clock), then waited for.
  void record_stop(cudaStream_t stream = nullptr) { DETFUSE_CUDA_CHECK(cudaEventRecord(stop_, stream)); }
  float wait_ms() {
    DETFUSE_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.f;
    DETFUSE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace detfuse
