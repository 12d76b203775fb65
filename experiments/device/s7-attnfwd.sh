#!/usr/bin/env bash
# The persistent attention forward (issue 16, item 2: `ps1`, one CTA per SM and
# a static tile scheduler, kernels/attention/wgmma/fwd_tile_scheduler.h) on the
# H200: run from the repo root with a Release build in ./build
# (DETFUSE_WGMMA=ON); logs under $OUT; about 2 minutes (the timeouts, caps,
# add up to under 3). Stages:
#   1. the tile-order test (CPU) and the wgmma forward tests: every forward
#      variant (the four ps1 ones too) against the float64 reference with 5
#      repeats, and the ps1 ones with grids of 1 and 7 CTAs and the full grid
#      on problems of more tiles than SMs (AttentionWgmmaGpu.Persistent*),
#      and the family's cases (tests/attention) for the ps1 variants;
#   2. compute-sanitizer memcheck, racecheck, synccheck on the sanitizer-sized
#      persistent case (all four ps1 configurations, 2 CTAs over 12 tiles);
#   3. `detfuse bench attention` (forward TFLOP/s), each ps1 variant (and its
#      qs2 form: two Q buffers) beside the one it was made from, at B=4, H=32, S=4096, d=128 and d=64, causal and
#      not, and B=1, H=16, S=8192, d=128 causal (3 repeats).
# Look for: PASSED lines (no FAILED), "ERROR SUMMARY: 0 errors" three times,
# and in the bench rows the fwd TFLOP/s of each `ps1` row against its pair
# (the README's prediction: kernels/attention/wgmma/README.md, "Persistent").
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

TW=$B/tests/attention_wgmma/test_attention_wgmma
DF=$B/detfuse
[ -x "$DF" ] || DF=$B/cli/detfuse

# 1. tests (forward only: the backward's are s7-attnbwd's)
run order_cpu 5 "$B/tests/attention_wgmma/test_fwd_tile_order"
run tests_ps 45 "$TW" --gtest_filter='AttentionWgmmaGpu.Persistent*'
run tests_fwd 45 "$TW" --gtest_filter='AttentionWgmma.*:AttentionWgmmaGpu.*-AttentionWgmmaGpu.Persistent*'
# the family's cases (tests/attention: every registered variant) for the ps1 ones
run tests_family 40 "$B/tests/attention/test_attention_gpu" --gtest_filter='*ps1*'

# 2. sanitizers
F='AttentionWgmmaGpu.PersistentSanitizerSized'
run memcheck_ps 15 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run racecheck_ps 20 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run synccheck_ps 15 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter="$F"

# 3. bench, ps1 beside the variant it was made from
W=attention.bf16.wgmma.fwd
V128="--variant $W.br128_bc128_st2_ov1_pp0_d128 --variant $W.br128_bc128_st2_ov1_pp0_ps1_d128
      --variant $W.br128_bc128_st2_ov1_pp0_ps1_qs2_d128
      --variant $W.br128_bc128_st2_ov1_pp1_d128 --variant $W.br128_bc128_st2_ov1_pp1_ps1_d128
      --variant $W.br128_bc128_st2_ov1_pp1_ps1_qs2_d128
      --variant $W.br128_bc176_st2_ov0_pp0_d128 --variant $W.br128_bc176_st2_ov0_pp0_ps1_d128"
V64="--variant $W.br128_bc128_st3_ov1_pp0_d64 --variant $W.br128_bc128_st3_ov1_pp0_ps1_d64
     --variant $W.br128_bc128_st3_ov1_pp0_ps1_qs2_d64"
run bench_d128 15 "$DF" bench attention --shape 4,32,32,4096,4096,128 $V128 --repeats 3
run bench_d128_causal 15 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $V128 --repeats 3
run bench_d64 12 "$DF" bench attention --shape 4,32,32,4096,4096,64 $V64 --repeats 3
run bench_d64_causal 12 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $V64 --repeats 3
run bench_8k_causal 15 "$DF" bench attention --shape 1,16,16,8192,8192,128 --causal $V128 --repeats 3

{
  echo
  echo "--- tests"
  for f in order_cpu tests_ps tests_fwd tests_family; do
    echo "# $f"
    grep -hE "^\[  (PASSED|FAILED|SKIPPED) \]|^\[       OK \] .*Persistent|^\[  FAILED  \] " "$OUT/$f.log" | head -30
  done
  grep -hE "Failure|error:" "$OUT"/tests_ps.log "$OUT"/tests_fwd.log "$OUT"/tests_family.log | head -10
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_ps.log "$OUT"/racecheck_ps.log "$OUT"/synccheck_ps.log
  echo "--- bench (forward TFLOP/s; 3 repeats)"
  for f in "$OUT"/bench*.log; do
    echo "# $(basename "$f" .log)"
    grep -E "^variant|^attention\.bf16|detfuse bench:|rror" "$f" | grep -v "^===" | cut -c1-150
  done
  echo "--- summary"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
