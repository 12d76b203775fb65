// Plain records of the detfuse results store: what the tuner hands to the store
// and what queries hand back. Strings, integers, doubles and small containers
// only; no SQLite and no CUDA types, so tuner/, cli/ and experiments/ can fill
// them from whatever they measured.
//
// Conventions
//   - Ids (`Id`) are the store's integer row ids; they are only meaningful inside
//     one database file (merge() maps them by natural keys).
//   - Timestamps are UTC ISO 8601 text with milliseconds, "2025-05-01T12:34:56.789Z"
//     (db::now_utc()); the store fills an empty one.
//   - Output names ("loss", "lse", "dX", "dW"; "O", "LSE", "dQ", "dK", "dV") are
//     shared by correctness errors, digests and distinct-digest counts.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace detfuse::db {

using Id = int64_t;

// One GPU as the store keys it. Natural key (a device row):
// (uuid, name, cc, sm_count, driver_version, driver_release). Memory, L2 and the
// runtime version are recorded facts, not part of the key.
struct DeviceRecord {
  std::string uuid;            // "GPU-xxxxxxxx-..." as nvidia-smi prints it
  std::string name;            // "NVIDIA H200"
  std::string cc;              // compute capability, "9.0"
  int sm_count = 0;
  int64_t total_memory_bytes = 0;
  int64_t l2_bytes = 0;
  int driver_version = 0;      // CUDA API version the driver supports, e.g. 13000
  std::string driver_release;  // e.g. "580.159.04" (NVML); may be empty
  int runtime_version = 0;     // e.g. 13000
  friend bool operator==(const DeviceRecord&, const DeviceRecord&) = default;
};

// The binary that measured. Natural key: all five fields.
struct BuildRecord {
  std::string version;     // "0.1.0"
  std::string git_commit;  // "c5e17a4abcde" or "...-dirty"
  std::string compiler;    // "GNU 12.2.0 / nvcc 13.0"
  std::string flags;       // compile flags that change code generation
  std::string build_type;  // "Release"
  friend bool operator==(const BuildRecord&, const BuildRecord&) = default;
};

// One problem (shape and options). Natural key: `key`, the canonical problem key
// (FlceProblem::key(), AttentionProblem::key()). `shape` holds the named shape
// dimensions (all > 0) used by the nearest-shape query; `options_key` is the key
// with the shape dimensions removed: two problems are comparable (nearest-shape)
// only when family and options_key are equal. make_problem_record() derives all
// of it from a canonical key.
struct ProblemRecord {
  std::string family;  // "flce" or "attention"
  std::string key;     // "flce:N=4096,D=4096,V=128256,dtype=bf16,..."
  std::string dtype;   // "bf16", "fp32"
  std::map<std::string, int64_t> shape;  // {"N":4096,"D":4096,"V":128256}
  std::string options_key;  // "flce:dtype=bf16,grad=fp32,ii=-100,..."
  friend bool operator==(const ProblemRecord&, const ProblemRecord&) = default;
};

// One compiled variant. Natural key: `name`, the canonical variant name
// "family.dtype.engine.strategy.params" (schema v3 renamed the stored names of
// older builds, "flce.bf16.<strategy>." -> "flce.bf16.mma.<strategy>." and
// "flce.fp32.<strategy>." -> "flce.fp32.fma.<strategy>.").
struct VariantRecord {
  std::string name;      // "flce.bf16.mma.owning.bn128_bv128_bd64_w8_s3"
  std::string family;    // "flce"
  std::string strategy;  // "atomic", "partials", "owning"
  std::string dtype;     // "bf16"
  std::string params;    // free text, e.g. "bn=128,bv=128,bd=64,warps=8,stages=3"
  bool deterministic_by_design = false;
  std::string engine;  // "fma", "mma", "wgmma", "cublaslt"; "" = unknown (a row
                       // migrated from v2 whose name had no recognisable engine)
  friend bool operator==(const VariantRecord&, const VariantRecord&) = default;
};

