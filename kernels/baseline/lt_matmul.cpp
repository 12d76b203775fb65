// cuBLASLt matmul wrapper (see lt_matmul.h for the layout mapping and the
// determinism argument).
#include "kernels/baseline/lt_matmul.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <library_types.h>

#include <string>
#include <utility>

#include "kernels/common/cuda_check.h"

namespace detfuse::baseline {

// cuBLASLt is opened on first use (dlopen), not linked: loading
// libcublasLt.so costs every process ~0.17 s and ~210 MB of touched pages
// (measured on the CPU machine: a program that only links it, 25 k minor page
// faults), which the command, the C ABI's users and each of CI's ~1400 test
// processes paid whether or not they ran a cuBLASLt GEMM. The functions below
// are the only cuBLASLt entry points detfuse calls; the header still gives
// their types.
#define DETFUSE_LT_FUNCTIONS(X)                                                                            \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtGetStatusString)                 \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)               \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)           \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmul)

namespace {

struct LtApi {
#define DETFUSE_LT_MEMBER(name) decltype(&::name) name = nullptr;
  DETFUSE_LT_FUNCTIONS(DETFUSE_LT_MEMBER)
#undef DETFUSE_LT_MEMBER
};

// The library of the toolkit detfuse was built with (its major version's
// soname), found as the dynamic loader finds libraries, then in the toolkit's
// library folder CMake found at configure time.
LtApi open_lt() {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string tried;
  void* lib = nullptr;
  for (const std::string& path : {soname, std::string(DETFUSE_CUBLASLT_DIR) + "/" + soname}) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* why = dlerror();
    tried += "\n  " + path + ": " + (why ? why : "not found");
  }
  if (!lib)
    throw Error("cuBLASLt (the cublaslt engine and the baseline GEMMs) could not be loaded:" + tried +
                "\n(install the CUDA toolkit's cuBLAS, or put its library folder on LD_LIBRARY_PATH)");
  LtApi api;
#define DETFUSE_LT_LOAD(name)                                                                  \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name));                         \
  if (!api.name) throw Error("cuBLASLt: " + soname + " has no " #name " (a different toolkit's library?)");
  DETFUSE_LT_FUNCTIONS(DETFUSE_LT_LOAD)
#undef DETFUSE_LT_LOAD
  return api;  // the library stays open for the process
}

// Opened once (a failed open throws and is tried again on the next call).
const LtApi& lt() {
  static const LtApi api = open_lt();
  return api;
}

}  // namespace

void check_cublas(cublasStatus_t st, const char* expr, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " + lt().cublasLtGetStatusName(st) +
              " (" + lt().cublasLtGetStatusString(st) + ")");
}

// Descriptors and the algorithm of one problem key. Destroyed with the context.
struct LtContext::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
  ~Plan() {
    if (c) lt().cublasLtMatrixLayoutDestroy(c);
    if (b) lt().cublasLtMatrixLayoutDestroy(b);
    if (a) lt().cublasLtMatrixLayoutDestroy(a);
    if (op) lt().cublasLtMatmulDescDestroy(op);
  }
};

LtContext::LtContext(size_t workspace_bytes) : workspace_(workspace_bytes) {
  DETFUSE_CUBLAS_CHECK(lt().cublasLtCreate(&handle_));
}

LtContext::~LtContext() {
  plans_.clear();
  if (handle_) lt().cublasLtDestroy(handle_);
}

LtContext::Plan* LtContext::find(const std::string& key) {
  auto it = plans_.find(key);
  return it == plans_.end() ? nullptr : it->second.get();
}

LtContext::Plan* LtContext::insert(const std::string& key, std::unique_ptr<Plan> plan) {
  return plans_.insert_or_assign(key, std::move(plan)).first->second.get();
}

namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }
const char* major_name(Major m) { return m == Major::K ? "K" : "MN"; }

// Largest power of two <= 256 dividing the address (cuBLASLt's alignment
// preference; the heuristic otherwise assumes 256-byte aligned pointers).
uint32_t alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (u % a) != 0) a /= 2;
  return a;
}

}  // namespace

std::string lt_plan_key(DType in_dtype, Major am, Major bm, int M, int N, int K, int64_t lda, int64_t ldb,
                        DType c_dtype, int64_t ldc, const void* A, const void* B, const void* C) {
  return std::string("in=") + to_string(in_dtype) + ",c=" + to_string(c_dtype) + ",am=" + major_name(am) +
         ",bm=" + major_name(bm) + ",M=" + std::to_string(M) + ",N=" + std::to_string(N) +
         ",K=" + std::to_string(K) + ",lda=" + std::to_string(lda) + ",ldb=" + std::to_string(ldb) +
         ",ldc=" + std::to_string(ldc) + ",al=" + std::to_string(alignment(A)) + "/" +
         std::to_string(alignment(B)) + "/" + std::to_string(alignment(C));
}

