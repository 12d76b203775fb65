// `detfuse verify` (any family): run variants K times on seeded (or user-supplied) inputs,
// digest every output, and compare with the digests the store holds for the
// same GPU, build, variant, problem and seed. Also the config-invariance
// classes: variants whose outputs are bitwise identical.
#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "db/store.h"
#include "kernels/common/device_info.h"
#include "kernels/registry.h"
#include "tuner/family.h"

namespace detfuse::tuner {

inline constexpr const char* kReproduced = "reproduced";
inline constexpr const char* kMismatch = "mismatch";
inline constexpr const char* kNotStored = "not stored";

// Pure comparison of local repeats with stored ones. Reproduced when, for
// every output both have, all local digests and all stored digests are one and
// the same value. `why` lists the differences.
bool digests_reproduce(const db::Determinism& local, const std::vector<db::DigestRow>& stored,
                       std::vector<std::string>* why = nullptr);

struct VerifyRow {
  std::string variant;
  std::string group;  // config group (tuner/levels.h)
  std::string status;  // reproduced, mismatch, not stored, cannot_run, error
  std::string reason;
  db::Determinism local;
  std::optional<db::StoredDigests> stored;
  std::vector<std::string> differences;
};

// Variants grouped by the digests of their first repeat over every output;
// a variant whose own repeats differ is put alone and flagged.
struct InvarianceClass {
  std::vector<std::string> variants;
  std::vector<std::pair<std::string, std::string>> digests;  // (output, hex) of repeat 0
  bool self_consistent = true;
};
std::vector<InvarianceClass> invariance_classes(const std::vector<VerifyRow>& rows);

struct VerifyOptions {
  Problem problem;
  std::vector<std::string> variants;  // names (already resolved from "best")
  int repeats = 5;
  int64_t seed = 0;
  HostInputs inputs;  // --inputs (the family's input type): nothing stored to compare with; empty: seeded
  std::optional<std::filesystem::path> dump_dir;
  // --levels: the sm_count and portable checks too (tuner/levels.h). The
  // config check is always made among the variants of the call; each row's
  // local.checks and local.level hold the outcome (nothing is stored).
  bool levels = false;
};

// The config check over the rows (tuner/levels.h config_checks), written
// into each row's local.checks and local.level. Pure.
void apply_config_checks(std::vector<VerifyRow>& rows);

// store may be null. Runs on the current device `dev`.
std::vector<VerifyRow> run_verify(const db::Store* store, const Registry& reg, const DeviceInfo& dev,
                                  const VerifyOptions& o, std::ostream* progress);

}  // namespace detfuse::tuner
