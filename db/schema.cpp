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
      {3,
       // Foreign keys are off while a migration runs (the store checks them
       // with PRAGMA foreign_key_check before the commit), so runs can be
       // rebuilt: its status CHECK gains crashed and abandoned (SQLite cannot
       // alter a CHECK; this is its documented create-copy-drop-rename).
       R"sql(
CREATE TABLE runs_v3 (
  id                     INTEGER PRIMARY KEY,
  uid                    TEXT    NOT NULL UNIQUE,
  started_at             TEXT    NOT NULL,
  finished_at            TEXT    NOT NULL DEFAULT '',
  budget_seconds         REAL    NOT NULL,
  status                 TEXT    NOT NULL
      CHECK (status IN ('running', 'complete', 'budget', 'interrupted', 'failed', 'crashed', 'abandoned')),
  command_line           TEXT    NOT NULL,
  repeats                INTEGER NOT NULL,
  seed                   INTEGER NOT NULL,
  allow_nondeterministic INTEGER NOT NULL CHECK (allow_nondeterministic IN (0, 1)),
  owner_host             TEXT    NOT NULL DEFAULT '',
  owner_pid              INTEGER NOT NULL DEFAULT 0,
  owner_start            INTEGER NOT NULL DEFAULT 0,
  heartbeat_at           TEXT    NOT NULL DEFAULT '',
  end_reason             TEXT    NOT NULL DEFAULT ''
);
INSERT INTO runs_v3 (id, uid, started_at, finished_at, budget_seconds, status, command_line, repeats, seed,
                     allow_nondeterministic)
  SELECT id, uid, started_at, finished_at, budget_seconds, status, command_line, repeats, seed,
         allow_nondeterministic FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
CREATE INDEX runs_status ON runs (status);

ALTER TABLE results ADD COLUMN crash_presumed INTEGER NOT NULL DEFAULT 0 CHECK (crash_presumed IN (0, 1));

ALTER TABLE variants ADD COLUMN engine TEXT NOT NULL DEFAULT '';
-- Names of older builds, "flce.<dtype>.<strategy>.<params>", get the engine
-- token of their dtype: bf16 -> mma, fp32 -> fma.
CREATE TEMP TABLE v3_renames AS
  SELECT id AS old_id, engine_of_dtype AS engine,
         'flce.' || dtype || '.' || engine_of_dtype || '.' || substr(name, length('flce.' || dtype || '.') + 1)
             AS new_name
  FROM (SELECT *, CASE dtype WHEN 'bf16' THEN 'mma' ELSE 'fma' END AS engine_of_dtype FROM variants)
  WHERE family = 'flce' AND dtype IN ('bf16', 'fp32')
    AND substr(name, 1, length('flce.' || dtype || '.' || strategy || '.')) = 'flce.' || dtype || '.' || strategy || '.';
-- A store written by builds of both namings has both rows: the old row's
-- results move to the new row (a result key present under both names makes
-- the UNIQUE constraint fail, and the whole migration with it).
UPDATE results SET variant_id = (SELECT v.id FROM v3_renames r JOIN variants v ON v.name = r.new_name
                                 WHERE r.old_id = results.variant_id)
  WHERE variant_id IN (SELECT r.old_id FROM v3_renames r JOIN variants v ON v.name = r.new_name);
DELETE FROM variants WHERE id IN (SELECT r.old_id FROM v3_renames r JOIN variants v ON v.name = r.new_name);
UPDATE variants SET name   = (SELECT new_name FROM v3_renames WHERE old_id = variants.id),
                    engine = (SELECT engine FROM v3_renames WHERE old_id = variants.id)
  WHERE id IN (SELECT old_id FROM v3_renames);
DROP TABLE v3_renames;
-- Rows already named "family.dtype.engine.strategy.params": engine = the
-- third token. Any other name keeps engine '' (unknown).
UPDATE variants SET engine = substr(rest, 1, instr(rest, '.') - 1)
  FROM (SELECT id AS vid, substr(name, length(family || '.' || dtype || '.') + 1) AS rest FROM variants
        WHERE substr(name, 1, length(family || '.' || dtype || '.')) = family || '.' || dtype || '.')
  WHERE variants.id = vid AND engine = '' AND instr(rest, '.') > 1
    AND substr(rest, instr(rest, '.') + 1, length(strategy) + 1) = strategy || '.';
)sql",
       "v3: runs know their owner (host, pid, start time), heartbeat and end reason, and may be "
       "crashed or abandoned; results.crash_presumed; variants.engine, and older flce names get "
       "their engine token (bf16 -> mma, fp32 -> fma)"},
      {4,
       R"sql(
CREATE TABLE studies (
  id         INTEGER PRIMARY KEY,
  name       TEXT NOT NULL UNIQUE,
  kind       TEXT NOT NULL,
  axes       TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL
);
ALTER TABLE runs ADD COLUMN study TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_study ON runs (study);
CREATE TABLE determinism_spread (
  result_id    INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
  output       TEXT    NOT NULL,
  max_abs_diff REAL,  -- NULL: NaN
  diff_norm    REAL,
  norm         REAL,
  PRIMARY KEY (result_id, output)
) WITHOUT ROWID;
)sql",
       "v4: studies (name, kind, axes) and runs.study tag a study's runs; determinism_spread holds the "
       "run-to-run spread (max |x_r - x_0|, ||x_r - x_0||, ||x_0||) of each output"},
      {5,
       R"sql(
ALTER TABLE runs ADD COLUMN sms INTEGER;
)sql",
       "v5: runs.sms, the SMs every measurement of the run had (a green-context slice of the device, or the "
       "whole device); NULL for older runs (whole device, count not recorded)"},
      {6,
       // determinism is rebuilt (its level CHECK gains the new levels; SQLite
       // cannot alter a CHECK): each level check's outcome and notes. Older
       // results keep their level; run_to_run is shown for level run_to_run,
       // failed where an output had several digests, else not_checked; the
       // new checks are not_checked.
       R"sql(
CREATE TABLE determinism_v6 (
  result_id   INTEGER PRIMARY KEY REFERENCES results (id) ON DELETE CASCADE,
  repeats     INTEGER NOT NULL,
  level       TEXT    NOT NULL CHECK (level IN ('none', 'run_to_run', 'sm_count', 'config', 'portable')),
  run_to_run  TEXT    NOT NULL DEFAULT 'not_checked' CHECK (run_to_run IN ('shown', 'failed', 'not_checked')),
  sm_count    TEXT    NOT NULL DEFAULT 'not_checked' CHECK (sm_count IN ('shown', 'failed', 'not_checked')),
  config      TEXT    NOT NULL DEFAULT 'not_checked' CHECK (config IN ('shown', 'failed', 'not_checked')),
  portable    TEXT    NOT NULL DEFAULT 'not_checked' CHECK (portable IN ('shown', 'failed', 'not_checked')),
  level_notes TEXT    NOT NULL DEFAULT ''
);
INSERT INTO determinism_v6 (result_id, repeats, level, run_to_run)
  SELECT d.result_id, d.repeats, d.level,
         CASE WHEN d.level = 'run_to_run' THEN 'shown'
              WHEN EXISTS (SELECT 1 FROM determinism_outputs o
                           WHERE o.result_id = d.result_id AND o.distinct_digests > 1) THEN 'failed'
              ELSE 'not_checked' END
  FROM determinism d;
DROP TABLE determinism;
ALTER TABLE determinism_v6 RENAME TO determinism;
)sql",
       "v6: determinism holds each level check's outcome (run_to_run, sm_count, config, portable: shown, "
       "failed, not_checked) and notes; level may be sm_count, config or portable (the strongest shown)"},
      {7,
       R"sql(
ALTER TABLE timing ADD COLUMN clock_events INTEGER;
)sql",
       "v7: timing.clock_events, NVML's clock-event reasons seen while the samples were taken (the bits OR'd, "
       "gpu_idle left out; 0: none); NULL where unknown (no NVML, older results)"},
  };
  return m;
}

}  // namespace detfuse::db::schema
