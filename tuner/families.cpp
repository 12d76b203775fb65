#include "tuner/families.h"

namespace detfuse::tuner {

Problem problem_from_json(const Json& j) {
  // One line per family.
  switch (parse_family(j.at("family").get<std::string>())) {
    case Family::flce: return FamilyTraits<FlceProblem>::from_json(j);
    case Family::attention: return FamilyTraits<AttentionProblem>::from_json(j);
  }
  throw invalid_argument("problem JSON: unknown family");
}

}  // namespace detfuse::tuner
