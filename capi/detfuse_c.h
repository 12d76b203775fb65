/* detfuse C ABI: a stable, exception-free C interface over the C++ API
 * (kernels/flce/flce.h, kernels/attention/attention.h, tuner/tuned.h,
 * kernels/common/digest.h), built as the
 * shared library libdetfuse_c.so. The Python package (python/detfuse) loads it
 * with ctypes; any language with a C FFI can.
 *
 * Conventions:
 *  - Every function returns a detfuse_status (0 = DETFUSE_OK) unless stated.
 *    On failure, detfuse_last_error() returns a message for the calling thread
 *    that names the bad argument ("problem.N: must be >= 1, got 0"); on success
 *    the message is left as it was.
 *  - No C++ exception crosses this interface.
 *  - Arguments are checked (null pointers, enums, sizes, the kMaxDim limit of
 *    kernels/common/problem.h) before anything touches the GPU; a call that
 *    needs a GPU on a machine without one returns DETFUSE_ERR_NO_DEVICE.
 *  - Pointers in detfuse_flce_args and detfuse_attention_args are device pointers; `stream` is a
 *    cudaStream_t passed as void* (NULL: the legacy default stream).
 *  - All structs are plain data; detfuse_flce_problem_init() and
 *    detfuse_attention_problem_init() fill defaults.
 * Bump DETFUSE_C_ABI_VERSION whenever a struct layout or signature changes.
 */
