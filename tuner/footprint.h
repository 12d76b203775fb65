// Memory a problem needs at least, computed with overflow-safe arithmetic and
// checked before anything is allocated, so a shape that cannot fit is a named
// error (exit 1) instead of std::bad_alloc or a failed cudaMalloc deep inside.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/common/device_info.h"
#include "kernels/common/problem.h"

namespace detfuse::tuner {

struct FlceFootprint {
  uint64_t host_bytes = 0;    // float32 inputs X, W, y, dloss and the float64 reference's dW and rows
  uint64_t device_bytes = 0;  // inputs and outputs on the device (FlceProblem::device_io_bytes), no workspace
};

// nullopt when a byte count overflows 64 bits.
std::optional<FlceFootprint> flce_footprint(const FlceProblem& p);

// Attention: host float32 Q, K, V, dO (the float64 reference runs on a reduced
// problem, tuner/attention_measurer.h); device Q, K, V, dO, O, dQ, dK, dV in
// the dtype and the fp32 LSE.
std::optional<FlceFootprint> attention_footprint(const AttentionProblem& p);
void check_fits(const AttentionProblem& p, const DeviceInfo* dev);

// Physical memory of this machine (sysconf), 0 when unknown.
uint64_t host_memory_bytes();

// Throws detfuse::Error (runtime) naming the problem and the memory when p
// cannot fit in this machine's memory or on `dev` (dev.total_memory_bytes 0:
// the device is not checked), also when the byte count overflows 64 bits.
void check_fits(const FlceProblem& p, const DeviceInfo* dev);

}  // namespace detfuse::tuner
