#include "tuner/records.h"

#include <cstdio>

#include "db/store.h"
#include "tuner/build_info.h"
#include "tuner/git_commit.h"

#ifndef DETFUSE_VERSION
#define DETFUSE_VERSION "unknown"
#endif
#ifndef DETFUSE_GIT_COMMIT
#define DETFUSE_GIT_COMMIT "unknown"
#endif
#ifndef DETFUSE_COMPILER
#define DETFUSE_COMPILER "unknown"
#endif
#ifndef DETFUSE_BUILD_FLAGS
#define DETFUSE_BUILD_FLAGS ""
#endif
#ifndef DETFUSE_BUILD_TYPE
#define DETFUSE_BUILD_TYPE ""
#endif

namespace detfuse::tuner {

db::DeviceRecord device_record(const DeviceInfo& d) {
  db::DeviceRecord r;
  r.uuid = d.uuid;
  r.name = d.name;
  r.cc = d.cc_string();
  r.sm_count = d.sm_count;
  r.total_memory_bytes = int64_t(d.total_memory_bytes);
  r.l2_bytes = d.l2_bytes;
  r.driver_version = d.driver_version;
  r.driver_release = d.driver_release;
  r.runtime_version = d.runtime_version;
  return r;
}

DeviceInfo device_info_from(const db::DeviceRecord& r) {
  DeviceInfo d;
  d.ordinal = -1;
  d.name = r.name;
  d.uuid = r.uuid;
  int maj = 0, min = 0;
  if (std::sscanf(r.cc.c_str(), "%d.%d", &maj, &min) == 2) {
    d.cc_major = maj;
    d.cc_minor = min;
  }
  d.sm_count = r.sm_count;
  d.total_memory_bytes = uint64_t(r.total_memory_bytes);
  d.l2_bytes = int(r.l2_bytes);
  // Not stored: the opt-in shared memory of the architecture (227 KiB on sm_90,
  // 163 KiB on sm_80) is what can_run looks at; assume the architecture's value.
  d.max_smem_per_block_optin = d.compute_capability() >= 90 ? 232448 : d.compute_capability() >= 80 ? 166912 : 101376;
  d.driver_version = r.driver_version;
  d.driver_release = r.driver_release;
  d.runtime_version = r.runtime_version;
  return d;
}

db::BuildRecord this_build() {
  db::BuildRecord b;
  b.version = DETFUSE_VERSION;
  b.git_commit = DETFUSE_GIT_COMMIT;
  b.compiler = DETFUSE_COMPILER;
  b.flags = DETFUSE_BUILD_FLAGS;
  b.build_type = DETFUSE_BUILD_TYPE;
  return b;
}

db::ProblemRecord problem_record(const Problem& p) { return p.record(); }

db::VariantRecord variant_record(const VariantDesc& d) {
  db::VariantRecord v;
  v.name = d.name;
  v.family = to_string(d.family);
  v.strategy = d.strategy;
  v.dtype = to_string(d.dtype);
  v.engine = d.engine;
  std::string params;
  for (const auto& [k, val] : d.params) params += (params.empty() ? "" : ",") + k + "=" + std::to_string(val);
  v.params = params;
  v.deterministic_by_design = d.deterministic;
  return v;
}

}  // namespace detfuse::tuner