#ifndef DETFUSE_C_H_
#define DETFUSE_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define DETFUSE_C_API __attribute__((visibility("default")))
#else
#define DETFUSE_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* 1: FLCE and digests. 2: attention entry points (detfuse_attention_*).
 * 3: detfuse_attention_problem.softcap and .window.
 * 4: detfuse_flce_choose_level and detfuse_attention_choose_level (a tuned
 *    choice at a determinism level); every version-3 function and struct is
 *    unchanged.
 * 5: detfuse_flce_problem.accumulate_dW (was reserved0, which had to be 0, so a
 *    version-4 caller's problem means the same).
 * 6: detfuse_scale_unless_one; everything else unchanged. */
#define DETFUSE_C_ABI_VERSION 6

typedef enum detfuse_status {
  DETFUSE_OK = 0,
  DETFUSE_ERR_INVALID_ARGUMENT = 1, /* bad argument; the message names it */
  DETFUSE_ERR_NO_DEVICE = 2,        /* the call needs a CUDA device and there is none */
  DETFUSE_ERR_RUNTIME = 3,          /* CUDA or library failure at run time */
  DETFUSE_ERR_OUT_OF_MEMORY = 4,    /* host allocation failed */
  DETFUSE_ERR_INTERNAL = 5          /* anything else (a bug: please report) */
} detfuse_status;

typedef enum detfuse_dtype { DETFUSE_DTYPE_F32 = 0, DETFUSE_DTYPE_BF16 = 1 } detfuse_dtype;
typedef enum detfuse_reduction {
  DETFUSE_REDUCTION_MEAN = 0,
  DETFUSE_REDUCTION_SUM = 1,
  DETFUSE_REDUCTION_NONE = 2
} detfuse_reduction;
typedef enum detfuse_flce_mode {
  DETFUSE_MODE_FORWARD = 0,          /* loss, lse */
  DETFUSE_MODE_FORWARD_BACKWARD = 1, /* loss, lse, dX, dW */
  DETFUSE_MODE_BACKWARD = 2          /* dX, dW from a saved lse (args.lse_in) */
} detfuse_flce_mode;
typedef enum detfuse_select_kind {
  DETFUSE_SELECT_NAME = 0,      /* selection.name: a canonical variant name */
  DETFUSE_SELECT_HEURISTIC = 1, /* the built-in heuristic */
  DETFUSE_SELECT_TUNED = 2      /* tuned choice from selection.db_path (then nearest, then heuristic) */
} detfuse_select_kind;
typedef enum detfuse_choice_source {
  DETFUSE_SOURCE_NAMED = 0,
  DETFUSE_SOURCE_TUNED = 1,
  DETFUSE_SOURCE_NEAREST = 2,
  DETFUSE_SOURCE_HEURISTIC = 3
} detfuse_choice_source;

/* One FLCE problem: detfuse::FlceProblem field for field (semantics in
 * kernels/common/problem.h). Enums are int32_t for a fixed layout. */
typedef struct detfuse_flce_problem {
  int64_t N, D, V;
  int32_t dtype;          /* detfuse_dtype of X and W */
  int32_t grad_dtype;     /* detfuse_dtype of dX, dW: fp32 or dtype (dX only with accumulate_dW) */
  int64_t ignore_index;   /* negative or >= V */
  int32_t reduction;      /* detfuse_reduction */
  int32_t accumulate_dW;  /* 1: dW += the gradient, dW fp32 whatever grad_dtype (a caller's main-grad
                             buffer; grad_dtype then types dX only); 0: dW = the gradient */
  double label_smoothing; /* [0, 1) */
  double z_loss;          /* lse_square_scale, >= 0 */
  double softcap;         /* 0 disables */
  double grad_output;     /* upstream gradient of the mean/sum loss */
} detfuse_flce_problem;

/* Device pointers (detfuse::FlceArgs). Which are needed depends on the mode:
 * forward: X W y loss lse; forward_backward: + dX dW; backward: X W y lse_in
 * dX dW; dloss for reduction none outside forward. */
typedef struct detfuse_flce_args {
  const void* X;
  const void* W;
  const int64_t* y;
  const float* dloss;
  const float* lse_in;
  float* loss;
  float* lse;
  void* dX;
  void* dW;
  void* workspace; /* may be NULL: the library then allocates and synchronises */
  size_t workspace_size;
} detfuse_flce_args;

typedef struct detfuse_selection {
  int32_t kind;                   /* detfuse_select_kind */
  int32_t allow_nondeterministic; /* TUNED: allow an atomic variant (0 or 1) */
  const char* name;               /* NAME: the canonical variant name */
  const char* db_path;            /* TUNED: the store (NULL: "detfuse.db") */
} detfuse_selection;

#define DETFUSE_NAME_CAP 256
#define DETFUSE_NOTE_CAP 1024

typedef struct detfuse_choice {
  char name[DETFUSE_NAME_CAP];               /* the chosen variant */
  int32_t source;                            /* detfuse_choice_source */
  int32_t deterministic;                     /* what the variant promises run to run */
  double distance;                           /* NEAREST: shape distance */
  char tuned_problem_key[DETFUSE_NOTE_CAP];  /* TUNED/NEAREST: the problem it was measured on */
  char note[DETFUSE_NOTE_CAP];               /* why, one line (truncated to fit) */
} detfuse_choice;

/* DETFUSE_C_ABI_VERSION of the library (compare with the header's). */
DETFUSE_C_API int32_t detfuse_abi_version(void);
/* The library version, "0.1.0". */
DETFUSE_C_API const char* detfuse_version(void);
/* The calling thread's last error message ("" when none). Valid until the
 * thread's next failing call. */
DETFUSE_C_API const char* detfuse_last_error(void);
/* "DETFUSE_ERR_INVALID_ARGUMENT" etc. ("unknown status" otherwise). */
DETFUSE_C_API const char* detfuse_status_name(int32_t status);
/* Usable CUDA devices (0 without a driver or device; never fails). */
DETFUSE_C_API int32_t detfuse_device_count(void);

/* Fills the defaults of detfuse::FlceProblem (bf16, grad fp32, ignore_index
 * -100, mean, grad_output 1, the rest 0; N = D = V = 0). */
DETFUSE_C_API int32_t detfuse_flce_problem_init(detfuse_flce_problem* problem);
/* Validates the problem (no GPU) and writes its canonical key
 * ("flce:N=..,D=..,...") into key[key_cap] when key is not NULL. */
DETFUSE_C_API int32_t detfuse_flce_problem_key(const detfuse_flce_problem* problem, char* key, size_t key_cap);

/* Registered FLCE variants (no GPU). */
DETFUSE_C_API int32_t detfuse_flce_variant_count(int64_t* count);
DETFUSE_C_API int32_t detfuse_flce_variant_name(int64_t index, char* name, size_t name_cap);

/* The variant a selection picks for (problem, mode) and why. NAME needs no
 * GPU; HEURISTIC and TUNED query the current device. */
DETFUSE_C_API int32_t detfuse_flce_choose(const detfuse_flce_problem* problem, int32_t mode,
                                          const detfuse_selection* selection, detfuse_choice* choice);
/* As detfuse_flce_choose, with the determinism level the stored result must
 * have: "run_to_run", "sm_count", "config", "portable" or "none" (any); NULL or
 * "" = the default rule (run_to_run, deterministic by design). Only for a
 * TUNED selection (another kind with a level: DETFUSE_ERR_INVALID_ARGUMENT);
 * an unknown name is DETFUSE_ERR_INVALID_ARGUMENT before the GPU is touched.
 * Without a stored result that has the level, the heuristic answers
 * (source HEURISTIC, the note says its level was never shown). Run the chosen
 * variant with a NAME selection of choice.name. (ABI 4) */
DETFUSE_C_API int32_t detfuse_flce_choose_level(const detfuse_flce_problem* problem, int32_t mode,
                                                const detfuse_selection* selection, const char* level,
                                                detfuse_choice* choice);
/* Workspace bytes the selected variant needs for (problem, mode). */
DETFUSE_C_API int32_t detfuse_flce_workspace_size(const detfuse_flce_problem* problem, int32_t mode,
                                                  const detfuse_selection* selection, size_t* bytes);

/* Runs FLCE on `stream` with the selected variant (validation, can_run,
 * workspace as flce::run). `choice` may be NULL; else it receives the choice.
 * Targets outside [0, V) that are not ignore_index give
 * DETFUSE_ERR_INVALID_ARGUMENT, found after the computation was launched (the
 * call waits for the target count only then, never before the kernels): the
 * outputs of such a call are unspecified. With args.workspace large enough
 * that is the call's only wait for the GPU. */
DETFUSE_C_API int32_t detfuse_flce_run(const detfuse_flce_problem* problem, int32_t mode,
                                       const detfuse_flce_args* args, const detfuse_selection* selection,
                                       void* stream, detfuse_choice* choice);
DETFUSE_C_API int32_t detfuse_flce_forward(const detfuse_flce_problem* problem, const detfuse_flce_args* args,
                                           const detfuse_selection* selection, void* stream,
                                           detfuse_choice* choice);
DETFUSE_C_API int32_t detfuse_flce_forward_backward(const detfuse_flce_problem* problem,
                                                    const detfuse_flce_args* args,
                                                    const detfuse_selection* selection, void* stream,
                                                    detfuse_choice* choice);
DETFUSE_C_API int32_t detfuse_flce_backward(const detfuse_flce_problem* problem, const detfuse_flce_args* args,
                                            const detfuse_selection* selection, void* stream,
                                            detfuse_choice* choice);

/* ------------------------------------------------------------------ attention
 * Exact softmax attention (kernels/attention/attention.h; semantics in
 * kernels/common/problem.h): Q [B,H,Sq,d], K and V [B,Hkv,Sk,d] (GQA: head h
 * reads kv head h / (H/Hkv)), O [B,H,Sq,d], LSE [B,H,Sq] fp32 (natural log).
 * Causal masks are bottom-right aligned (query i sees key j iff
 * j <= i + Sk - Sq); a row that sees no key has O = 0, LSE = -inf and zero
 * gradients. Q, K, V, O, dO, dQ, dK, dV are contiguous, in problem.dtype.
 *
 * Selection: DETFUSE_SELECT_NAME, DETFUSE_SELECT_HEURISTIC or
 * DETFUSE_SELECT_TUNED (as FLCE: the store's best forward+backward result for
 * this GPU and problem, then the nearest tuned shape, then the heuristic; the
 * forward takes a variant that runs the forward, the backward one that runs
 * both passes; choice.source and choice.note say which). Forward and backward
 * select separately: one variant serves both modes unless its can_run refuses
 * one (the wgmma variants are forward only), and the backward may use another
 * variant than the forward (it recomputes the scores from Q, K and the LSE). */

typedef enum detfuse_attention_mode {
  DETFUSE_ATTENTION_FORWARD = 0, /* O, lse */
  DETFUSE_ATTENTION_BACKWARD = 1 /* dQ, dK, dV from Q K V O_in dO lse_in */
} detfuse_attention_mode;

/* detfuse::AttentionProblem field for field. */
typedef struct detfuse_attention_problem {
  int64_t B, H, Hkv, Sq, Sk, d;
  int32_t dtype;  /* detfuse_dtype of Q, K, V, O, dO and the gradients */
  int32_t causal; /* 0 or 1 */
  double scale;   /* softmax scale; 0 means 1/sqrt(d) */
  double softcap; /* 0 disables; > 0: scores capped as softcap*tanh(s/softcap) */
  int64_t window; /* 0 disables; > 0: sliding window of `window` keys ending at the
                     query's bottom-right aligned diagonal (kernels/common/problem.h) */
} detfuse_attention_problem;

/* Device pointers (detfuse::AttentionArgs). forward: Q K V O lse; backward:
 * Q K V dO O_in lse_in dQ dK dV. */
typedef struct detfuse_attention_args {
  const void* Q;
  const void* K;
  const void* V;
  const void* dO;
  const void* O_in;     /* backward: the forward's O */
  const float* lse_in;  /* backward: the forward's LSE */
  void* O;
  float* lse;
  void* dQ;
  void* dK;
  void* dV;
  void* workspace; /* may be NULL: the library then allocates and synchronises */
  size_t workspace_size;
} detfuse_attention_args;

/* Fills the defaults of detfuse::AttentionProblem (bf16, not causal, scale 0,
 * no softcap, no window; every dimension 0). */
DETFUSE_C_API int32_t detfuse_attention_problem_init(detfuse_attention_problem* problem);
/* Validates the problem (no GPU) and writes its canonical key
 * ("attention:B=..,H=..,...") into key[key_cap] when key is not NULL. */
DETFUSE_C_API int32_t detfuse_attention_problem_key(const detfuse_attention_problem* problem, char* key,
                                                    size_t key_cap);

/* Registered attention variants (no GPU). */
DETFUSE_C_API int32_t detfuse_attention_variant_count(int64_t* count);
DETFUSE_C_API int32_t detfuse_attention_variant_name(int64_t index, char* name, size_t name_cap);

/* The variant a selection picks for (problem, mode) and why. NAME checks the
 * name and dtype without a GPU and, where a device is present, the variant's
 * can_run on the current device for this mode (a forward-only variant is
 * refused for the backward with its reason); HEURISTIC and TUNED need a device. */
DETFUSE_C_API int32_t detfuse_attention_choose(const detfuse_attention_problem* problem, int32_t mode,
                                               const detfuse_selection* selection, detfuse_choice* choice);
/* As detfuse_attention_choose, with a determinism level (as
 * detfuse_flce_choose_level). (ABI 4) */
DETFUSE_C_API int32_t detfuse_attention_choose_level(const detfuse_attention_problem* problem, int32_t mode,
                                                     const detfuse_selection* selection, const char* level,
                                                     detfuse_choice* choice);
/* Workspace bytes the selected variant needs for (problem, mode). */
DETFUSE_C_API int32_t detfuse_attention_workspace_size(const detfuse_attention_problem* problem, int32_t mode,
                                                       const detfuse_selection* selection, size_t* bytes);
/* Runs attention on `stream` with the selected variant (validation, can_run,
 * workspace as attention::run). `choice` may be NULL. */
DETFUSE_C_API int32_t detfuse_attention_run(const detfuse_attention_problem* problem, int32_t mode,
                                            const detfuse_attention_args* args, const detfuse_selection* selection,
                                            void* stream, detfuse_choice* choice);
DETFUSE_C_API int32_t detfuse_attention_forward(const detfuse_attention_problem* problem,
                                                const detfuse_attention_args* args,
                                                const detfuse_selection* selection, void* stream,
                                                detfuse_choice* choice);
DETFUSE_C_API int32_t detfuse_attention_backward(const detfuse_attention_problem* problem,
                                                 const detfuse_attention_args* args,
                                                 const detfuse_selection* selection, void* stream,
                                                 detfuse_choice* choice);

/* data[i] *= g for the n elements of `data` (dtype DETFUSE_DTYPE_F32 or _BF16,
 * device memory), with g = *scale read on the device (one float, device
 * memory), unless g == 1: then nothing is read or written. Enqueued on
 * `stream`; the host never waits (no synchronisation). bf16: the fp32 product
 * rounded to nearest even. For a loss's upstream gradient applied to gradients
 * computed in the forward without reading it on the host. */
DETFUSE_C_API int32_t detfuse_scale_unless_one(void* data, int64_t n, int32_t dtype, const float* scale,
                                               void* stream);

/* XXH3-128 of `bytes` bytes as 32 lowercase hex digits plus NUL (hex[33]).
 * The device form copies to the host after synchronising `stream`. */
DETFUSE_C_API int32_t detfuse_digest_device(const void* data, size_t bytes, void* stream, char* hex, size_t hex_cap);
DETFUSE_C_API int32_t detfuse_digest_host(const void* data, size_t bytes, char* hex, size_t hex_cap);

#ifdef __cplusplus
}
#endif

#endif /* DETFUSE_C_H_ */
