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
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/env.txt"
run engines 150 "$B/tests/engines/test_engines"
run flce_api 120 "$B/tests/flce/test_flce_gpu" \
  --gtest_filter='FlceBadInput*:*MatchesReference*bf16_mma_owning_bm128_bn128*mb512*:*MatchesReference*cublaslt_owning_mb1024*:*RepeatsBitwise*fp32_fma_partials_bm64*'
run attention_api 120 "$B/tests/attention/test_attention_gpu" \
  --gtest_filter='AttentionGpuApi*:AttentionGpuChunkedPartials*:*Correct*bf16_fma_owning_br64_bc64_w8_d64*'
run registry_cpu 30 "$B/tests/common/test_common" --gtest_filter='Registry*:Strategy*'
run gemm_f32_probe 120 "$B/experiments/gemm_f32_probe" 4096
echo "frontdoor GPU checks (logs in $OUT):"
cat "$SUMMARY"
grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT"/*.log | sort | uniq -c
echo "gemm_f32_probe (fp32 engine vs cuBLASLt SGEMM, 4096^3):"
grep -E "^f32 " "$OUT/gemm_f32_probe.log"
