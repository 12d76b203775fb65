// GPU tests of the tuner's real pieces, in-process (run them on the H200;
// they skip with the reason where there is no GPU): the GPU measurer (full
// check, the sampled-rows + reduced-N check, the soft cap cutting repeats and
// timing), `verify` (not stored, then reproduced against a store), `bench`
// (rows, JSON), the tuned C++ API (tuned, nearest, heuristic; its run
// reproduces the stored digests bit for bit) and the heuristic's choice
// (can run, correct against the float64 reference).
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "kernels/flce/device_case.h"
#include "kernels/flce/flce.h"
#include "kernels/registry.h"
#include "reference/inputs.h"
#include "tests/gpu_test.h"
#include "tests/tuner/fakes.h"
#include "tuner/bench.h"
#include "tuner/flce_measurer.h"
#include "tuner/json.h"
#include "tuner/records.h"
#include "tuner/tuned.h"
#include "tuner/tuner.h"
#include "tuner/verify.h"

namespace detfuse::tuner {
namespace {

const FlceVariant* first_variant(DType dtype, const std::string& strategy) {
  for (const auto& v : builtin_registry().flce())
    if (v.desc.dtype == dtype && v.desc.strategy == strategy) return &v;
  return nullptr;
}

struct Gpu : ::testing::Test {
  DeviceInfo dev;
  void SetUp() override {
    DETFUSE_REQUIRE_GPU();
    DETFUSE_CUDA_CHECK(cudaSetDevice(0));
    dev = query_device(0);
  }
};

TEST_F(Gpu, MeasurerChecksRepeatsAndTimesARealVariant) {
  const FlceVariant* v = first_variant(DType::bf16, "owning");
  ASSERT_NE(v, nullptr);
  FlceGpuMeasurer m(dev);
  m.prepare(testing::problem(257, 200, 4099), FlceMode::forward_backward, 0);
  MeasureControl ctl;
  ctl.repeats = 4;
  const VariantOutcome o = m.measure(*v, ctl);
  ASSERT_EQ(o.status, db::kResultOk) << o.reason;
  ASSERT_TRUE(o.correctness && o.determinism && o.timing);
  EXPECT_TRUE(o.correctness->pass);
  EXPECT_EQ(o.correctness->checked_what.rfind("full", 0), 0u) << o.correctness->checked_what;
  EXPECT_EQ(o.determinism->repeats, 4);
  EXPECT_EQ(o.determinism->digests.size(), 16u);  // 4 outputs x 4 repeats
  EXPECT_EQ(o.determinism->level, db::kLevelRunToRun);  // owning: deterministic by design
  EXPECT_GE(o.timing->samples_ms.size(), 5u);
  EXPECT_GT(o.timing->median_ms, 0);
  EXPECT_TRUE(o.cut.empty()) << o.cut;
  // With NVML (the driver's library): the SM clock and NVML's clock-event
  // reasons read while the samples ran (gpu_idle never counted).
  if (o.timing->clock_max_mhz > 0) {
    EXPECT_LE(o.timing->clock_min_mhz, o.timing->clock_max_mhz);
    ASSERT_TRUE(o.timing->clock_events.has_value()) << "driver without the clock-event query";
    EXPECT_EQ(*o.timing->clock_events & int64_t(clock_event::kGpuIdle), 0);
  }
  std::cout << v->desc.name << ": " << o.timing->median_ms << " ms, " << o.timing->samples_ms.size()
            << " samples, SM " << o.timing->clock_min_mhz << "-" << o.timing->clock_max_mhz << " MHz, clock events "
            << (!o.timing->clock_events        ? std::string("unknown")
                : *o.timing->clock_events == 0 ? std::string("none")
                                               : clock_event_names(uint64_t(*o.timing->clock_events)))
            << "\n";
}

TEST_F(Gpu, MeasurerSampledRowsAndReducedNPath) {
  // A check policy that calls 257x200x4099 "large": sampled rows at full size
  // plus every output at a reduced N, as the Llama-3 head is checked.
  const FlceVariant* v = first_variant(DType::bf16, "owning");
  ASSERT_NE(v, nullptr);
  CheckPolicy cp;
  cp.full_check_macs = 1e6;
  cp.reduced_macs = 64.0 * 200 * 4099;
  FlceGpuMeasurer m(dev, cp);
  m.prepare(testing::problem(257, 200, 4099), FlceMode::forward_backward, 3);
  const VariantOutcome o = m.measure(*v, MeasureControl{});
  ASSERT_EQ(o.status, db::kResultOk) << o.reason;
  EXPECT_EQ(o.correctness->checked_what.rfind("rows:16 sampled at full size", 0), 0u) << o.correctness->checked_what;
  EXPECT_NE(o.correctness->checked_what.find("N=64"), std::string::npos) << o.correctness->checked_what;
  EXPECT_TRUE(o.correctness->errors.count("dX@rows"));
  EXPECT_TRUE(o.correctness->pass);
}

TEST_F(Gpu, SoftCapCutsRepeatsAndTimingToTheirMinimums) {
  const FlceVariant* v = first_variant(DType::bf16, "owning");
  ASSERT_NE(v, nullptr);
  FlceGpuMeasurer m(dev);
  m.prepare(testing::problem(1024, 512, 8192), FlceMode::forward_backward, 0);
  MeasureControl ctl;
  ctl.repeats = 1000000000;
  ctl.time_cap_s = 0;  // spent at once: only the minimums run
  const VariantOutcome o = m.measure(*v, ctl);
  ASSERT_EQ(o.status, db::kResultOk) << o.reason;
  EXPECT_EQ(o.determinism->repeats, 2);
  EXPECT_EQ(o.timing->samples_ms.size(), 5u);
  EXPECT_NE(o.cut.find("repeats 2 of 1000000000"), std::string::npos) << o.cut;
  std::cout << "cut: " << o.cut << "\n";
}

TEST_F(Gpu, VerifyNotStoredThenReproducedAgainstATunedStore) {
  const FlceProblem p = testing::problem(256, 256, 1000);
  const FlceVariant* v = first_variant(DType::bf16, "owning");
  ASSERT_NE(v, nullptr);
  VerifyOptions vo;
  vo.problem = p;
  vo.variants = {v->desc.name};
  vo.repeats = 3;
  auto rows = run_verify(nullptr, builtin_registry(), dev, vo, nullptr);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, kNotStored) << rows[0].reason;
  EXPECT_TRUE(rows[0].differences.empty());
  EXPECT_EQ(rows[0].local.digests.size(), 12u);
  // Tune it into a store, then verify reproduces the stored digests.
  testing::TempDir tmp;
  {
    db::Store store(tmp / "t.db");
    FlceGpuMeasurer m(dev);
    Tuner t(store, builtin_registry(), dev, m);
    t.set_stop([] { return false; });
    TuneOptions o;
    o.problems = {p};
    o.variants = {v->desc.name};
    ASSERT_EQ(t.run(o).status, db::kRunComplete);
  }
  db::Store ro = db::Store::open_read_only(tmp / "t.db");
  rows = run_verify(&ro, builtin_registry(), dev, vo, nullptr);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, kReproduced) << rows[0].reason;
}

