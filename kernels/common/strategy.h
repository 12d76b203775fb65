// The gradient-accumulation strategies (DESIGN.md, "Gradient-accumulation
// strategies"), shared by both families: FLCE's dW and attention's dQ. The
// token of each is the strategy field of a variant name
// (family.dtype.engine.STRATEGY.params) and of the store's variant rows.
// Plain C++: the registry, the tuner and the CLI include it.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace detfuse {

enum class Strategy {
  owning,        // a block owns a gradient tile and walks the reduction in order
  atomic,        // fp32 atomics in arrival order: bits may change run to run
  partials,      // bounded workspace of partials, summed in a fixed order
  ordered,       // adds in a fixed order enforced by a per-tile semaphore
  forward_only,  // no backward, hence nothing to accumulate (token "fwd")
};

inline constexpr std::array<Strategy, 5> kStrategies = {Strategy::owning, Strategy::atomic, Strategy::partials,
                                                        Strategy::ordered, Strategy::forward_only};

constexpr const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::owning: return "owning";
    case Strategy::atomic: return "atomic";
    case Strategy::partials: return "partials";
    case Strategy::ordered: return "ordered";
    case Strategy::forward_only: return "fwd";
  }
  return "?";
}

// What the strategy itself promises run to run (the tuner still checks it).
constexpr bool is_deterministic(Strategy s) { return s != Strategy::atomic; }

// The strategy of a name token; nullopt for a token that is none of them.
inline std::optional<Strategy> parse_strategy(std::string_view token) {
  for (Strategy s : kStrategies)
    if (token == to_string(s)) return s;
  return std::nullopt;
}

// "owning, atomic, partials, ordered or fwd", for messages.
inline std::string known_strategies_text() {
  std::string t;
  for (size_t i = 0; i < kStrategies.size(); ++i)
    t += std::string(i == 0 ? "" : i + 1 == kStrategies.size() ? " or " : ", ") + to_string(kStrategies[i]);
  return t;
}

}  // namespace detfuse
