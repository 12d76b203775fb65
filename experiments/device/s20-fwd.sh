#!/usr/bin/env bash
# Session 20 on the H200 (issue 16): FlashAttention-4's forward launches, not persistent
# (interface.py's _tile_size_fwd_sm90 and flash_fwd_sm90.py: one CTA a tile, the intra-warpgroup
# overlap, the warp-scheduler barrier between the consumer warpgroups; d64 192 x 128 in three
# warpgroups, d128 128 x 128 in two): `br192 rd1 ot1`, `br192 pp1 rd1 ot1` (the ping-pong as a ring
# of three), `br128 rd1 ot1` at d64, `pp1 rd1 ot1` at d128, beside the heuristic's persistent ones.
# Calls made back to back on one warm machine:
#   STAGE=1, carry [".debs", ".deps"]: the whole build (build_there.sh), the forward's GPU tests
#            (float64 reference: test_attention_wgmma's AttentionWgmmaGpu.* / AttentionWgmma.*, the
#            layout tests, every wgmma registry case of test_attention_gpu), memcheck / racecheck /
#            synccheck on the sanitizer-sized cases (TmaOSanitizerSized holds the new ones), then the
#            benches in one order.
#   STAGE=2 (warm): the benches again, each variant list in the other order (ORDER=ab: the first).
# Prediction: br192 non-persistent at d64 causal at or below the persistent br128's 0.695 ms (FA4's
# 0.59 is this launch); pp1 non-persistent at d128 within 2% of ps1 rd1 ot1 (session 17: the
# persistent pp1 was 0-7% slower).
set -uo pipefail
source "$(dirname "$0")/lib.sh"  # OUT (made), run, sanitize3, attention_bins
W=attention.bf16.wgmma
F=$W.fwd
F128="br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov1_pp1_rd1_ot1_d128 br128_bc128_st2_ov1_pp0_rd1_ot1_d128"
F64="br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64 br192_bc128_st3_ov1_pp0_rd1_ot1_d64
     br192_bc128_st3_ov1_pp1_rd1_ot1_d64 br128_bc128_st3_ov1_pp0_rd1_ot1_d64"
reversed() { echo "$@" | tr ' ' '\n' | awk 'NF' | tac | tr '\n' ' '; }
# benches TAG D128 D64: the forward variants at the issue's rows (d64 first), each while the call
# has time (BENCH_UNTIL: seconds since the script started, default 520).
benches() {
  local tag=$1 fv128="" fv64="" n s
  for n in $2; do fv128="$fv128 --variant $F.$n"; done
  for n in $3; do fv64="$fv64 --variant $F.$n"; done
  for s in "fwd64c 4,32,32,4096,4096,64 --causal" "fwd64 4,32,32,4096,4096,64" \
           "fwd128 4,32,32,4096,4096,128" "fwd128c 4,32,32,4096,4096,128 --causal" \
           "fwd128g 4,32,8,4096,4096,128 --causal" "fwd8k 1,16,16,8192,8192,128 --causal"; do
    set -- $s
    [ "$SECONDS" -lt "${BENCH_UNTIL:-520}" ] || { echo "s20-fwd: no time left for $1"; continue; }
    if [ "$1" = fwd64c ] || [ "$1" = fwd64 ]; then fv=$fv64; else fv=$fv128; fi
    run "${1}_$tag" 60 "$DF" bench attention --shape "$2" ${3:-} $fv --repeats 5
  done
}
report() {
  {
    cat "$OUT/gpu.txt" 2>/dev/null
    [ -f "$OUT/tests_fwd.log" ] && test_report tests_fwd tests_layout tests_gpu
    grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log 2>/dev/null
    for f in "$OUT"/fwd*.log; do
      echo "=== $(basename "$f" .log)"
      grep -hE "^attention\." "$f" | sed "s|^$F.||" | cut -c1-120
    done
    cat "$SUMMARY"
  } > "$OUT/report.txt"
  cat "$OUT/report.txt"
}
gpu_line "$OUT/gpu.txt"
case ${STAGE:-1} in
  1)
    DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
    attention_bins  # after the build: DF is build/detfuse once it exists
    { grep -c "Registers are spilled" build.log; grep -B1 "Registers are spilled" build.log | grep -o "fwd_[A-Za-z0-9_]*" | sort | uniq -c; } > "$OUT/spills.txt" 2>&1
    run tests_fwd 200 "$TW" --gtest_filter='AttentionWgmmaGpu.*:AttentionWgmma.*'
    run tests_layout 30 "$B/tests/attention_wgmma/test_attention_wgmma_fwd_layout"
    run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
    sanitize3 fwd2 "$TW" --gtest_filter='AttentionWgmmaGpu.TmaOSanitizerSized'
    sanitize3 fwd3 "$TW" --gtest_filter='AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'
    benches ab "$F128" "$F64"
    report ;;
  2)  # ORDER=ab: the first order again (stage 1's benches, when it ran out of time)
    attention_bins
    if [ "${ORDER:-ba}" = ab ]; then benches ab "$F128" "$F64"; else benches ba "$(reversed $F128)" "$(reversed $F64)"; fi
    report ;;
esac
