#!/usr/bin/env bash
# Session 22 (issue 16): pb5 / pb6 / pb7, pb3 with the exp of the later query chunks moved after the dP^T
# wait into the dS^T loop (0 / 2 / 6 of d64's 16 chunks before the wait; d128 0 / 1 / 3 of 8), the mask as
# -inf before the exp. Why (ncu source counters of pb3 and FA4's backward kernel, s22-ncu-src.sh): pb3's
# exp phase is 32% of its consumer warps' samples, a burst of 40 back-to-back MUFU.EX2 stalled on wait /
# mio (MUFU gives 16 results a clock an SM); FA4's ptxas places 41 of its 64 MUFU after the dP wait among
# the dS arithmetic (its exp + dS phases 41 k samples against pb3's 51 k). Prediction: the d64 kv kernel
# 4-8% faster, d128 2-5%; dQ / dK / dV bitwise pb3's.
# One cold call, carry [".debs", ".deps"]: build, bench pb3 and pb5-7 (ordered spt1) in both orders at d64
# causal / non-causal and d128 non-causal / causal, the new tests (bits against pb3, float64 reference,
# 20 repeats, sanitizer-sized), the three sanitizers, ncu source counters of pb5 / pb6 at d64 causal.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
{ grep -c "Registers are spilled" build.log; grep -B1 "Registers are spilled" build.log | grep -o "BwdKvPbNConfig[A-Za-z0-9_]*" | sort | uniq -c; } > "$OUT/spills.txt" 2>&1
gpu_line "$OUT/gpu.txt"
for s in "64c 4,32,32,4096,4096,64 --causal pds3 d64" "64 4,32,32,4096,4096,64 - pds3 d64" \
         "128 4,32,32,4096,4096,128 - pds2 d128" "128c 4,32,32,4096,4096,128 --causal pds2 d128"; do
  set -- $s
  c=$3; [ "$c" = - ] && c=""
  br=$([ "$4" = pds3 ] && echo br128_bc128 || echo br64_bc128)
  vs=()
  for pb in 3 5 6 7; do vs+=(--variant "$W.ordered.${br}_st2_tma1_$4_ew2_pb${pb}_spt1_$5"); done
  rev=()
  for ((i = ${#vs[@]} - 1; i >= 1; i -= 2)); do rev+=(--variant "${vs[$i]}"); done
  run "bench$1_ab" 90 "$DF" bench attention --shape "$2" $c "${vs[@]}" --repeats 3
  run "bench$1_ba" 90 "$DF" bench attention --shape "$2" $c "${rev[@]}" --repeats 3
done
run tests_split 300 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.PbExpSplit*:AttentionWgmmaBwdGpu.PbNBitsAgainstPb1'
for tool in memcheck racecheck synccheck; do
  run "${tool}_split" 120 compute-sanitizer --tool $tool --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.PbExpSplitSanitizerSized'
done
SEC="--section SourceCounters --section WarpStateStats --section SpeedOfLight --section InstructionStats --import-source yes"
for pb in 3 5 6; do
  run "ncu_pb$pb" 120 ncu --clock-control none $SEC -k regex:attention_bwd_kv --launch-count 1 -f -o "$OUT/pb$pb" \
    "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb${pb}_spt1_d64" --repeats 1
  ncu -i "$OUT/pb$pb.ncu-rep" --page source --print-source sass --csv > "$OUT/pb${pb}_sass.csv" 2>/dev/null
  ncu -i "$OUT/pb$pb.ncu-rep" --page details > "$OUT/pb${pb}_details.txt" 2>&1
  rm -f "$OUT/pb$pb.ncu-rep"
done
{
  cat "$OUT/gpu.txt" "$OUT/spills.txt"
  test_report tests_split
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/*check_*.log 2>/dev/null
  for f in "$OUT"/bench*.log; do grep -hE "^attention\." "$f" | sed "s|^attention.bf16.wgmma.||; s|^|$(basename "$f" .log) |" | cut -c1-150; done
  for pb in 3 5 6; do
    echo "=== ncu pb$pb"; grep -E "Duration|Warp Cycles Per Issued|Executed Instructions  " "$OUT/pb${pb}_details.txt" | head -4
    python3 experiments/ncu_sass_stalls.py "$OUT/pb${pb}_sass.csv" 0 2>&1 | head -12
  done
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
mkdir -p "$OUT/keep" && mv "$OUT"/*.log "$OUT"/*.csv "$OUT"/*details.txt "$OUT/keep/" && tar czf "$OUT/s22-pb5-logs.tgz" -C "$OUT" keep && rm -rf "$OUT/keep"
