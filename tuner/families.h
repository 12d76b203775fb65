// Every family the tuner knows (tuner/family.h says how one joins).
#pragma once

#include "tuner/attention_family.h"
#include "tuner/family.h"
#include "tuner/flce_family.h"
#include "tuner/json.h"

namespace detfuse::tuner {

// A problem from its JSON form (Problem::to_json, with "family"): what a
// supervised worker receives. invalid_argument on an unknown family.
Problem problem_from_json(const Json& j);

}  // namespace detfuse::tuner