TEST_F(Gpu, BenchRowsAndJson) {
  const FlceVariant* v = first_variant(DType::bf16, "owning");
  ASSERT_NE(v, nullptr);
  BenchOptions bo;
  bo.problem = testing::problem(1024, 1024, 8192);
  bo.variants = {v->desc.name};
  bo.repeats = 3;
  const BenchReport r = run_bench(builtin_registry(), dev, bo, nullptr);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].status, "ok") << r.rows[0].reason;
  EXPECT_GT(r.rows[0].stats.median, 0);
  EXPECT_EQ(r.rows[0].distinct.at("dW"), 1);
  const Json j = Json::parse(bench_json(r));
  EXPECT_EQ(j.at("variants").at(0).at("name"), v->desc.name);
  EXPECT_GT(j.at("variants").at(0).at("median_ms").get<double>(), 0);
  std::cout << format_bench_table(r);
}

TEST_F(Gpu, TunedApiChoosesTheStoredBestAndReproducesItsDigests) {
  const FlceProblem p = testing::problem(256, 256, 1000);
  std::vector<std::string> names;
  for (const auto& v : builtin_registry().flce())
    if (v.desc.dtype == DType::bf16 && v.desc.strategy == "owning" && names.size() < 3) names.push_back(v.desc.name);
  ASSERT_GE(names.size(), 2u);
  testing::TempDir tmp;
  const auto path = tmp / "t.db";
  std::string best;
  {
    db::Store store(path);
    FlceGpuMeasurer m(dev);
    Tuner t(store, builtin_registry(), dev, m);
    t.set_stop([] { return false; });
    TuneOptions o;
    o.problems = {p};
    o.variants = names;
    const TuneReport rep = t.run(o);
    ASSERT_TRUE(rep.problems.at(0).best);
    best = rep.problems[0].best->variant;
  }
  clear_selection_cache();
  FlceChoice c = choose_flce(p, FlceMode::forward_backward, tuned(path));
  EXPECT_EQ(c.source, ChoiceSource::tuned) << c.note;
  ASSERT_NE(c.variant, nullptr);
  EXPECT_EQ(c.variant->desc.name, best);
  // Nearest shape: 512 rows were never tuned.
  c = choose_flce(testing::problem(512, 256, 1000), FlceMode::forward_backward, tuned(path));
  EXPECT_EQ(c.source, ChoiceSource::nearest) << c.note;
  // No store: the heuristic, with a note.
  c = choose_flce(p, FlceMode::forward_backward, tuned(tmp / "missing.db"));
  EXPECT_EQ(c.source, ChoiceSource::heuristic);
  EXPECT_NE(c.note.find("no tuning database"), std::string::npos) << c.note;
  // Running through the API on the tuned seed's inputs gives the stored bits.
  const reference::FlceInputs in = reference::make_flce_inputs(p, 0);
  flce::DeviceCase dc(p, in.X, in.W, in.y, in.dloss);
  dc.poison();
  c = forward_backward(p, dc.args(FlceMode::forward_backward), nullptr, tuned(path));
  DETFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(c.source, ChoiceSource::tuned);
  const flce::DeviceCase::Digests d = dc.digests(FlceMode::forward_backward);
  db::Store ro = db::Store::open_read_only(path);
  int compared = 0;
  for (const auto& run : ro.list_runs())
    for (const auto& r : ro.run_results(run.id))
      if (r.variant_name == best && r.record.determinism)
        for (const auto& dr : r.record.determinism->digests)
          if (dr.repeat == 0) {
            const Digest mine = dr.output == "loss" ? d.loss : dr.output == "lse" ? d.lse : dr.output == "dX" ? d.dX : d.dW;
            EXPECT_EQ(mine.hex(), dr.digest) << dr.output;
            ++compared;
          }
  EXPECT_EQ(compared, 4);
}

