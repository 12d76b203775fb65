// `detfuse bench flce`: per variant, the median and spread of forward_backward
// time, TFLOP/s (6*N*D*V), the ratio to three cuBLAS GEMMs of the same shape
// timed in the same run (kernels/baseline), peak extra device memory, and the
// number of distinct dW digests (and of every output) over K repeats. No
// correctness check and no database: that is `tune` and `verify`.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "db/records.h"
#include "kernels/common/device_info.h"
#include "kernels/registry.h"
#include "tuner/flce_gpu.h"
#include "tuner/stats.h"

namespace detfuse::tuner {

struct BenchOptions {
  FlceProblem problem;
  std::vector<std::string> variants;  // empty: every variant of the dtype
  int repeats = 5;                    // K for the digests
  int64_t seed = 0;
  std::optional<FlceHostInputs> inputs;  // --inputs; else seeded inputs
  RepetitionPolicy reps;
  bool baseline = true;  // time the three cuBLAS GEMMs
};

struct BenchRow {
  std::string variant, strategy;
  bool deterministic_by_design = false;
  std::string status = "ok";  // ok, cannot_run, error
  std::string reason;
  db::Timing timing;
  SampleStats stats;
  double ratio_to_gemms = 0;  // median / three-GEMM total; 0 when no baseline
  std::map<std::string, int> distinct;  // per output, over K repeats
};

struct BenchBaseline {
  bool available = false;
  double logits_ms = 0, dx_ms = 0, dw_ms = 0, total_ms = 0;
  std::string note;
};

struct BenchReport {
  FlceProblem problem;
  DeviceInfo device;
  int repeats = 0;
  BenchBaseline gemms;
  std::vector<BenchRow> rows;
};

BenchReport run_bench(const Registry& reg, const DeviceInfo& dev, const BenchOptions& o, std::ostream* progress);

std::string format_bench_table(const BenchReport& r);
std::string bench_json(const BenchReport& r);

}  // namespace detfuse::tuner