void lt_matmul(LtContext& ctx, DType in_dtype, Major am, Major bm, int M, int N, int K, const void* A,
               int64_t lda, const void* B, int64_t ldb, void* C, DType c_dtype, int64_t ldc, float alpha,
               float beta, cudaStream_t stream) {
  if (M < 0 || N < 0 || K < 0)
    throw invalid_argument("lt_matmul: negative size M=" + std::to_string(M) + " N=" + std::to_string(N) +
                           " K=" + std::to_string(K));
  if (in_dtype == DType::f32 && c_dtype == DType::bf16)
    throw invalid_argument("lt_matmul: c_dtype bf16 needs in_dtype bf16 (fp32 inputs give fp32 C)");
  if (M == 0 || N == 0) return;
  if (!C) throw invalid_argument("lt_matmul: C is null");
  if (ldc < N) throw invalid_argument("lt_matmul: ldc = " + std::to_string(ldc) + " < N = " + std::to_string(N));
  const size_t c_bytes = dtype_bytes(c_dtype);
  if (K == 0) {
    if (beta != 0.f) throw invalid_argument("lt_matmul: K == 0 with beta != 0 is not supported");
    DETFUSE_CUDA_CHECK(cudaMemset2DAsync(C, size_t(ldc) * c_bytes, 0, size_t(N) * c_bytes, size_t(M), stream));
    return;
  }
  if (!A) throw invalid_argument("lt_matmul: A is null");
  if (!B) throw invalid_argument("lt_matmul: B is null");
  const int64_t need_a = am == Major::K ? K : M;
  const int64_t need_b = bm == Major::K ? K : N;
  if (lda < need_a)
    throw invalid_argument("lt_matmul: lda = " + std::to_string(lda) + " < " + std::to_string(need_a));
  if (ldb < need_b)
    throw invalid_argument("lt_matmul: ldb = " + std::to_string(ldb) + " < " + std::to_string(need_b));

  const std::string key = lt_plan_key(in_dtype, am, bm, M, N, K, lda, ldb, c_dtype, ldc, A, B, C);
  LtContext::Plan* plan = ctx.find(key);
  if (!plan) {
    auto fresh = std::make_unique<LtContext::Plan>();
    const cudaDataType_t tin = cuda_type(in_dtype), tc = cuda_type(c_dtype);
    // fp32 accumulation and scaling; COMPUTE_32F (not _FAST_TF32) keeps fp32 exact.
    DETFUSE_CUBLAS_CHECK(lt().cublasLtMatmulDescCreate(&fresh->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // cuBLASLt's A is our B: [N x K] after op.
    const cublasOperation_t ta = bm == Major::K ? CUBLAS_OP_T : CUBLAS_OP_N;
    // cuBLASLt's B is our A: [K x M] after op.
    const cublasOperation_t tb = am == Major::K ? CUBLAS_OP_N : CUBLAS_OP_T;
    DETFUSE_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    DETFUSE_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(fresh->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (bm == Major::K)
      DETFUSE_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&fresh->a, tin, uint64_t(K), uint64_t(N), ldb));
    else
      DETFUSE_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&fresh->a, tin, uint64_t(N), uint64_t(K), ldb));
    if (am == Major::K)
      DETFUSE_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&fresh->b, tin, uint64_t(K), uint64_t(M), lda));
    else
      DETFUSE_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&fresh->b, tin, uint64_t(M), uint64_t(K), lda));
    DETFUSE_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&fresh->c, tc, uint64_t(N), uint64_t(M), ldc));

    cublasLtMatmulPreference_t pref = nullptr;
    DETFUSE_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceCreate(&pref));
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { lt().cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    const size_t ws = ctx.workspace_bytes();
    const LtApi& api = lt();
    DETFUSE_CUBLAS_CHECK(
        api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t al_a = alignment(B), al_b = alignment(A), al_c = alignment(C);  // cuBLASLt's A is our B
    DETFUSE_CUBLAS_CHECK(
        api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    DETFUSE_CUBLAS_CHECK(
        api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    DETFUSE_CUBLAS_CHECK(
        api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    DETFUSE_CUBLAS_CHECK(
        api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));

    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    DETFUSE_CUBLAS_CHECK(lt().cublasLtMatmulAlgoGetHeuristic(ctx.handle(), fresh->op, fresh->a, fresh->b, fresh->c,
                                                             fresh->c, pref, 1, &result, &returned));
    if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS)
      throw Error("lt_matmul: cuBLASLt found no algorithm for " + key);
    fresh->algo = result.algo;
    fresh->workspace_bytes = result.workspaceSize;
    plan = ctx.insert(key, std::move(fresh));
  }
  DETFUSE_CUBLAS_CHECK(lt().cublasLtMatmul(ctx.handle(), plan->op, &alpha, B, plan->a, A, plan->b, &beta, C,
                                           plan->c, C, plan->c, &plan->algo, ctx.workspace(), ctx.workspace_bytes(),
                                           stream));
}

}  // namespace detfuse::baseline
