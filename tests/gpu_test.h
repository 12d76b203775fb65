// Helpers for tests that need a CUDA device: DETFUSE_REQUIRE_GPU() skips the
// test with the reason when none is present (CI has no GPU).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/common/device_info.h"

#define DETFUSE_REQUIRE_GPU()                                             \
  do {                                                                    \
    std::string detfuse_why_;                                             \
    if (::detfuse::cuda_device_count(&detfuse_why_) == 0)                 \
      GTEST_SKIP() << "no CUDA device available (" << detfuse_why_ << ")"; \
  } while (0)
