#!/usr/bin/env bash
# Session 8, issue 16 item 2: the attention forward flags rd1 (the softmax's
# row max and row sum in four chains per row, a tree at the end) and ot1 (O
# through a shared tile and one TMA bulk store, waited for only before the next
# tile's epilogue), and a longer d128 key tile with ov1 (bc160; FA3's bc176 spills)
# (kernels/attention/wgmma/README.md, "Session 8"). Run from the repo root
# with a Release build in ./build (DETFUSE_WGMMA=ON); logs under $OUT; about
# 2-2.5 minutes (the caps add up to 4.8, each far above its expected time). Stages:
#   1. the forward tests of the new variants: every forward variant against
#      the float64 reference (the walk, 5 repeats: the new ones are in it),
#      the persistent tests (grids of 1, 7 CTAs and the full grid, head
#      groups) of all ps1 configurations, the new ones included, and the
#      ot1 tests (sanitizer-sized case; no O row written past Sq);
#   2. compute-sanitizer memcheck, racecheck, synccheck on the ot1
#      sanitizer-sized case (persistent on 2 CTAs and the full grid, and the
#      non-persistent ot1 variant);
#   3. `detfuse bench attention` forward TFLOP/s, the new variants beside the
#      current best (`ov1 ps1`), B=4 H=32 S=4096 d128 and d64, causal and not
#      (3 repeats).
# Look for: PASSED lines (no FAILED), "ERROR SUMMARY: 0 errors" three times,
# and in the bench rows each rd1 / ot1 / bc160 row against `ov1_pp0_ps1` (the
# README's predictions: "Session 8" in kernels/attention/wgmma/README.md).
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

TW=$B/tests/attention_wgmma/test_attention_wgmma
DF=$B/detfuse
[ -x "$DF" ] || DF=$B/cli/detfuse

# 1. tests (forward only)
run layout_cpu 5 "$B/tests/attention_wgmma/test_attention_wgmma_fwd_layout"
run tests_reg 10 "$TW" --gtest_filter='AttentionWgmma.*'
run tests_ref 60 "$TW" --gtest_filter='AttentionWgmmaGpu.MatchesFloat64Reference*'
run tests_ps 70 "$TW" --gtest_filter='AttentionWgmmaGpu.Persistent*'
run tests_ot 15 "$TW" --gtest_filter='AttentionWgmmaGpu.TmaO*'

# 2. sanitizers on the ot1 sanitizer-sized case
F='AttentionWgmmaGpu.TmaOSanitizerSized'
run memcheck_ot 20 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run racecheck_ot 40 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run synccheck_ot 20 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter="$F"

# 3. bench: the new ones beside the current best (ov1 ps1) and its pp1 form
W=attention.bf16.wgmma.fwd
V128="--variant $W.br128_bc128_st2_ov1_pp0_ps1_d128
      --variant $W.br128_bc128_st2_ov1_pp0_ps1_rd1_d128
      --variant $W.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128
      --variant $W.br128_bc128_st2_ov1_pp1_ps1_rd1_ot1_d128
      --variant $W.br128_bc128_st2_ov1_pp0_rd1_ot1_d128
      --variant $W.br128_bc160_st2_ov1_pp0_ps1_rd1_ot1_d128"
V64="--variant $W.br128_bc128_st3_ov1_pp0_ps1_d64 --variant $W.br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64"
run bench_d128 15 "$DF" bench attention --shape 4,32,32,4096,4096,128 $V128 --repeats 3
run bench_d128_causal 15 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $V128 --repeats 3
run bench_d64 10 "$DF" bench attention --shape 4,32,32,4096,4096,64 $V64 --repeats 3
run bench_d64_causal 10 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $V64 --repeats 3

{
  echo
  echo "--- tests"
  test_report layout_cpu tests_reg tests_ref tests_ps tests_ot
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_ot.log "$OUT"/racecheck_ot.log "$OUT"/synccheck_ot.log
  echo "--- bench (forward TFLOP/s; 3 repeats)"
  for f in "$OUT"/bench*.log; do
    echo "# $(basename "$f" .log)"
    grep -E "^variant|^attention\.bf16|detfuse bench:|rror" "$f" | grep -v "^===" | cut -c1-150
  done
  echo "--- summary"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
