#!/usr/bin/env bash
# GPU checks of the frontdoor branch (one vocabulary, loud tests), from the
# repository root with a prebuilt Release build in ./build; logs under $OUT.
# What changed on the device path: CUDA checks in kernels/common/cuda_check.h,
# one Strategy and one Major shared by the families, flce::run and
# attention::run through kernels/run_variant.h (can_run, then the caller's
# workspace or a temporary one), the bf16 GEMM test without its
# __has_include guard, the fp32 GEMM timing moved to experiments/gemm_f32_probe.
# About 2-3 minutes on an H200.
set -u
B=${BUILD:-build}
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
declare -a SUMMARY
run() {  # run NAME TIMEOUT CMD...: log to $OUT/NAME.log, remember the exit code
  local name=$1 t=$2; shift 2
  local start=$SECONDS
  timeout -s INT -k 10 "$t" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  SUMMARY+=("$(printf '%-22s exit %-3s %4d s  %s' "$name" "$rc" $((SECONDS - start)) \
    "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-90)")")
}
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/env.txt" 2>&1
run engines 150 "$B/tests/engines/test_engines"
run flce_api 120 "$B/tests/flce/test_flce_gpu" \
  --gtest_filter='FlceBadInput*:*MatchesReference*bf16_mma_owning_bm128_bn128*mb512*:*MatchesReference*cublaslt_owning_mb1024*:*RepeatsBitwise*fp32_fma_partials_bm64*'
run attention_api 120 "$B/tests/attention/test_attention_gpu" \
  --gtest_filter='AttentionGpuApi*:AttentionGpuChunkedPartials*:*Correct*bf16_fma_owning_br64_bc64_w8_d64*'
run registry_cpu 30 "$B/tests/common/test_common" --gtest_filter='Registry*:Strategy*'
run gemm_f32_probe 120 "$B/experiments/gemm_f32_probe" 4096
echo "frontdoor GPU checks (logs in $OUT):"
printf '%s\n' "${SUMMARY[@]}"
echo "gemm_f32_probe (fp32 engine vs cuBLASLt SGEMM, 4096^3):"
grep -E "^f32 " "$OUT/gemm_f32_probe.log"