// Run statuses. The owner writes running (begin_run) and one of complete,
// budget, interrupted, failed (finish_run). crashed and abandoned are written by
// ANOTHER process, only through Store::mark_run_crashed / mark_run_abandoned,
// after that process decided the owner is gone (the policy is the tuner's).
inline constexpr const char* kRunRunning = "running";
inline constexpr const char* kRunComplete = "complete";
inline constexpr const char* kRunBudget = "budget";  // stopped by --budget
inline constexpr const char* kRunInterrupted = "interrupted";
inline constexpr const char* kRunFailed = "failed";
inline constexpr const char* kRunCrashed = "crashed";      // owner died without ending it (v3)
inline constexpr const char* kRunAbandoned = "abandoned";  // given up, with a reason (v3)

// The process that owns a run (schema v3). Runs written before v3 have the
// empty owner (host "", pid 0, start_time 0): unknown.
struct RunOwner {
  std::string host;        // host name (gethostname)
  int64_t pid = 0;         // process id on that host
  int64_t start_time = 0;  // process start time, an integer the caller defines
                           // (e.g. /proc/<pid>/stat field 22): tells a reused pid apart
  bool known() const { return !host.empty() || pid != 0; }
  friend bool operator==(const RunOwner&, const RunOwner&) = default;
};

// One tuning invocation. Natural key: `uid` (random 32 hex, filled by begin_run
// when empty), so runs of several machines never collide in merge().
struct RunRecord {
  std::string uid;
  std::string started_at;   // filled by begin_run when empty
  std::string finished_at;  // empty while running; filled by finish_run
  double budget_seconds = 0;  // 0 = no budget
  std::string status = kRunRunning;
  std::string command_line;
  int repeats = 0;  // K
  int64_t seed = 0;
  bool allow_nondeterministic = false;
  RunOwner owner;            // v3: who runs it (begin_run stores it)
  std::string heartbeat_at;  // v3: last heartbeat(); begin_run sets it to started_at
                             // for a running run; "" for runs written before v3
  std::string end_reason;    // v3: why it ended (mark_run_crashed/abandoned, finish_run)
  std::string study;         // v4: the study this run belongs to (StudyRecord::name); "" = a plain tuning run
  // v5: the SMs every measurement of the run had: a green-context slice of
  // the device (`--sms K`, the count the hardware granted) or the whole device
  // (its SM count). nullopt for runs written before v5 (whole device).
  std::optional<int64_t> sms;
  friend bool operator==(const RunRecord&, const RunRecord&) = default;
};

// A study (schema v4): a named sweep whose tuning runs carry its name
// (RunRecord::study). Natural key: `name`.
struct StudyRecord {
  std::string name;        // e.g. "contention-flce-quick"
  std::string kind;        // e.g. "contention"
  std::string axes;        // what it sweeps, as the study driver writes it (JSON text)
  std::string created_at;  // filled by find_or_create_study when empty
  friend bool operator==(const StudyRecord&, const StudyRecord&) = default;
};

// Result statuses. "running" is bookkeeping (mark_running) and is replaced by
// the final status when record_result() stores the finished result. A
// "crashed" row is either recorded by the owner (its supervised worker died:
// final) or presumed by another process through Store::mark_crashed (the
// owner was judged gone): a presumed crash is replaced by a result the owner
// records after all (VariantState::crash_presumed tells them apart).
inline constexpr const char* kResultRunning = "running";
inline constexpr const char* kResultOk = "ok";
inline constexpr const char* kResultCannotRun = "cannot_run";
inline constexpr const char* kResultError = "error";
inline constexpr const char* kResultCrashed = "crashed";
inline constexpr const char* kResultIncorrect = "incorrect";

// Correctness against the float64 reference.
struct Correctness {
  // What was compared: "full", or e.g. "rows:16 sampled + grads at N=512".
  std::string checked_what;
  // Error metric per output ("loss", "lse", "dX", "dW", ...), as the tuner
  // defines it (e.g. max |a - ref| / (atol + rtol |ref|)). NaN is allowed
  // (stored as NULL, read back as NaN).
  std::map<std::string, double> errors;
  double tolerance = 0;  // the bound the metric is compared with
  bool pass = false;
  friend bool operator==(const Correctness&, const Correctness&) = default;
};

