#!/usr/bin/env bash
# Written in session 22 for the next session (issue 16), branch s22-pb6 (on main's pb5), NOT run yet: pb6.
# pb5 (main, the d64 heuristic: every exp in the dS^T loop after the dP^T wait) left its warps waiting on
# dP^T with nothing to do (ncu: 8.5 k of 104.8 k samples on that wait, s22/pb5/), and at d128 it was slower
# than pb3 (there the exp fits under dP^T's tensor time before the wait). pb6: the first half of the
# queries' exp before the dP^T wait, rounded into dV's A fragment and dV's first half issued from it there
# (a wgmma issued from the results keeps ptxas from moving that exp past the wait, as it did with the
# early exps of tag s22-pb5-experiment's pb7 in s22/pb5/), the second half's exp in the loop. The same bits as pb3. Prediction: pb6 1-3% faster than pb5
# at d64, within 1% of pb3 at d128 (better if the second half's exp under the dS^T arithmetic wins).
# pb7: pb5 with the dQ part handed over by 128-bit stores (8 STS.128 a thread instead of 16 STS.64, the tile
# and the accumulator in groups of 4 values a thread, FA4's hand-off); the same bits. Prediction: 0-2% at d64
# (the hand-off phase 0.241 ms of pb5's kernel against FA4's 0.208). pb8 (session 23): pb3 at d128 with pb7's
# hand-off; the same bits as pb3. Prediction: 0-1% at d128.
# One cold call, carry [".debs", ".deps"]: build, bench pb3 / pb5 / pb6 / pb7 (ordered spt1) both orders at d64
# causal / non-causal, pb3 / pb6 / pb8 at four d128 rows, the whole backward suite of test_attention_wgmma (CPU and
# GPU), the layout, registry and variants tests, the three sanitizers on the Ew sanitizer-sized case, ncu of
# pb6 at d64 causal. If pb6 wins: the heuristic (kernels/attention/attention.cpp and
# tests/attention/test_attention_variants.cpp), then the peers run (experiments/device/s17.sh STAGE=2).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
{ grep -c "Registers are spilled" build.log; grep -A1 "Registers are spilled" build.log | grep -o "[0-9]* bytes spill stores" | sort | uniq -c; } > "$OUT/spills.txt" 2>&1
gpu_line "$OUT/gpu.txt"
bench_set() {  # name shape causal pds d pbs...
  local name=$1 shape=$2 c=$3 pds=$4 d=$5; shift 5
  [ "$c" = - ] && c=""
  local br; br=$([ "$pds" = pds3 ] && echo br128_bc128 || echo br64_bc128)
  local vs=() rev=() pb
  for pb in "$@"; do vs+=(--variant "$W.ordered.${br}_st2_tma1_${pds}_ew2_pb${pb}_spt1_$d"); done
  for ((i = ${#vs[@]} - 1; i >= 1; i -= 2)); do rev+=(--variant "${vs[$i]}"); done
  run "bench${name}_ab" 90 "$DF" bench attention --shape "$shape" $c "${vs[@]}" --repeats 3
  run "bench${name}_ba" 90 "$DF" bench attention --shape "$shape" $c "${rev[@]}" --repeats 3
}
bench_set 64c 4,32,32,4096,4096,64 --causal pds3 d64 3 5 6 7
bench_set 64 4,32,32,4096,4096,64 - pds3 d64 3 5 6 7
bench_set 128 4,32,32,4096,4096,128 - pds2 d128 3 6 8
bench_set 128c 4,32,32,4096,4096,128 --causal pds2 d128 3 6 8
bench_set 128g 4,32,8,4096,4096,128 - pds2 d128 3 6 8
bench_set 8k 1,16,16,8192,8192,128 --causal pds2 d128 3 6 8
run tests_bwd 300 "$TW" --gtest_filter='AttentionWgmmaBwd*'
run tests_pds 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
run tests_var 30 "$B/tests/attention/test_attention_variants"
for tool in memcheck racecheck synccheck; do
  run "${tool}_ew" 120 compute-sanitizer --tool $tool --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
done
SEC="--section SourceCounters --section WarpStateStats --section SpeedOfLight --section InstructionStats --import-source yes"
run ncu_pb6 120 ncu --clock-control none $SEC -k regex:attention_bwd_kv --launch-count 1 -f -o "$OUT/pb6" \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb6_spt1_d64" --repeats 1
ncu -i "$OUT/pb6.ncu-rep" --page source --print-source sass --csv > "$OUT/pb6_sass.csv" 2>/dev/null
ncu -i "$OUT/pb6.ncu-rep" --page details > "$OUT/pb6_details.txt" 2>&1
rm -f "$OUT/pb6.ncu-rep"
{
  cat "$OUT/gpu.txt" "$OUT/spills.txt"
  test_report tests_bwd tests_pds tests_gpu tests_var
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/*check_*.log 2>/dev/null
  for f in "$OUT"/bench*.log; do grep -hE "^attention\." "$f" | sed "s|^attention.bf16.wgmma.||; s|^|$(basename "$f" .log) |" | cut -c1-150; done
  echo "=== ncu pb6"; grep -E "Duration|Warp Cycles Per Issued|Executed Instructions  " "$OUT/pb6_details.txt" | head -4
  python3 experiments/ncu_sass_phases.py "$OUT/pb6_sass.csv" 2>&1 | grep -E "samples|total" | head -30
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
mkdir -p "$OUT/keep" && mv "$OUT"/*.log "$OUT"/*.csv "$OUT"/*details.txt "$OUT/keep/" && tar czf "$OUT/s22-pb6-logs.tgz" -C "$OUT" keep && rm -rf "$OUT/keep"
