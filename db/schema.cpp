#include "db/schema.h"

namespace detfuse::db::schema {

// Version 1. Keys are never NULL; every child row goes with its result
// (ON DELETE CASCADE; the store turns foreign keys on for every connection).
// Error metrics are the only nullable columns: SQLite stores NaN as NULL.
const char* v1_ddl() {
  return R"sql(
CREATE TABLE devices (
  id                 INTEGER PRIMARY KEY,
  uuid               TEXT    NOT NULL,
  name               TEXT    NOT NULL,
  cc                 TEXT    NOT NULL,
  sm_count           INTEGER NOT NULL,
  total_memory_bytes INTEGER NOT NULL,
  l2_bytes           INTEGER NOT NULL,
  driver_version     INTEGER NOT NULL,
  runtime_version    INTEGER NOT NULL
);
CREATE UNIQUE INDEX devices_key ON devices (uuid, name, cc, sm_count, driver_version);

CREATE TABLE builds (
  id         INTEGER PRIMARY KEY,
  version    TEXT NOT NULL,
  git_commit TEXT NOT NULL,
  compiler   TEXT NOT NULL,
  flags      TEXT NOT NULL,
  build_type TEXT NOT NULL,
  UNIQUE (version, git_commit, compiler, flags, build_type)
);

CREATE TABLE problems (
  id          INTEGER PRIMARY KEY,
  family      TEXT NOT NULL,
  key         TEXT NOT NULL UNIQUE,
  dtype       TEXT NOT NULL,
  options_key TEXT NOT NULL
);
CREATE INDEX problems_options ON problems (family, options_key);

CREATE TABLE problem_dims (
  problem_id INTEGER NOT NULL REFERENCES problems (id) ON DELETE CASCADE,
  dim        TEXT    NOT NULL,
  value      INTEGER NOT NULL CHECK (value > 0),
  PRIMARY KEY (problem_id, dim)
) WITHOUT ROWID;

CREATE TABLE variants (
  id                      INTEGER PRIMARY KEY,
  name                    TEXT    NOT NULL UNIQUE,
  family                  TEXT    NOT NULL,
  strategy                TEXT    NOT NULL,
  dtype                   TEXT    NOT NULL,
  params                  TEXT    NOT NULL,
  deterministic_by_design INTEGER NOT NULL CHECK (deterministic_by_design IN (0, 1))
);

CREATE TABLE runs (
  id                     INTEGER PRIMARY KEY,
  uid                    TEXT    NOT NULL UNIQUE,
  started_at             TEXT    NOT NULL,
  finished_at            TEXT    NOT NULL DEFAULT '',
  budget_seconds         REAL    NOT NULL,
  status                 TEXT    NOT NULL
      CHECK (status IN ('running', 'complete', 'budget', 'interrupted', 'failed')),
  command_line           TEXT    NOT NULL,
  repeats                INTEGER NOT NULL,
  seed                   INTEGER NOT NULL,
  allow_nondeterministic INTEGER NOT NULL CHECK (allow_nondeterministic IN (0, 1))
);

CREATE TABLE results (
  id          INTEGER PRIMARY KEY,
  run_id      INTEGER NOT NULL REFERENCES runs (id),
  device_id   INTEGER NOT NULL REFERENCES devices (id),
  build_id    INTEGER NOT NULL REFERENCES builds (id),
  problem_id  INTEGER NOT NULL REFERENCES problems (id),
  variant_id  INTEGER NOT NULL REFERENCES variants (id),
  seed        INTEGER NOT NULL,
  status      TEXT    NOT NULL
      CHECK (status IN ('running', 'ok', 'cannot_run', 'error', 'crashed', 'incorrect')),
  reason      TEXT    NOT NULL DEFAULT '',
  recorded_at TEXT    NOT NULL,
  UNIQUE (run_id, device_id, build_id, problem_id, variant_id, seed)
);
CREATE INDEX results_lookup ON results (device_id, problem_id, build_id, variant_id, seed);

CREATE TABLE correctness (
  result_id    INTEGER PRIMARY KEY REFERENCES results (id) ON DELETE CASCADE,
  checked_what TEXT    NOT NULL,
  tolerance    REAL    NOT NULL,
  pass         INTEGER NOT NULL CHECK (pass IN (0, 1))
);

CREATE TABLE correctness_errors (
  result_id INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
  output    TEXT    NOT NULL,
  error     REAL,  -- NULL: NaN
  PRIMARY KEY (result_id, output)
) WITHOUT ROWID;

CREATE TABLE determinism (
  result_id INTEGER PRIMARY KEY REFERENCES results (id) ON DELETE CASCADE,
  repeats   INTEGER NOT NULL,
  level     TEXT    NOT NULL CHECK (level IN ('none', 'run_to_run'))
);

CREATE TABLE determinism_outputs (
  result_id        INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
  output           TEXT    NOT NULL,
  distinct_digests INTEGER NOT NULL,
  PRIMARY KEY (result_id, output)
) WITHOUT ROWID;

CREATE TABLE digests (
  result_id INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
  repeat    INTEGER NOT NULL,
  output    TEXT    NOT NULL,
  digest    TEXT    NOT NULL CHECK (length(digest) = 32),
  PRIMARY KEY (result_id, repeat, output)
) WITHOUT ROWID;

CREATE TABLE timing (
  result_id        INTEGER PRIMARY KEY REFERENCES results (id) ON DELETE CASCADE,
  median_ms        REAL    NOT NULL,
  min_ms           REAL    NOT NULL,
  max_ms           REAL    NOT NULL,
  warmup           INTEGER NOT NULL,
  clock_min_mhz    INTEGER NOT NULL,
  clock_max_mhz    INTEGER NOT NULL,
  peak_extra_bytes INTEGER NOT NULL,
  flops            REAL    NOT NULL,
  tflops           REAL    NOT NULL
);

CREATE TABLE timing_samples (
  result_id INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
  idx       INTEGER NOT NULL,
  ms        REAL    NOT NULL,
  PRIMARY KEY (result_id, idx)
) WITHOUT ROWID;
)sql";
}

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> m = {
      {2,
       R"sql(
ALTER TABLE devices ADD COLUMN driver_release TEXT NOT NULL DEFAULT '';
DROP INDEX devices_key;
CREATE UNIQUE INDEX devices_key ON devices (uuid, name, cc, sm_count, driver_version, driver_release);
)sql",
       "v2: devices.driver_release (NVML driver release text) joins the device key"},
  };
  return m;
}

}  // namespace detfuse::db::schema
