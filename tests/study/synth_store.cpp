// study_synth_store DB: a synthetic contention study (the full plan over a
// registry named like the real one, outcomes from SynthMeasurer) written with
// the real schema, for the plot script's CPU test.
#include <iostream>

#include "experiments/study/contention_study.h"
#include "tests/study/synth.h"

int main(int argc, char** argv) {
  using namespace detfuse;
  if (argc != 2) {
    std::cerr << "usage: study_synth_store DB\n";
    return 2;
  }
  try {
    db::Store store(argv[1]);
    const Registry reg = testing::synth_registry();
    std::vector<std::string> names;
    for (const auto& v : reg.flce()) names.push_back(v.desc.name);
    testing::SynthMeasurer m;
    study::StudyRunOptions o;
    o.plan = study::plan_contention(names, {});
    o.command_line = "study_synth_store";
    const auto r = study::run_contention_study(store, reg, testing::synth_device(), m, o);
    std::cout << r.note << "\n";
    return r.tune.status == db::kRunComplete ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "study_synth_store: " << e.what() << "\n";
    return 1;
  }
}
