// CPU tests of the C ABI: every bad argument gives its status and a message
// naming it, nothing throws across the interface, the problem struct converts
// field for field, and calls that need a GPU say so when there is none.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "capi/detfuse_c.h"

namespace {

std::string last() { return detfuse_last_error(); }

detfuse_flce_problem small_problem() {
  detfuse_flce_problem p;
  EXPECT_EQ(detfuse_flce_problem_init(&p), DETFUSE_OK);
  p.N = 8;
  p.D = 16;
  p.V = 32;
  return p;
}

std::string key_of(const detfuse_flce_problem& p) {
  char key[512];
  EXPECT_EQ(detfuse_flce_problem_key(&p, key, sizeof key), DETFUSE_OK) << last();
  return key;
}

// The status of problem_key(p), and the last error must contain `field`.
void expect_bad_problem(const detfuse_flce_problem& p, const std::string& field) {
  char key[512];
  EXPECT_EQ(detfuse_flce_problem_key(&p, key, sizeof key), DETFUSE_ERR_INVALID_ARGUMENT) << field;
  EXPECT_NE(last().find(field), std::string::npos) << "message '" << last() << "' does not name " << field;
}

// Fake device pointers: never dereferenced, since every test here fails
// before any CUDA call.
const void* fake(uintptr_t v) { return reinterpret_cast<const void*>(v * 256); }

detfuse_flce_args full_args() {
  detfuse_flce_args a;
  std::memset(&a, 0, sizeof a);
  a.X = fake(1);
  a.W = fake(2);
  a.y = static_cast<const int64_t*>(fake(3));
  a.dloss = static_cast<const float*>(fake(4));
  a.lse_in = static_cast<const float*>(fake(5));
  a.loss = static_cast<float*>(const_cast<void*>(fake(6)));
  a.lse = static_cast<float*>(const_cast<void*>(fake(7)));
  a.dX = const_cast<void*>(fake(8));
  a.dW = const_cast<void*>(fake(9));
  return a;
}

detfuse_selection heuristic() { return detfuse_selection{DETFUSE_SELECT_HEURISTIC, 0, nullptr, nullptr}; }

std::string first_variant(const char* prefix) {
  int64_t n = 0;
  EXPECT_EQ(detfuse_flce_variant_count(&n), DETFUSE_OK);
  char name[DETFUSE_NAME_CAP];
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(detfuse_flce_variant_name(i, name, sizeof name), DETFUSE_OK);
    if (std::string(name).rfind(prefix, 0) == 0) return name;
  }
  return "";
}

TEST(CApi, AbiVersionMatchesHeader) {
  EXPECT_EQ(detfuse_abi_version(), DETFUSE_C_ABI_VERSION);
  EXPECT_STREQ(detfuse_version(), "0.1.0");
}

// The layouts the Python package mirrors (python/detfuse/_lib.py checks the same sizes).
TEST(CApi, StructLayoutsAreFixed) {
  EXPECT_EQ(sizeof(detfuse_flce_problem), 80u);
  EXPECT_EQ(offsetof(detfuse_flce_problem, ignore_index), 32u);
  EXPECT_EQ(offsetof(detfuse_flce_problem, label_smoothing), 48u);
  EXPECT_EQ(sizeof(detfuse_flce_args), 88u);
  EXPECT_EQ(sizeof(detfuse_selection), 24u);
  EXPECT_EQ(sizeof(detfuse_choice), size_t(DETFUSE_NAME_CAP + 16 + 2 * DETFUSE_NOTE_CAP));
  EXPECT_EQ(sizeof(detfuse_attention_problem), 80u);  // ABI 3: + softcap, window
  EXPECT_EQ(offsetof(detfuse_attention_problem, dtype), 48u);
  EXPECT_EQ(offsetof(detfuse_attention_problem, causal), 52u);
  EXPECT_EQ(offsetof(detfuse_attention_problem, scale), 56u);
  EXPECT_EQ(offsetof(detfuse_attention_problem, softcap), 64u);
  EXPECT_EQ(offsetof(detfuse_attention_problem, window), 72u);
  EXPECT_EQ(sizeof(detfuse_attention_args), 104u);
  EXPECT_EQ(offsetof(detfuse_attention_args, workspace_size), 96u);
}

TEST(CApi, StatusNames) {
  EXPECT_STREQ(detfuse_status_name(DETFUSE_OK), "DETFUSE_OK");
  EXPECT_STREQ(detfuse_status_name(DETFUSE_ERR_INVALID_ARGUMENT), "DETFUSE_ERR_INVALID_ARGUMENT");
  EXPECT_STREQ(detfuse_status_name(DETFUSE_ERR_NO_DEVICE), "DETFUSE_ERR_NO_DEVICE");
  EXPECT_STREQ(detfuse_status_name(99), "unknown status");
}

