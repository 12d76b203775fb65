// JSON output of the command (--json) through nlohmann::json (Debian's
// nlohmann-json3-dev): every string is escaped by the library, numbers are
// written in round-trip form, and non-finite numbers become null. Strings that
// are not valid UTF-8 (a GPU or file name is whatever bytes it is) are written
// with U+FFFD in place of the bad bytes instead of failing, so the text is
// always valid JSON.
#pragma once

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

namespace detfuse::tuner {

using Json = nlohmann::json;

// A number, or null when it is NaN or infinite (JSON has neither).
inline Json json_number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

// One line of JSON text (no trailing newline).
inline std::string json_text(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace detfuse::tuner