// Determinism levels (DESIGN.md, "Determinism levels"), strongest last:
//   none < run_to_run < sm_count < config < portable.
// Each level above none has its own check, done independently and stored per
// result (schema v6) as shown, failed or not_checked:
//   run_to_run  K repeats gave one digest per output;
//   sm_count    repeat 0's digests are the same on 16, 66 and all SMs
//               (green-context slices, rounded to the hardware's granularity);
//   config      the digests equal those of every other variant of the same
//               family, dtype, engine and strategy measured on the problem in
//               the same tune/verify call (a variant alone: not_checked);
//   portable    the digests equal those of the CPU emulation (reference/emulate.h).
// A result HAS level L when L's check is shown and run_to_run is shown (every
// level implies run-to-run determinism); its `level` is the strongest level it
// has (derive_level), computed by the store, never given.
inline constexpr const char* kLevelNone = "none";
inline constexpr const char* kLevelRunToRun = "run_to_run";
inline constexpr const char* kLevelSmCount = "sm_count";
inline constexpr const char* kLevelConfig = "config";
inline constexpr const char* kLevelPortable = "portable";

inline constexpr const char* kCheckShown = "shown";
inline constexpr const char* kCheckFailed = "failed";
inline constexpr const char* kCheckNotChecked = "not_checked";

// The level names in order, none first.
const std::vector<std::string>& level_names();
// Position of a level in level_names() (none = 0), or -1 for an unknown name.
int level_rank(const std::string& level);
// Throws db::Error (invalid_argument) naming the level names when `level` is
// not one of them; `what` prefixes the message (e.g. "--level").
void check_level_name(const std::string& level, const std::string& what);

// The outcome of each level check of one result (schema v6).
struct LevelChecks {
  std::string run_to_run = kCheckNotChecked;
  std::string sm_count = kCheckNotChecked;
  std::string config = kCheckNotChecked;
  std::string portable = kCheckNotChecked;
  // How each check was shown or why it failed, "check: text" joined by "; "
  // (e.g. "sm_count: 16, 72 (66 asked), 132 SMs agree").
  std::string notes;
  // The outcome of the check of a level ("run_to_run" .. "portable"); throws
  // db::Error (invalid_argument) for none or an unknown name.
  std::string& at(const std::string& level);
  const std::string& at(const std::string& level) const;
  // Whether the result has `level`: none always; otherwise its check and
  // run_to_run are shown.
  bool has(const std::string& level) const;
  // Appends "check: text" to notes.
  void note(const std::string& check, const std::string& text);
  friend bool operator==(const LevelChecks&, const LevelChecks&) = default;
};

// The strongest level the checks show (none when run_to_run is not shown).
std::string derive_level(const LevelChecks& c);
bool valid_check_outcome(const std::string& outcome);

struct DigestRow {
  int repeat = 0;      // 0 .. repeats-1
  std::string output;  // "loss", "lse", "dX", "dW", ...
  std::string digest;  // 32 lowercase hex digits (XXH3-128)
  friend bool operator==(const DigestRow&, const DigestRow&) = default;
  friend auto operator<=>(const DigestRow&, const DigestRow&) = default;
};

// Run-to-run spread of one output (schema v4): every later repeat compared
// with repeat 0 on the device, the maxima over those repeats. All zero for an
// output whose repeats agree bitwise. diff_norm / norm is comparable with the
// correctness error (a relative L2 norm); max_abs_diff / norm is the
// "max |difference| relative to the gradient's norm".
struct Spread {
  double max_abs_diff = 0;  // max over r >= 1 of max_i |x_r[i] - x_0[i]|
  double diff_norm = 0;     // max over r >= 1 of ||x_r - x_0||_2
  double norm = 0;          // ||x_0||_2
  friend bool operator==(const Spread&, const Spread&) = default;
};

struct Determinism {
  int repeats = 0;
  std::vector<DigestRow> digests;  // every output of every repeat
  // Number of distinct digests per output. When left empty, record_result()
  // computes it from `digests`; when given, it must agree with them.
  std::map<std::string, int> distinct;
  // Derived by the store from `checks` (record_result, set_level_checks);
  // as read back, the stored level. A writer that leaves checks.run_to_run
  // not_checked and sets level run_to_run (or none, with some output of
  // several digests) gets run_to_run shown (failed), validated against the
  // digests.
  std::string level = kLevelNone;
  LevelChecks checks;  // v6
  // v4: per output, the run-to-run spread; empty when not measured (stores
  // written before v4, measurers that do not compute it).
  std::map<std::string, Spread> spread;
  friend bool operator==(const Determinism&, const Determinism&) = default;
};