TEST(CApi, ProblemInitGivesTheCxxDefaults) {
  detfuse_flce_problem p;
  std::memset(&p, 0x5a, sizeof p);
  ASSERT_EQ(detfuse_flce_problem_init(&p), DETFUSE_OK);
  EXPECT_EQ(p.dtype, DETFUSE_DTYPE_BF16);
  EXPECT_EQ(p.grad_dtype, DETFUSE_DTYPE_F32);
  EXPECT_EQ(p.ignore_index, -100);
  EXPECT_EQ(p.reduction, DETFUSE_REDUCTION_MEAN);
  EXPECT_EQ(p.accumulate_dW, 0);
  EXPECT_EQ(p.grad_output, 1.0);
  EXPECT_EQ(p.label_smoothing, 0.0);
  EXPECT_EQ(p.z_loss, 0.0);
  EXPECT_EQ(p.softcap, 0.0);
  EXPECT_EQ(detfuse_flce_problem_init(nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("problem: null pointer"), std::string::npos) << last();
}

TEST(CApi, ProblemConvertsFieldForField) {
  detfuse_flce_problem p = small_problem();
  EXPECT_EQ(key_of(p), "flce:N=8,D=16,V=32,dtype=bf16,grad=fp32,ii=-100,red=mean,ls=0,z=0,cap=0,go=1");
  p.dtype = DETFUSE_DTYPE_F32;
  p.grad_dtype = DETFUSE_DTYPE_F32;
  p.ignore_index = 32;
  p.reduction = DETFUSE_REDUCTION_NONE;
  p.label_smoothing = 0.25;
  p.z_loss = 1e-4;
  p.softcap = 2.5;
  p.grad_output = 0.5;
  EXPECT_EQ(key_of(p), "flce:N=8,D=16,V=32,dtype=fp32,grad=fp32,ii=32,red=none,ls=0.25,z=0.0001,cap=2.5,go=0.5");
  p.dtype = DETFUSE_DTYPE_BF16;
  p.grad_dtype = DETFUSE_DTYPE_BF16;
  p.reduction = DETFUSE_REDUCTION_SUM;
  EXPECT_EQ(key_of(p), "flce:N=8,D=16,V=32,dtype=bf16,grad=bf16,ii=32,red=sum,ls=0.25,z=0.0001,cap=2.5,go=0.5");
  p.accumulate_dW = 1;
  EXPECT_EQ(key_of(p), "flce:N=8,D=16,V=32,dtype=bf16,grad=bf16,ii=32,red=sum,ls=0.25,z=0.0001,cap=2.5,go=0.5,acc=1");
  // A short buffer is truncated and terminated.
  char small[8];
  ASSERT_EQ(detfuse_flce_problem_key(&p, small, sizeof small), DETFUSE_OK);
  EXPECT_STREQ(small, "flce:N=");
  EXPECT_EQ(detfuse_flce_problem_key(&p, nullptr, 0), DETFUSE_OK);  // validation only
}

TEST(CApi, EveryBadProblemFieldIsNamed) {
  detfuse_flce_problem p;
  p = small_problem(); p.N = 0; expect_bad_problem(p, "problem.N: must be >= 1, got 0");
  p = small_problem(); p.D = -3; expect_bad_problem(p, "problem.D:");
  p = small_problem(); p.V = 0; expect_bad_problem(p, "problem.V:");
  p = small_problem(); p.N = (int64_t(1) << 30) + 1; expect_bad_problem(p, "problem.N: must be at most 2^30");
  p = small_problem(); p.D = int64_t(1) << 31; expect_bad_problem(p, "problem.D: must be at most 2^30");
  p = small_problem(); p.V = std::numeric_limits<int64_t>::max(); expect_bad_problem(p, "problem.V: must be at most");
  p = small_problem(); p.dtype = 2; expect_bad_problem(p, "problem.dtype: must be 0 (DETFUSE_DTYPE_F32) or 1");
  p = small_problem(); p.grad_dtype = -1; expect_bad_problem(p, "problem.grad_dtype:");
  p = small_problem(); p.dtype = DETFUSE_DTYPE_F32; p.grad_dtype = DETFUSE_DTYPE_BF16;
  expect_bad_problem(p, "problem.grad_dtype: must be fp32 or the input dtype");
  p = small_problem(); p.reduction = 3; expect_bad_problem(p, "problem.reduction: must be 0 (mean), 1 (sum) or 2 (none), got 3");
  p = small_problem(); p.accumulate_dW = 2; expect_bad_problem(p, "problem.accumulate_dW");
  p = small_problem(); p.ignore_index = 5; expect_bad_problem(p, "problem.ignore_index");
  p = small_problem(); p.label_smoothing = 1.0; expect_bad_problem(p, "problem.label_smoothing");
  p = small_problem(); p.label_smoothing = std::nan(""); expect_bad_problem(p, "problem.label_smoothing");
  p = small_problem(); p.z_loss = -1; expect_bad_problem(p, "problem.z_loss: must be finite and >= 0");
  p = small_problem(); p.softcap = -1; expect_bad_problem(p, "problem.softcap");
  p = small_problem(); p.grad_output = INFINITY; expect_bad_problem(p, "problem.grad_output");
  EXPECT_EQ(detfuse_flce_problem_key(nullptr, nullptr, 0), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_flce_problem_key: problem: null pointer"), std::string::npos) << last();
}

TEST(CApi, VariantsAreListed) {
  int64_t n = 0;
  ASSERT_EQ(detfuse_flce_variant_count(&n), DETFUSE_OK);
  ASSERT_GT(n, 0);
  char name[DETFUSE_NAME_CAP];
  ASSERT_EQ(detfuse_flce_variant_name(0, name, sizeof name), DETFUSE_OK);
  EXPECT_EQ(std::string(name).rfind("flce.", 0), 0u) << name;
  EXPECT_EQ(detfuse_flce_variant_name(n, name, sizeof name), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("index: must be in [0, " + std::to_string(n) + "), got " + std::to_string(n)), std::string::npos)
      << last();
  EXPECT_EQ(detfuse_flce_variant_name(-1, name, sizeof name), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(detfuse_flce_variant_name(0, nullptr, 0), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("name: null pointer"), std::string::npos) << last();
  EXPECT_EQ(detfuse_flce_variant_count(nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("count: null pointer"), std::string::npos) << last();
}

TEST(CApi, SelectionByNameNeedsNoDevice) {
  const std::string bf16 = first_variant("flce.bf16.");
  const std::string f32 = first_variant("flce.fp32.");
  ASSERT_FALSE(bf16.empty());
  ASSERT_FALSE(f32.empty());
  detfuse_flce_problem p = small_problem();
  detfuse_selection s{DETFUSE_SELECT_NAME, 0, bf16.c_str(), nullptr};
  detfuse_choice c;
  ASSERT_EQ(detfuse_flce_choose(&p, DETFUSE_MODE_FORWARD_BACKWARD, &s, &c), DETFUSE_OK) << last();
  EXPECT_EQ(std::string(c.name), bf16);
  EXPECT_EQ(c.source, DETFUSE_SOURCE_NAMED);
  size_t ws = 12345;
  ASSERT_EQ(detfuse_flce_workspace_size(&p, DETFUSE_MODE_FORWARD_BACKWARD, &s, &ws), DETFUSE_OK) << last();
  EXPECT_NE(ws, size_t(12345));
  // The wrong dtype for the variant, an unknown name, an empty name, no name.
  s.name = f32.c_str();
  EXPECT_EQ(detfuse_flce_choose(&p, DETFUSE_MODE_FORWARD, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.name: variant '" + f32 + "' is for fp32 inputs, problem.dtype is bf16"),
            std::string::npos) << last();
  s.name = "flce.bf16.nope";
  EXPECT_EQ(detfuse_flce_workspace_size(&p, DETFUSE_MODE_FORWARD, &s, &ws), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.name: no FLCE variant named 'flce.bf16.nope'"), std::string::npos) << last();
  s.name = "";
  EXPECT_EQ(detfuse_flce_choose(&p, DETFUSE_MODE_FORWARD, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.name: empty"), std::string::npos) << last();
  s.name = nullptr;
  EXPECT_EQ(detfuse_flce_choose(&p, DETFUSE_MODE_FORWARD, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.name: null pointer"), std::string::npos) << last();
}

// ABI 4: a tuned choice at a determinism level. The level is checked before
// anything else that needs the GPU; only a tuned selection takes one.
TEST(CApi, ChooseAtALevelChecksTheLevelWithoutADevice) {
  detfuse_flce_problem p = small_problem();
  detfuse_selection tuned{DETFUSE_SELECT_TUNED, 0, nullptr, "/nonexistent/detfuse.db"};
  detfuse_choice c;
  EXPECT_EQ(detfuse_flce_choose_level(&p, DETFUSE_MODE_FORWARD_BACKWARD, &tuned, "gpu_to_gpu", &c),
            DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_flce_choose_level: level: unknown determinism level 'gpu_to_gpu' (one of none, "
                        "run_to_run, sm_count, config, portable)"),
            std::string::npos)
      << last();
  detfuse_selection h = heuristic();
  EXPECT_EQ(detfuse_flce_choose_level(&p, DETFUSE_MODE_FORWARD_BACKWARD, &h, "config", &c),
            DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("level: 'config' needs a tuned selection"), std::string::npos) << last();
  const std::string bf16 = first_variant("flce.bf16.");
  detfuse_selection named{DETFUSE_SELECT_NAME, 0, bf16.c_str(), nullptr};
  ASSERT_EQ(detfuse_flce_choose_level(&p, DETFUSE_MODE_FORWARD_BACKWARD, &named, nullptr, &c), DETFUSE_OK) << last();
  EXPECT_EQ(std::string(c.name), bf16);
  ASSERT_EQ(detfuse_flce_choose_level(&p, DETFUSE_MODE_FORWARD_BACKWARD, &named, "", &c), DETFUSE_OK) << last();
  EXPECT_EQ(detfuse_flce_choose_level(&p, DETFUSE_MODE_FORWARD_BACKWARD, &tuned, "config", nullptr),
            DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("choice: null pointer"), std::string::npos) << last();
  if (detfuse_device_count() == 0) {
    EXPECT_EQ(detfuse_flce_choose_level(&p, DETFUSE_MODE_FORWARD_BACKWARD, &tuned, "config", &c),
              DETFUSE_ERR_NO_DEVICE);
  }
  detfuse_attention_problem ap;
  ASSERT_EQ(detfuse_attention_problem_init(&ap), DETFUSE_OK);
  ap.B = 1, ap.H = 2, ap.Hkv = 2, ap.Sq = 16, ap.Sk = 16, ap.d = 64;
  EXPECT_EQ(detfuse_attention_choose_level(&ap, 0, &tuned, "fast", &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_attention_choose_level: level: unknown determinism level 'fast'"), std::string::npos)
      << last();
}

TEST(CApi, BadSelectionModeAndOutputs) {
  detfuse_flce_problem p = small_problem();
  detfuse_selection s = heuristic();
  detfuse_choice c;
  size_t ws = 0;
  EXPECT_EQ(detfuse_flce_choose(&p, 3, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("mode: must be 0 (forward), 1 (forward_backward) or 2 (backward), got 3"), std::string::npos)
      << last();
  EXPECT_EQ(detfuse_flce_choose(&p, 0, nullptr, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection: null pointer"), std::string::npos) << last();
  s.kind = 7;
  EXPECT_EQ(detfuse_flce_workspace_size(&p, 0, &s, &ws), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.kind: must be 0 (name), 1 (heuristic) or 2 (tuned), got 7"), std::string::npos)
      << last();
  s = heuristic();
  s.allow_nondeterministic = 2;
  EXPECT_EQ(detfuse_flce_choose(&p, 0, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.allow_nondeterministic"), std::string::npos) << last();
  s = heuristic();
  EXPECT_EQ(detfuse_flce_choose(&p, 0, &s, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("choice: null pointer"), std::string::npos) << last();
  EXPECT_EQ(detfuse_flce_workspace_size(&p, 0, &s, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("bytes: null pointer"), std::string::npos) << last();
}

// Each pointer the mode needs, removed in turn, is named; the problem and the
// mode are checked before the pointers, the pointers before the device.
TEST(CApi, MissingPointersAreNamedPerMode) {
  detfuse_flce_problem p = small_problem();
  p.reduction = DETFUSE_REDUCTION_NONE;
  const detfuse_selection s = heuristic();
  struct Case {
    int32_t mode;
    const char* mode_name;
    std::vector<std::string> needed;
  };
  const Case cases[] = {
      {DETFUSE_MODE_FORWARD, "forward", {"X", "W", "y", "loss", "lse"}},
      {DETFUSE_MODE_FORWARD_BACKWARD, "forward_backward", {"X", "W", "y", "dloss", "loss", "lse", "dX", "dW"}},
      {DETFUSE_MODE_BACKWARD, "backward", {"X", "W", "y", "dloss", "lse_in", "dX", "dW"}},
  };
  for (const Case& k : cases) {
    for (const std::string& field : k.needed) {
      detfuse_flce_args a = full_args();
      if (field == "X") a.X = nullptr;
      if (field == "W") a.W = nullptr;
      if (field == "y") a.y = nullptr;
      if (field == "dloss") a.dloss = nullptr;
      if (field == "lse_in") a.lse_in = nullptr;
      if (field == "loss") a.loss = nullptr;
      if (field == "lse") a.lse = nullptr;
      if (field == "dX") a.dX = nullptr;
      if (field == "dW") a.dW = nullptr;
      EXPECT_EQ(detfuse_flce_run(&p, k.mode, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT) << field;
      const std::string want = "args." + field + ": null pointer (required for " + k.mode_name + ")";
      EXPECT_NE(last().find(want), std::string::npos) << "want '" << want << "', got '" << last() << "'";
    }
  }
  // Pointers a mode does not read may be null (forward needs no dX, dW,
  // lse_in, dloss; dloss only for reduction none): without a GPU such calls get
  // past the argument checks to the device check. Never run with these fake
  // pointers on a GPU.
  if (detfuse_device_count() == 0) {
    detfuse_flce_args a = full_args();
    a.dX = a.dW = nullptr;
    a.lse_in = a.dloss = nullptr;
    EXPECT_EQ(detfuse_flce_forward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_NO_DEVICE) << last();
    p.reduction = DETFUSE_REDUCTION_MEAN;
    a = full_args();
    a.dloss = nullptr;
    EXPECT_EQ(detfuse_flce_backward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_NO_DEVICE) << last();
  }
  EXPECT_EQ(detfuse_flce_run(&p, DETFUSE_MODE_FORWARD, nullptr, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_flce_run: args: null pointer"), std::string::npos) << last();
}

TEST(CApi, WorkspaceArgumentsAreChecked) {
  detfuse_flce_problem p = small_problem();
  const detfuse_selection s = heuristic();
  detfuse_flce_args a = full_args();
  a.workspace_size = 1024;
  EXPECT_EQ(detfuse_flce_forward_backward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("args.workspace: null pointer with workspace_size 1024"), std::string::npos) << last();
  a.workspace = reinterpret_cast<void*>(uintptr_t(4096 + 8));
  EXPECT_EQ(detfuse_flce_forward_backward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("args.workspace: must be 256-byte aligned"), std::string::npos) << last();
}

TEST(CApi, ProblemIsCheckedBeforePointersAndDevice) {
  detfuse_flce_problem p = small_problem();
  p.V = 0;
  const detfuse_selection s = heuristic();
  EXPECT_EQ(detfuse_flce_forward(&p, nullptr, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_flce_forward: problem.V: must be >= 1, got 0"), std::string::npos) << last();
}

TEST(CApi, HostDigest) {
  char hex[33];
  const char data[] = "detfuse";
  ASSERT_EQ(detfuse_digest_host(data, 7, hex, sizeof hex), DETFUSE_OK) << last();
  EXPECT_EQ(std::strlen(hex), 32u);
  char again[33];
  ASSERT_EQ(detfuse_digest_host(data, 7, again, sizeof again), DETFUSE_OK);
  EXPECT_STREQ(hex, again);
  ASSERT_EQ(detfuse_digest_host(data, 6, again, sizeof again), DETFUSE_OK);
  EXPECT_STRNE(hex, again);
  EXPECT_EQ(detfuse_digest_host(nullptr, 0, again, sizeof again), DETFUSE_OK) << last();
  EXPECT_EQ(detfuse_digest_host(nullptr, 4, hex, sizeof hex), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("data: null pointer"), std::string::npos) << last();
  EXPECT_EQ(detfuse_digest_host(data, 7, hex, 32), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("hex_cap: must be at least 33"), std::string::npos) << last();
  EXPECT_EQ(detfuse_digest_host(data, 7, nullptr, 33), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("hex: null pointer"), std::string::npos) << last();
  EXPECT_EQ(detfuse_digest_device(nullptr, 4, nullptr, hex, sizeof hex), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_digest_device: data: null pointer"), std::string::npos) << last();
}

// Argument errors of detfuse_scale_unless_one come before the device check.
TEST(CApi, ScaleUnlessOneChecksItsArguments) {
  float x = 0.f;
  EXPECT_EQ(detfuse_scale_unless_one(&x, -1, DETFUSE_DTYPE_F32, &x, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last(), "detfuse_scale_unless_one: n: must be >= 0, got -1");
  EXPECT_EQ(detfuse_scale_unless_one(&x, 1, 7, &x, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("dtype: must be 0 (DETFUSE_DTYPE_F32) or 1 (DETFUSE_DTYPE_BF16), got 7"), std::string::npos)
      << last();
  EXPECT_EQ(detfuse_scale_unless_one(nullptr, 4, DETFUSE_DTYPE_BF16, &x, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_scale_unless_one: data: null pointer"), std::string::npos) << last();
  EXPECT_EQ(detfuse_scale_unless_one(&x, 4, DETFUSE_DTYPE_BF16, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_scale_unless_one: scale: null pointer"), std::string::npos) << last();
}

// On a machine without a GPU (CI), each call that needs one says so clearly
// after its arguments passed; on a GPU machine the test has nothing to check.
TEST(CApi, GpuCallsWithoutDeviceSayNoCudaDevice) {
  if (detfuse_device_count() > 0) GTEST_SKIP() << "a CUDA device is present; this test is for machines without one";
  detfuse_flce_problem p = small_problem();
  detfuse_flce_args a = full_args();
  detfuse_choice c;
  size_t ws = 0;
  char hex[33];
  auto expect_no_device = [&](int32_t st, const char* fn) {
    EXPECT_EQ(st, DETFUSE_ERR_NO_DEVICE) << fn << ": " << last();
    EXPECT_NE(last().find(std::string(fn) + ": no CUDA device available ("), std::string::npos) << last();
  };
  detfuse_selection s = heuristic();
  expect_no_device(detfuse_flce_choose(&p, DETFUSE_MODE_FORWARD, &s, &c), "detfuse_flce_choose");
  expect_no_device(detfuse_flce_workspace_size(&p, DETFUSE_MODE_FORWARD, &s, &ws), "detfuse_flce_workspace_size");
  expect_no_device(detfuse_flce_forward_backward(&p, &a, &s, nullptr, &c), "detfuse_flce_forward_backward");
  s = detfuse_selection{DETFUSE_SELECT_TUNED, 0, nullptr, "/nonexistent/detfuse.db"};
  expect_no_device(detfuse_flce_choose(&p, DETFUSE_MODE_FORWARD_BACKWARD, &s, &c), "detfuse_flce_choose");
  expect_no_device(detfuse_flce_forward(&p, &a, &s, nullptr, &c), "detfuse_flce_forward");
  const std::string name = first_variant("flce.bf16.");
  s = detfuse_selection{DETFUSE_SELECT_NAME, 0, name.c_str(), nullptr};
  expect_no_device(detfuse_flce_backward(&p, &a, &s, nullptr, &c), "detfuse_flce_backward");
  expect_no_device(detfuse_digest_device(a.X, 16, nullptr, hex, sizeof hex), "detfuse_digest_device");
  float g = 1.f;
  expect_no_device(detfuse_scale_unless_one(&g, 1, DETFUSE_DTYPE_F32, &g, nullptr), "detfuse_scale_unless_one");
}

// ------------------------------------------------------------------ attention

detfuse_attention_problem attn_problem() {
  detfuse_attention_problem p;
  EXPECT_EQ(detfuse_attention_problem_init(&p), DETFUSE_OK);
  p.B = 2;
  p.H = 4;
  p.Hkv = 2;
  p.Sq = 33;
  p.Sk = 47;
  p.d = 64;
  return p;
}

std::string attn_key(const detfuse_attention_problem& p) {
  char key[512];
  EXPECT_EQ(detfuse_attention_problem_key(&p, key, sizeof key), DETFUSE_OK) << last();
  return key;
}

void expect_bad_attn(const detfuse_attention_problem& p, const std::string& want) {
  char key[512];
  EXPECT_EQ(detfuse_attention_problem_key(&p, key, sizeof key), DETFUSE_ERR_INVALID_ARGUMENT) << want;
  EXPECT_NE(last().find(want), std::string::npos) << "message '" << last() << "' does not contain '" << want << "'";
}

detfuse_attention_args attn_full_args() {
  detfuse_attention_args a;
  std::memset(&a, 0, sizeof a);
  a.Q = fake(1);
  a.K = fake(2);
  a.V = fake(3);
  a.dO = fake(4);
  a.O_in = fake(5);
  a.lse_in = static_cast<const float*>(fake(6));
  a.O = const_cast<void*>(fake(7));
  a.lse = static_cast<float*>(const_cast<void*>(fake(8)));
  a.dQ = const_cast<void*>(fake(9));
  a.dK = const_cast<void*>(fake(10));
  a.dV = const_cast<void*>(fake(11));
  return a;
}

std::vector<std::string> attention_variants() {
  int64_t n = 0;
  EXPECT_EQ(detfuse_attention_variant_count(&n), DETFUSE_OK) << last();
  std::vector<std::string> out;
  char name[DETFUSE_NAME_CAP];
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(detfuse_attention_variant_name(i, name, sizeof name), DETFUSE_OK) << last();
    out.push_back(name);
  }
  return out;
}

std::string first_attention(const std::string& prefix) {
  for (const auto& n : attention_variants())
    if (n.rfind(prefix, 0) == 0) return n;
  return "";
}

TEST(CApiAttention, ProblemInitAndKey) {
  detfuse_attention_problem p;
  std::memset(&p, 0x5a, sizeof p);
  ASSERT_EQ(detfuse_attention_problem_init(&p), DETFUSE_OK);
  EXPECT_EQ(p.B, 0);
  EXPECT_EQ(p.d, 0);
  EXPECT_EQ(p.dtype, DETFUSE_DTYPE_BF16);
  EXPECT_EQ(p.causal, 0);
  EXPECT_EQ(p.scale, 0.0);
  EXPECT_EQ(detfuse_attention_problem_init(nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_attention_problem_init: problem: null pointer"), std::string::npos) << last();

  p = attn_problem();
  EXPECT_EQ(attn_key(p), "attention:B=2,H=4,Hkv=2,Sq=33,Sk=47,d=64,causal=0,scale=0.125,dtype=bf16");
  p.dtype = DETFUSE_DTYPE_F32;
  p.causal = 1;
  p.scale = 0.5;
  p.d = 128;
  EXPECT_EQ(attn_key(p), "attention:B=2,H=4,Hkv=2,Sq=33,Sk=47,d=128,causal=1,scale=0.5,dtype=fp32");
  EXPECT_EQ(detfuse_attention_problem_key(&p, nullptr, 0), DETFUSE_OK);  // validation only
}

TEST(CApiAttention, EveryBadProblemFieldIsNamed) {
  detfuse_attention_problem p;
  p = attn_problem(); p.B = 0; expect_bad_attn(p, "detfuse_attention_problem_key: problem.B: must be >= 1, got 0");
  p = attn_problem(); p.H = -1; expect_bad_attn(p, "problem.H: must be >= 1");
  p = attn_problem(); p.Hkv = 3; expect_bad_attn(p, "problem.Hkv: must divide H (GQA), got Hkv=3 H=4");
  p = attn_problem(); p.Hkv = 8; expect_bad_attn(p, "problem.Hkv: must divide H (GQA), got Hkv=8 H=4");
  p = attn_problem(); p.Sq = 0; expect_bad_attn(p, "problem.Sq: must be >= 1, got 0");
  p = attn_problem(); p.Sk = 0; expect_bad_attn(p, "problem.Sk: must be >= 1, got 0");
  p = attn_problem(); p.d = 0; expect_bad_attn(p, "problem.d: must be >= 1, got 0");
  p = attn_problem(); p.Sk = int64_t(1) << 31; expect_bad_attn(p, "problem.Sk: must be at most 2^30");
  p = attn_problem(); p.dtype = 2; expect_bad_attn(p, "problem.dtype: must be 0 (DETFUSE_DTYPE_F32) or 1");
  p = attn_problem(); p.causal = 2; expect_bad_attn(p, "problem.causal: must be 0 or 1, got 2");
  p = attn_problem(); p.scale = -1; expect_bad_attn(p, "problem.scale: must be finite and >= 0");
  p = attn_problem(); p.scale = std::nan(""); expect_bad_attn(p, "problem.scale");
  EXPECT_EQ(detfuse_attention_problem_key(nullptr, nullptr, 0), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("problem: null pointer"), std::string::npos) << last();
}

TEST(CApiAttention, VariantsAreListed) {
  const auto names = attention_variants();
  ASSERT_FALSE(names.empty());
  for (const auto& n : names) EXPECT_EQ(n.rfind("attention.", 0), 0u) << n;
  EXPECT_FALSE(first_attention("attention.bf16.fma.owning.").empty());
  EXPECT_FALSE(first_attention("attention.fp32.fma.partials.").empty());
  char name[DETFUSE_NAME_CAP];
  const int64_t n = int64_t(names.size());
  EXPECT_EQ(detfuse_attention_variant_name(n, name, sizeof name), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("index: must be in [0, " + std::to_string(n) + "), got " + std::to_string(n)),
            std::string::npos) << last();
  EXPECT_EQ(detfuse_attention_variant_name(0, nullptr, 0), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(detfuse_attention_variant_count(nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_attention_variant_count: count: null pointer"), std::string::npos) << last();
}

TEST(CApiAttention, SelectionByNameAndWorkspace) {
  const std::string owning = first_attention("attention.bf16.fma.owning.br64_bc64_w8_d64");
  const std::string partials = first_attention("attention.bf16.fma.partials.br32_bc32_w4_d64");
  const std::string f32 = first_attention("attention.fp32.fma.owning.");
  ASSERT_FALSE(owning.empty());
  ASSERT_FALSE(partials.empty());
  ASSERT_FALSE(f32.empty());
  const detfuse_attention_problem p = attn_problem();
  detfuse_selection s{DETFUSE_SELECT_NAME, 0, owning.c_str(), nullptr};
  detfuse_choice c;
  ASSERT_EQ(detfuse_attention_choose(&p, DETFUSE_ATTENTION_BACKWARD, &s, &c), DETFUSE_OK) << last();
  EXPECT_EQ(std::string(c.name), owning);
  EXPECT_EQ(c.source, DETFUSE_SOURCE_NAMED);
  EXPECT_EQ(c.deterministic, 1);
  // Forward needs no workspace; the backward needs D = rowsum(dO * O) at
  // least (B*H*Sq fp32), partials its slab on top.
  size_t ws = 12345;
  ASSERT_EQ(detfuse_attention_workspace_size(&p, DETFUSE_ATTENTION_FORWARD, &s, &ws), DETFUSE_OK) << last();
  EXPECT_EQ(ws, 0u);
  ASSERT_EQ(detfuse_attention_workspace_size(&p, DETFUSE_ATTENTION_BACKWARD, &s, &ws), DETFUSE_OK) << last();
  EXPECT_GE(ws, size_t(2 * 4 * 33 * 4));
  size_t ws_partials = 0;
  s.name = partials.c_str();
  ASSERT_EQ(detfuse_attention_workspace_size(&p, DETFUSE_ATTENTION_BACKWARD, &s, &ws_partials), DETFUSE_OK) << last();
  EXPECT_GT(ws_partials, ws);
  // Wrong dtype, unknown name, an FLCE name, tuned selection, bad mode.
  s.name = f32.c_str();
  EXPECT_EQ(detfuse_attention_choose(&p, DETFUSE_ATTENTION_FORWARD, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.name: variant '" + f32 + "' is for fp32 inputs, problem.dtype is bf16"),
            std::string::npos) << last();
  s.name = "attention.bf16.nope";
  EXPECT_EQ(detfuse_attention_workspace_size(&p, DETFUSE_ATTENTION_FORWARD, &s, &ws), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.name: no attention variant named 'attention.bf16.nope'"), std::string::npos)
      << last();
  const std::string flce = first_variant("flce.bf16.");
  s.name = flce.c_str();
  EXPECT_EQ(detfuse_attention_choose(&p, DETFUSE_ATTENTION_FORWARD, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("no attention variant named '" + flce + "'"), std::string::npos) << last();
  // Tuned selection: the same selection checks as FLCE's (the lookup itself needs a device).
  s = detfuse_selection{DETFUSE_SELECT_TUNED, 2, nullptr, nullptr};
  EXPECT_EQ(detfuse_attention_choose(&p, DETFUSE_ATTENTION_FORWARD, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.allow_nondeterministic: must be 0 or 1, got 2"), std::string::npos) << last();
  s = detfuse_selection{DETFUSE_SELECT_TUNED, 0, nullptr, nullptr};
  EXPECT_EQ(detfuse_attention_choose(&p, DETFUSE_ATTENTION_FORWARD, &s, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("choice: null pointer"), std::string::npos) << last();
  s = heuristic();
  EXPECT_EQ(detfuse_attention_choose(&p, 2, &s, &c), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("mode: must be 0 (forward) or 1 (backward), got 2"), std::string::npos) << last();
  EXPECT_EQ(detfuse_attention_choose(&p, 0, &s, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("choice: null pointer"), std::string::npos) << last();
  EXPECT_EQ(detfuse_attention_workspace_size(&p, 0, &s, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("bytes: null pointer"), std::string::npos) << last();
  EXPECT_EQ(detfuse_attention_workspace_size(&p, 0, nullptr, &ws), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection: null pointer"), std::string::npos) << last();
}

TEST(CApiAttention, MissingPointersAreNamedPerMode) {
  const detfuse_attention_problem p = attn_problem();
  const detfuse_selection s = heuristic();
  struct Case {
    int32_t mode;
    const char* mode_name;
    std::vector<std::string> needed;
  };
  const Case cases[] = {
      {DETFUSE_ATTENTION_FORWARD, "forward", {"Q", "K", "V", "O", "lse"}},
      {DETFUSE_ATTENTION_BACKWARD, "backward", {"Q", "K", "V", "dO", "O_in", "lse_in", "dQ", "dK", "dV"}},
  };
  for (const Case& k : cases) {
    for (const std::string& field : k.needed) {
      detfuse_attention_args a = attn_full_args();
      if (field == "Q") a.Q = nullptr;
      if (field == "K") a.K = nullptr;
      if (field == "V") a.V = nullptr;
      if (field == "dO") a.dO = nullptr;
      if (field == "O_in") a.O_in = nullptr;
      if (field == "lse_in") a.lse_in = nullptr;
      if (field == "O") a.O = nullptr;
      if (field == "lse") a.lse = nullptr;
      if (field == "dQ") a.dQ = nullptr;
      if (field == "dK") a.dK = nullptr;
      if (field == "dV") a.dV = nullptr;
      EXPECT_EQ(detfuse_attention_run(&p, k.mode, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT) << field;
      const std::string want = "args." + field + ": null pointer (required for " + k.mode_name + ")";
      EXPECT_NE(last().find(want), std::string::npos) << "want '" << want << "', got '" << last() << "'";
    }
  }
  // A mode's unread pointers may be null: without a GPU such calls reach the
  // device check. Never run with these fake pointers on a GPU.
  if (detfuse_device_count() == 0) {
    detfuse_attention_args a = attn_full_args();
    a.dO = a.O_in = nullptr;
    a.lse_in = nullptr;
    a.dQ = a.dK = a.dV = nullptr;
    EXPECT_EQ(detfuse_attention_forward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_NO_DEVICE) << last();
    a = attn_full_args();
    a.O = nullptr;
    a.lse = nullptr;
    EXPECT_EQ(detfuse_attention_backward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_NO_DEVICE) << last();
  }
  EXPECT_EQ(detfuse_attention_run(&p, 0, nullptr, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_attention_run: args: null pointer"), std::string::npos) << last();
  // The problem is checked before the pointers, the mode before the problem.
  detfuse_attention_problem bad = attn_problem();
  bad.Hkv = 3;
  EXPECT_EQ(detfuse_attention_forward(&bad, nullptr, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_attention_forward: problem.Hkv: must divide H"), std::string::npos) << last();
  EXPECT_EQ(detfuse_attention_run(&bad, 5, nullptr, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_attention_run: mode: must be 0 (forward) or 1 (backward), got 5"), std::string::npos)
      << last();
}

TEST(CApiAttention, WorkspaceAndSelectionArgumentsAreChecked) {
  const detfuse_attention_problem p = attn_problem();
  detfuse_selection s = heuristic();
  detfuse_attention_args a = attn_full_args();
  a.workspace_size = 1024;
  EXPECT_EQ(detfuse_attention_backward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("args.workspace: null pointer with workspace_size 1024"), std::string::npos) << last();
  a.workspace = reinterpret_cast<void*>(uintptr_t(4096 + 8));
  EXPECT_EQ(detfuse_attention_backward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("args.workspace: must be 256-byte aligned"), std::string::npos) << last();
  a = attn_full_args();
  s = detfuse_selection{DETFUSE_SELECT_TUNED, 0, nullptr, nullptr};
  s.kind = 9;
  EXPECT_EQ(detfuse_attention_forward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("selection.kind: must be 0 (name), 1 (heuristic) or 2 (tuned), got 9"), std::string::npos)
      << last();
  // Tuned is accepted: without a GPU the lookup stops at the device check
  // (a missing store is no error: the heuristic would answer).
  if (detfuse_device_count() == 0) {
    detfuse_choice c;
    size_t ws = 0;
    s = detfuse_selection{DETFUSE_SELECT_TUNED, 0, nullptr, "/nonexistent/detfuse.db"};
    EXPECT_EQ(detfuse_attention_forward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_NO_DEVICE) << last();
    EXPECT_EQ(detfuse_attention_choose(&p, DETFUSE_ATTENTION_BACKWARD, &s, &c), DETFUSE_ERR_NO_DEVICE) << last();
    EXPECT_NE(last().find("detfuse_attention_choose: no CUDA device available ("), std::string::npos) << last();
    EXPECT_EQ(detfuse_attention_workspace_size(&p, DETFUSE_ATTENTION_BACKWARD, &s, &ws), DETFUSE_ERR_NO_DEVICE)
        << last();
  }
  // A bad name is reported before the device check.
  s = detfuse_selection{DETFUSE_SELECT_NAME, 0, "attention.bf16.nope", nullptr};
  EXPECT_EQ(detfuse_attention_forward(&p, &a, &s, nullptr, nullptr), DETFUSE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("detfuse_attention_forward: selection.name: no attention variant named"), std::string::npos)
      << last();
}

TEST(CApiAttention, GpuCallsWithoutDeviceSayNoCudaDevice) {
  if (detfuse_device_count() > 0) GTEST_SKIP() << "a CUDA device is present; this test is for machines without one";
  const detfuse_attention_problem p = attn_problem();
  const detfuse_attention_args a = attn_full_args();
  detfuse_choice c;
  size_t ws = 0;
  auto expect_no_device = [&](int32_t st, const char* fn) {
    EXPECT_EQ(st, DETFUSE_ERR_NO_DEVICE) << fn << ": " << last();
    EXPECT_NE(last().find(std::string(fn) + ": no CUDA device available ("), std::string::npos) << last();
  };
  detfuse_selection s = heuristic();
  expect_no_device(detfuse_attention_choose(&p, DETFUSE_ATTENTION_FORWARD, &s, &c), "detfuse_attention_choose");
  expect_no_device(detfuse_attention_workspace_size(&p, DETFUSE_ATTENTION_BACKWARD, &s, &ws),
                   "detfuse_attention_workspace_size");
  expect_no_device(detfuse_attention_forward(&p, &a, &s, nullptr, &c), "detfuse_attention_forward");
  const std::string name = first_attention("attention.bf16.fma.owning.");
  s = detfuse_selection{DETFUSE_SELECT_NAME, 0, name.c_str(), nullptr};
  expect_no_device(detfuse_attention_backward(&p, &a, &s, nullptr, &c), "detfuse_attention_backward");
}

// The message is per thread: a failure on another thread does not change it.
TEST(CApi, LastErrorIsThreadLocal) {
  detfuse_flce_problem p = small_problem();
  p.N = 0;
  ASSERT_EQ(detfuse_flce_problem_key(&p, nullptr, 0), DETFUSE_ERR_INVALID_ARGUMENT);
  const std::string mine = last();
  std::string theirs;
  std::thread t([&] {
    theirs = detfuse_last_error();
    detfuse_flce_problem q = small_problem();
    q.D = 0;
    detfuse_flce_problem_key(&q, nullptr, 0);
    theirs += "|" + std::string(detfuse_last_error());
  });
  t.join();
  EXPECT_EQ(theirs.substr(0, theirs.find('|')), "");
  EXPECT_NE(theirs.find("problem.D"), std::string::npos) << theirs;
  EXPECT_EQ(last(), mine);
}

}  // namespace
