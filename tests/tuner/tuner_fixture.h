// A gtest fixture for the tuner on the fakes (fakes.h): a registry, a device,
// a scripted FLCE measurer on a controllable clock, a temporary directory for
// the store, and tune() running one Tuner over them.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <utility>

#include "tests/tuner/fakes.h"
#include "tuner/tuner.h"

namespace detfuse::testing {

struct TunerFixture : ::testing::Test {
  TempDir tmp;
  Registry reg = fake_registry();
  DeviceInfo dev = fake_device();
  FakeClock clock;
  FakeMeasurer meas;
  std::ostringstream progress;

  void SetUp() override { meas.clock = &clock; }

  tuner::TuneReport tune(db::Store& store, tuner::TuneOptions o, std::function<bool()> stop = [] { return false; }) {
    tuner::Tuner t(store, reg, dev, meas, &progress, clock.fn());
    t.set_stop(std::move(stop));
    return t.run(o);
  }
};

}  // namespace detfuse::testing