TEST_F(Gpu, HeuristicChoiceRunsAndIsCorrect) {
  for (const FlceProblem& p : {testing::problem(1, 64, 1009), testing::problem(257, 200, 4099),
                               testing::problem(2048, 1024, 32000), testing::problem(300, 128, 5000, DType::f32)}) {
    const FlceVariant& v = flce::heuristic_variant(p, FlceMode::forward_backward, dev);
    EXPECT_FALSE(v.can_run(p, FlceMode::forward_backward, dev)) << v.desc.name << " refuses " << p.shape();
    EXPECT_EQ(v.desc.dtype, p.dtype);
    EXPECT_TRUE(v.desc.deterministic) << v.desc.name;
    // The measured default (kernels/flce/flce.cpp): for bf16 the hybrid wgmmalt owning variant where it
    // runs (an H100/H200 with the wgmma engine built), else cuBLASLt owning; FMA owning for fp32.
    bool hybrid = false;
    for (const auto& h : builtin_registry().flce())
      if (h.desc.name == flce::kHybridDefault) hybrid = !h.can_run(p, FlceMode::forward_backward, dev);
    EXPECT_EQ(v.desc.name, p.dtype != DType::bf16 ? "flce.fp32.fma.owning.bm128_bn128_bk8_tm8_tn8_mb1024"
                           : hybrid               ? flce::kHybridDefault
                                                  : "flce.bf16.cublaslt.owning.mb1024");
    FlceGpuMeasurer m(dev);
    m.prepare(p, FlceMode::forward_backward, 1);
    MeasureControl ctl;
    ctl.repeats = 2;
    const VariantOutcome o = m.measure(v, ctl);
    EXPECT_EQ(o.status, db::kResultOk) << p.shape() << " " << v.desc.name << ": " << o.reason;
    std::cout << p.shape() << " " << to_string(p.dtype) << ": heuristic " << v.desc.name << " "
              << (o.timing ? o.timing->median_ms : 0.0) << " ms\n";
  }
}

TEST_F(Gpu, ShapeBeyondDeviceMemoryIsRefusedBeforeAllocation) {
  // Valid dimensions whose inputs and outputs exceed the device: a named error
  // from the tuner's check, nothing allocated, nothing written.
  FlceProblem p = testing::problem(int64_t(1) << 22, 16384, 1 << 16);  // dW alone is 4 GiB; X 128 GiB as bf16
  testing::TempDir tmp;
  db::Store store(tmp / "t.db");
  FlceGpuMeasurer m(dev);
  Tuner t(store, builtin_registry(), dev, m);
  TuneOptions o;
  o.problems = {p};
  try {
    t.run(o);
    ADD_FAILURE() << "tuned a shape beyond " << dev.total_memory_bytes << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::runtime);
    const std::string w = e.what();
    EXPECT_TRUE(w.find("device memory") != std::string::npos || w.find("host memory") != std::string::npos) << w;
  }
  EXPECT_TRUE(store.list_runs().empty());
}

}  // namespace
}  // namespace detfuse::tuner
