// `detfuse bench FAMILY` (any family): per variant, the median and spread of
// the forward_backward time (and of the forward alone for families that time
// it: attention), TFLOP/s (DESIGN.md conventions), the ratio to the family's
// baseline timed in the same run (FLCE: three cuBLAS GEMMs of the shape,
// kernels/baseline), peak extra device memory, and the number of distinct
// digests of the family's headline gradient (FLCE dW, attention dQ) and of every
// output over K repeats. No correctness check and no database: that is `tune`
// and `verify`.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "db/records.h"
#include "kernels/common/device_info.h"
#include "kernels/registry.h"
#include "tuner/family.h"
#include "tuner/stats.h"

namespace detfuse::tuner {

struct BenchOptions {
  Problem problem;
  std::vector<std::string> variants;  // empty: every variant of the family and dtype
  int repeats = 5;                    // K for the digests
  int64_t seed = 0;
  HostInputs inputs;                  // --inputs (the family's input type); empty: seeded inputs
  RepetitionPolicy reps;
  bool baseline = true;  // time the family's baseline (FLCE: three cuBLAS GEMMs)
};

struct BenchRow {
  std::string variant, strategy;
  bool deterministic_by_design = false;
  std::string status = "ok";  // ok, cannot_run, error
  std::string reason;
  db::Timing timing;  // forward_backward (no samples: a forward-only row)
  SampleStats stats;
  std::optional<db::Timing> forward;  // the forward alone (families whose bench_modes time it)
  SampleStats forward_stats;
  // Set when the variant refuses forward_backward but runs the forward (a
  // forward-only kernel): its row has the forward's time and digests only.
  std::string forward_only;
  double ratio_to_gemms = 0;  // median / three-GEMM total; 0 when no baseline
  std::map<std::string, int> distinct;  // per output, over K repeats
};

struct BenchReport {
  Problem problem;
  DeviceInfo device;
  int repeats = 0;
  BenchBaseline gemms;
  std::vector<BenchRow> rows;
};

BenchReport run_bench(const Registry& reg, const DeviceInfo& dev, const BenchOptions& o, std::ostream* progress);

std::string format_bench_table(const BenchReport& r);
std::string bench_json(const BenchReport& r);

}  // namespace detfuse::tuner