struct Timing {
  std::vector<double> samples_ms;  // every sample, in measurement order
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int warmup = 0;         // warm-up launches not in samples_ms
  int clock_min_mhz = 0;  // SM clock seen during timing; 0 = unknown
  int clock_max_mhz = 0;
  // v7: NVML's clock-event reasons seen during timing (detfuse::clock_event
  // bits, kernels/common/device_info.h, OR of every reading, gpu_idle left
  // out): 0 = the clock was never held down; empty = unknown (no NVML, a
  // driver without the query, results written before v7).
  std::optional<int64_t> clock_events;
  int64_t peak_extra_bytes = 0;  // peak device memory beyond inputs and outputs
  double flops = 0;              // per call, by the DESIGN.md convention
  double tflops = 0;             // flops / median
  friend bool operator==(const Timing&, const Timing&) = default;
};

// Fills median/min/max from samples_ms, and tflops from flops and the median.
// Throws db::Error if samples_ms is empty.
void summarize(Timing& t);

// One result per (run, device, build, problem, variant, seed).
struct ResultRecord {
  Id run_id = 0, device_id = 0, build_id = 0, problem_id = 0, variant_id = 0;
  int64_t seed = 0;
  std::string status = kResultOk;
  std::string reason;       // why not ok (cannot_run, error, crashed, incorrect)
  std::string recorded_at;  // filled by the store when empty
  std::optional<Correctness> correctness;
  std::optional<Determinism> determinism;
  std::optional<Timing> timing;
  friend bool operator==(const ResultRecord&, const ResultRecord&) = default;
};

// A record together with its id in this store.
template <class R>
struct Entry {
  Id id = 0;
  R record;
};

// A result as read back, with the variant's name for convenience.
struct StoredResult {
  Id id = 0;
  ResultRecord record;
  std::string variant_name;
};

// Resume bookkeeping: the latest result row of one variant for a
// (device, build, problem, seed).
struct VariantState {
  Id result_id = 0;
  Id run_id = 0;
  Id variant_id = 0;
  std::string variant_name;
  std::string status;  // "running" or a final status
  std::string reason;
  // v3: the row is "crashed" because another process called mark_crashed (the
  // owner was judged gone), not because the owner recorded a crash.
  bool crash_presumed = false;
  // v3: the run holding the row: its status, owner and last heartbeat.
  std::string run_status;
  RunOwner owner;
  std::string heartbeat_at;
};

// unfinished_runs(): a run whose owner never ended it (status "running").
struct UnfinishedRun {
  Id id = 0;
  RunRecord record;  // with owner and heartbeat_at
  // Seconds from record.heartbeat_at to now on THIS host's clock (NaN when the
  // run has no heartbeat, i.e. was written before v3). Compare clocks of other
  // hosts with care.
  double heartbeat_age_s = 0;
};

// best(): the fastest qualifying result, and where it came from.
struct BestResult {
  Id result_id = 0;
  Id run_id = 0;
  Id device_id = 0;
  Id problem_id = 0;
  Id variant_id = 0;
  Id build_id = 0;
  std::string variant_name;
  std::string problem_key;
  BuildRecord build;  // the build that produced it: compare with the running one
  int64_t seed = 0;
  double median_ms = 0;
  double tflops = 0;
  std::string level;  // determinism level of the result
  LevelChecks checks;  // v6: each check's outcome
  std::string recorded_at;
};

// nearest_tuned(): the closest tuned problem and its distance (db/README.md).
struct NearestMatch {
  Entry<ProblemRecord> problem;
  double distance = 0;  // sum over shape dims of |log2(a / b)|; 0 = same shape
  BestResult best;      // best() of that problem
};

// Stored digests of one result, for `verify`.
struct StoredDigests {
  Id result_id = 0;
  Id run_id = 0;
  std::string variant_name;
  int repeats = 0;
  std::string level;
  LevelChecks checks;  // v6
  std::vector<DigestRow> digests;  // sorted by (repeat, output)
};

// Rows added by merge(), per table.
struct MergeCounts {
  int64_t devices = 0, builds = 0, problems = 0, variants = 0, runs = 0, results = 0;
  int64_t total() const { return devices + builds + problems + variants + runs + results; }
};

}  // namespace detfuse::db
