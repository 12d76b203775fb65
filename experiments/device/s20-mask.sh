#!/usr/bin/env bash
# Session 20 on the H200 (issue 16; ran at c2a1385, now branch s20-r2p: measured flat, not on main):
# the forward's mask as FlashAttention-4's R2P mask (fwd_softmax.cuh
# FwdMask::apply: per row one bit mask of the visible values, ptxas's R2P moves it into predicates,
# a select per value; before: two compares with immediates and a select per value). ncu of the d64
# causal forward (session 20, build edc44d6): 14.6 M ISETP against FA4's 2.4 M, 290.8 M instructions,
# 694 us. Static SASS here: 357 -> 113 ISETP a forward kernel, 44 R2P. Prediction: ~11 M fewer
# instructions at d64 causal (-4%), the forward 1-3% faster on the causal rows, the same bits.
# One cold call, carry [".debs", ".deps"]: the build, the forward's GPU tests (float64 reference on
# every forward variant, causal / window / Sq != Sk / odd lengths / all-masked rows; persistent and
# O-tile cases), the wgmma registry cases, memcheck / racecheck / synccheck on the sanitizer-sized
# cases, the heuristic's forwards at the causal rows (both orders), then ncu of the d64 and d128
# causal forwards (instructions, ISETP / R2P / FSEL).
set -uo pipefail
source "$(dirname "$0")/lib.sh"  # OUT (made), run, sanitize3, attention_bins
W=attention.bf16.wgmma
F=$W.fwd
gpu_line "$OUT/gpu.txt"
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
{ grep -c "Registers are spilled" build.log; grep -B1 "Registers are spilled" build.log | grep -o "fwd_[A-Za-z0-9_]*" | sort | uniq -c; } > "$OUT/spills.txt" 2>&1
run tests_fwd 200 "$TW" --gtest_filter='AttentionWgmmaGpu.*:AttentionWgmma.*'
run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
run tests_variants 30 "$B/tests/attention/test_attention_variants"
sanitize3 fwd2 "$TW" --gtest_filter='AttentionWgmmaGpu.PersistentSanitizerSized:AttentionWgmmaGpu.TmaOSanitizerSized'
sanitize3 fwd3 "$TW" --gtest_filter='AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'
F64C=br192_bc128_st3_ov1_pp0_rd1_ot1_d64
F128=br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128
O64="$F64C br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64"
for o in ab ba; do
  fv=""; for n in $O64; do fv="$fv --variant $F.$n"; done
  run "fwd64c_$o" 60 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $fv --repeats 5
  run "fwd128c_$o" 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal --variant "$F.$F128" --repeats 5
  run "fwd8k_$o" 60 "$DF" bench attention --shape 1,16,16,8192,8192,128 --causal --variant "$F.$F128" --repeats 5
  O64=$(echo "$O64" | tr ' ' '\n' | tac | tr '\n' ' ')
done
M="--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details"
for s in "64c 4,32,32,4096,4096,64 $F64C" "128c 4,32,32,4096,4096,128 $F128"; do
  set -- $s
  run "ncu_fwd$1" 90 ncu --clock-control none --section SpeedOfLight --section LaunchStats $M -k regex:attention_fwd_wgmma \
    --launch-count 1 "$DF" bench attention --shape "$2" --causal --variant "$F.$3" --repeats 1
done
{
  cat "$OUT/gpu.txt" "$OUT/spills.txt"
  test_report tests_fwd tests_gpu tests_variants
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log 2>/dev/null
  for f in "$OUT"/fwd*.log; do grep -hE "^attention\." "$f" | sed "s|^$F.||; s|^|$(basename "$f" .log) |" | cut -c1-120; done
  for f in "$OUT"/ncu_*.log; do
    echo "=== $(basename "$f" .log)"
    grep -E "^ +Duration|smsp__inst_executed.sum " "$f" | tr -s ' '
    grep -oE "(ISETP|R2P|FSEL|FMNMX): [0-9,]+" "$f" | head -4 | tr '\n' ' '; echo
  done
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
