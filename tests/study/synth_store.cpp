// study_synth_store DB [flce|attention|both]: synthetic contention studies
// (the full plans over a registry named like the real one, outcomes from
// SynthMeasurer and SynthAttentionMeasurer) written with the real schema, for
// the plot script's CPU test. Default both: the FLCE study, then attention's.
// Each study at two levels of the SM-count axis: a 16-SM slice (the fixed
// point of the contention axis) and the whole device (132 SMs, every problem).
#include <iostream>

#include "tuner/study/contention_study.h"
#include "tests/study/synth.h"

int main(int argc, char** argv) {
  using namespace detfuse;
  const std::string which = argc == 3 ? argv[2] : "both";
  if (argc < 2 || argc > 3 || (which != "flce" && which != "attention" && which != "both")) {
    std::cerr << "usage: study_synth_store DB [flce|attention|both]\n";
    return 2;
  }
  try {
    db::Store store(argv[1]);
    const Registry reg = testing::synth_registry();
    auto measurer = std::make_unique<tuner::FamilyMeasurers>();
    auto flce_owned = std::make_unique<testing::SynthMeasurer>();
    testing::SynthMeasurer* flce = flce_owned.get();
    measurer->add(Family::flce, std::move(flce_owned));
    measurer->add(Family::attention, std::make_unique<testing::SynthAttentionMeasurer>());
    bool ok = true;
    for (Family f : {Family::flce, Family::attention}) {
      if (which != "both" && which != to_string(f)) continue;
      std::vector<std::string> names;
      if (f == Family::flce)
        for (const auto& v : reg.flce()) names.push_back(v.desc.name);
      else
        for (const auto& v : reg.attention()) names.push_back(v.desc.name);
      study::ContentionOptions co;
      co.family = f;
      co.sms = {16, 0};
      for (const auto& v : reg.flce())
        if (v.desc.study_only) co.study_variants.push_back(v.desc.name);
      study::StudyRunOptions o;
      o.plan = study::plan_contention(names, co);
      o.command_line = std::string("study_synth_store ") + to_string(f);
      for (int level : o.plan.sms) {
        o.sms = level;
        o.run_sms = level > 0 ? level : testing::synth_device().sm_count;
        flce->sms = int(*o.run_sms);
        const auto r = study::run_contention_study(store, reg, testing::synth_device(), *measurer, o);
        std::cout << r.note << "\n";
        ok = ok && r.tune.status == db::kRunComplete;
      }
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "study_synth_store: " << e.what() << "\n";
    return 1;
  }
}
