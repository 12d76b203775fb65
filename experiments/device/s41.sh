#!/usr/bin/env bash
# Session 41 (issue 16): main's head (7e43adf: the forward launch reads SMs / L2 from cached_device; never run on a
# GPU) through the GPU tests, and the persistent causal forward's group sizes that the H100 probes suggested.
#   PART=first, carry ["dist"] (pack.sh of the build): forward ms (`bench attention`, 5 repeats), in alternation,
#          three rounds: row 7 (2,32,8,8192,128 causal) default (22 heads as a snake) against the snake over groups
#          of 6 and of 11; rows 2 and 3 (4,32,32 / 4,32,8,4096,128 causal) default against the snake over 11.
#          Prediction (three H100 probes, sessions 39-40: row 7 g6 snake 1.743-1.758 ms against 1.834-1.849): row 7's
#          groups of 6 ~4% faster, 11 between; rows 2 and 3 within the spread (2-3%).
#          Then the whole wgmma GPU test binary, test_attention_variants, memcheck / racecheck / synccheck on
#          TmaOSanitizerSized with DETFUSE_FWD_GROUP=3, and with what is left s40.sh PART=rows (row 4's d64
#          forwards, the seven rows' fwd+bwd) into $OUT/rows.
#   PART=r7more: row 7 only, default / g6 snake / g5 snake / g8 snake, four rounds (a second opinion).
#   PART=r2more: row 2 only, default (12 heads, round robin) / the snake over 11 / 12 / 10, four rounds (PART=first
#          had the snake over 11 at 0.937 / 0.984 ms against the default's 1.026 / 1.002).
#   PART=rule: the build with the rule of session 41 (no GQA: the smallest group within 1 point of the model's best;
#          row 2 takes the snake over 11): row 2's forward with it against the order before (DETFUSE_FWD_GROUP=12
#          DETFUSE_FWD_SNAKE=0), three rounds, then the persistent forward's GPU tests and the forward's GPU tests.
#          Prediction (PART=first, r2more): -4 to -6% at row 2.
# $OUT/report.txt and one archive of the logs (plus rows/'s).
set -uo pipefail
here=$(dirname "$0")
source "$here/lib.sh"
attention_bins
W=attention.bf16.wgmma
export UNTIL=${LIMIT:-560}
f128=$W.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128
# fb LOG SHAPE [ENV...]: the d128 heuristic forward at SHAPE (causal), 5 repeats, with the ENV assignments.
fb() {
  local log=$1 shape=$2
  shift 2
  brun "bench_$log" 30 env "$@" "$DF" bench attention --shape "$shape" --causal --repeats 5 --variant "$f128"
}
r7=2,32,8,8192,8192,128 r2=4,32,32,4096,4096,128 r3=4,32,8,4096,4096,128
# snakes NAME SHAPE G...: the default against the snake over groups of each G, four rounds in alternation; the
# report and an archive (s41NAME-logs.tgz).
snakes() {
  local name=$1 shape=$2 k g
  shift 2
  gpu_line "$OUT/gpu.txt"
  for k in 1 2 3 4; do
    fb "${name}_default_$k" "$shape"
    for g in "$@"; do fb "${name}_g${g}snake_$k" "$shape" DETFUSE_FWD_GROUP="$g" DETFUSE_FWD_SNAKE=2; done
  done
  REPORT_TESTS=" " fwd_report "s41$name" "Duration"
  rm -f "$OUT/summary.txt" "$OUT/gpu.txt"
}
case ${PART:-first} in
  first)
    gpu_line "$OUT/gpu.txt"
    for k in 1 2 3; do
      fb "r7_default_$k" $r7
      fb "r7_g6snake_$k" $r7 DETFUSE_FWD_GROUP=6 DETFUSE_FWD_SNAKE=2
      fb "r7_g11snake_$k" $r7 DETFUSE_FWD_GROUP=11 DETFUSE_FWD_SNAKE=2
    done
    for k in 1 2; do
      fb "r2_default_$k" $r2
      fb "r2_g11snake_$k" $r2 DETFUSE_FWD_GROUP=11 DETFUSE_FWD_SNAKE=2
      fb "r3_default_$k" $r3
      fb "r3_g11snake_$k" $r3 DETFUSE_FWD_GROUP=11 DETFUSE_FWD_SNAKE=2
    done
    brun tests_all 170 "$TW" --gtest_brief=1
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    DETFUSE_FWD_GROUP=3 sanitize_gtest fwd 40 'AttentionWgmmaGpu.TmaOSanitizerSized'
    REPORT_TESTS="tests_all tests_var" fwd_report s41first "Duration"
    rm -f "$OUT/summary.txt" "$OUT/gpu.txt"
    ( export OUT=$OUT/rows LIMIT=$((UNTIL - SECONDS)); PART=rows bash "$here/s40.sh" > /dev/null ) ;;
  r7more) snakes r7 $r7 6 5 8 ;;
  rule)
    gpu_line "$OUT/gpu.txt"
    for k in 1 2 3; do
      fb "r2_new_$k" $r2
      fb "r2_old_$k" $r2 DETFUSE_FWD_GROUP=12 DETFUSE_FWD_SNAKE=0
    done
    brun tests_persistent 40 "$TW" --gtest_filter='AttentionWgmmaGpu.Persistent*:AttentionWgmmaGpu.NonPersistent*'
    brun tests_fwd 100 "$TW" --gtest_filter='AttentionWgmma.*:AttentionWgmmaGpu.*'
    REPORT_TESTS="tests_persistent tests_fwd" fwd_report s41rule "Duration"
    rm -f "$OUT/summary.txt" "$OUT/gpu.txt" ;;
  r2more) snakes r2 $r2 11 12 10 ;;
esac
