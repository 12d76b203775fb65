// GPU tests of supervised measurement (run them on the H200): variants that
// fault on purpose (tests/tuner_gpu/faulting_variants.h) tuned between real
// ones. Each faulting variant must be recorded `crashed` with its reason (the
// CUDA error, or "timeout:" for the endless kernel), the worker restarted, and
// every real variant after it measured `ok` in the new worker. This process
// never initialises CUDA (the workers do): the GPU check runs in a child.
// Skips with the reason where there is no GPU.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <sstream>

#include "cli/common.h"
#include "kernels/registry.h"
#include "tests/tuner/fakes.h"
#include "tests/tuner_gpu/faulting_variants.h"
#include "tests/tuner_gpu/gpu_fork_check.h"
#include "tuner/supervisor.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {
namespace {

// Four real bf16 variants of the build that can run `p` (by name order of the
// registry), interleaved with the faults: real, oob, real, trap, real, hang, real.
Registry faults_between_real_ones(const FlceProblem& p, std::vector<std::string>* real_names) {
  Registry r;
  std::vector<const FlceVariant*> real;
  for (const auto& v : builtin_registry().flce())
    if (v.desc.dtype == p.dtype && v.desc.strategy == "owning" && real.size() < 4) real.push_back(&v);
  const char* faults[] = {"oob", "trap", "hang"};
  for (size_t i = 0; i < real.size(); ++i) {
    r.add(*real[i]);
    real_names->push_back(real[i]->desc.name);
    if (i < 3) r.add(testing::faulting_flce(faults[i], p.dtype));
  }
  return r;
}

TEST(SupervisedGpu, FaultingVariantsAreRecordedAndTuningGoesOn) {
  DETFUSE_REQUIRE_GPU_NO_INIT();
  const FlceProblem p = testing::problem(256, 256, 1000);
  std::vector<std::string> real;
  const Registry reg = faults_between_real_ones(p, &real);
  ASSERT_EQ(real.size(), 4u) << "this build has fewer than 4 bf16 owning variants";
  SupervisedMeasurer sup(reg, [] { return cli::gpu_worker_setup("0"); });
  const DeviceInfo dev = sup.start();
  std::cout << "device: " << dev.name << " " << dev.uuid << "\n";
  testing::TempDir tmp;
  db::Store store(tmp / "t.db");
  std::ostringstream progress;
  Tuner t(store, reg, dev, sup, &progress);
  t.set_stop([] { return false; });
  TuneOptions o;
  o.problems = {p};
  o.variant_time_cap_s = 5;
  o.kill_after_s = 20;  // the real variants take well under a second here
  const TuneReport rep = t.run(o);
  std::cout << progress.str();
  EXPECT_EQ(rep.status, db::kRunComplete);
  std::map<std::string, db::StoredResult> rows;
  for (const auto& r : store.run_results(rep.run_id)) rows[r.variant_name] = r;
  ASSERT_EQ(rows.size(), 7u);
  for (const auto& n : real) {
    EXPECT_EQ(rows[n].record.status, db::kResultOk) << n << ": " << rows[n].record.reason;
    ASSERT_TRUE(rows[n].record.correctness) << n;
    EXPECT_TRUE(rows[n].record.correctness->pass) << n;
  }
  auto reason_of = [&](const std::string& fault) {
    for (const auto& [name, r] : rows)
      if (name.find("_" + fault + "1") != std::string::npos) {
        EXPECT_EQ(r.record.status, db::kResultCrashed) << name;
        std::cout << name << ": " << r.record.status << ": " << r.record.reason << "\n";
        return r.record.reason;
      }
    ADD_FAILURE() << "no row for " << fault;
    return std::string();
  };
  EXPECT_NE(reason_of("oob").find("cudaErrorIllegalAddress"), std::string::npos);
  const std::string trap = reason_of("trap");
  EXPECT_NE(trap.find("cudaError"), std::string::npos) << trap;
  EXPECT_NE(trap.find("context was lost"), std::string::npos) << trap;
  EXPECT_EQ(reason_of("hang").rfind("timeout:", 0), 0u);
  // One worker at the start and one after each of the three faults.
  EXPECT_EQ(sup.workers_started(), 4);
  ASSERT_TRUE(rep.problems.at(0).best);
}

TEST(SupervisedGpu, WorkerReportsTheDeviceAndAnEmptyVisibleSetIsAClearError) {
  DETFUSE_REQUIRE_GPU_NO_INIT();
  const Registry& reg = builtin_registry();
  SupervisedMeasurer sup(reg, [] { return cli::gpu_worker_setup("0"); });
  const DeviceInfo dev = sup.start();
  EXPECT_FALSE(dev.uuid.empty());
  EXPECT_GT(dev.sm_count, 0);
  SupervisedMeasurer bad(reg, [] { return cli::gpu_worker_setup("999"); });
  try {
    bad.start();
    ADD_FAILURE() << "started on GPU 999";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("--gpu 999"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace detfuse::tuner
