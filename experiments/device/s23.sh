#!/usr/bin/env bash
# Written in session 23 for the next session with a GPU (issue 16), branch s23-br80 (on s22-pb6), NOT run yet.
# Session 23 had no device time (no machine lent); this replaces branch s22-pb6's s22-pb6.sh (its steps and more).
# What it measures, with the predictions written before any run:
# - pb6 (d64, d128: half of the exp before the dP^T wait, dV's first half issued from it) and pb7 (d64: pb5
#   with the dQ hand-off by STS.128), as s22-pb6.sh: pb6 1-3% faster than pb5 at d64, within 1% of pb3 at d128;
#   pb7 0-2% at d64.
# - pb8 (d128: pb3 with pb7's hand-off): 0-1% at d128. pb9 (d64: pb6 with pb7's hand-off): the better of
#   pb6 and pb7 at d64 by up to their sum.
# - pds4 (d128: 80 queries a step, FlashAttention-3/4's non-causal hdim-128 tile, the dQ product transposed;
#   pb5's step, as pb3 spilled 124 bytes there; pb7 its 128-bit hand-off): the step's fixed costs (barriers,
#   semaphore turn, LSE / D copies, hand-off) over 25% more work. Prediction: 2-5% faster than pb3 on the
#   non-causal d128 rows (4,32,32,4096 and 4,32,8,4096), flat or slower causal (more masked work on the
#   diagonal); must first match the float64 reference (Ew lists) and give one digest in 20 repeats.
# - The forward's bc80 / bc160 / bc176 tiles with the wgmma atom of their N (the build now defines
#   CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED; before, cute issued them as 64x16 / 64x32 pieces: 11 HGMMA per
#   k step of Q K^T at bc176), and bc176 ov1 ps1 rd1 (FlashAttention-3's d128 non-causal tile). Prediction:
#   bc160 ov1 ps1 rd1 ot1 and bc176 ov1 ps1 rd1 within 2% of the heuristic's bc128 ps1 rd1 ot1 at
#   4,32,32,4096,128 non-causal, better by 1-4% if the longer key block's fewer rescales win (FlashAttention-3
#   picks 176 there); both slower causal.
# Two calls (each under the 10-minute limit), carry [".debs", ".deps"]:
#   PART=1 (cold): build; benches (3 repeats, both orders); the tests of the new variants (bits against
#   their bases, the Ew lists: float64 reference on the schedule cases, sanitizer-sized, 20 repeats), the
#   layout / registry / variants tests; memcheck / racecheck / synccheck on EwSanitizerSized.
#   PART=2 (warm, the same build): the whole backward suite (AttentionWgmmaBwd*), ncu of pds4 pb7 and pb3 at
#   4,32,32,4096,128 (source counters; experiments/ncu_sass_phases.py). Every step's timeout is cut to what
#   is left of the call (brun, UNTIL=555 s): a step that did not fit is listed as skipped in the report.
# Then beside FA4 before any heuristic change (attention_peers.py's --variant FWD+BWD, "heuristic" for
# the library's forward): carry [".peers/a"] `bash experiments/peers/install.sh stage`, then carry
# [".peers/b"] `STAGE=2 ATTN_V="--variant heuristic+$W.ordered.br80_bc128_st2_tma1_pds4_ew2_pb7_spt1_d128
#   --variant $W.fwd.br128_bc176_st2_ov1_pp0_ps1_rd1_d128+$W.ordered.br80_bc128_st2_tma1_pds4_ew2_pb7_spt1_d128
#   --variant heuristic+$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb7_spt1_d64" bash experiments/device/s17.sh`
# (each winner of PART 1 in place of these; a combination a row cannot run is reported as an error there).
# Then the heuristic (kernels/attention/attention.cpp, tests/attention/test_attention_variants.cpp) takes
# what won beside FA4, the branch is merged, and those figures are the ones of record.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
PART=${PART:-1}
if [ "$PART" = 1 ] || { [ ! -x build/detfuse ] && [ ! -x build/cli/detfuse ]; }; then
  DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
fi
attention_bins
gpu_line "$OUT/gpu.txt"
# A variant by pds:pb (pds3: d64 br128; pds2: d128 br64; pds4: d128 br80), ordered with spt1.
vname() {
  local pds=${1%:*} pb=${1#*:}
  case $pds in
  3) echo "$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb${pb}_spt1_d64" ;;
  2) echo "$W.ordered.br64_bc128_st2_tma1_pds2_ew2_pb${pb}_spt1_d128" ;;
  4) echo "$W.ordered.br80_bc128_st2_tma1_pds4_ew2_pb${pb}_spt1_d128" ;;
  esac
}
bench_set() {  # name shape causal(- or --causal) pds:pb...
  local name=$1 shape=$2 c=$3; shift 3
  [ "$c" = - ] && c=""
  local vs=() rev=() s i
  for s in "$@"; do vs+=(--variant "$(vname "$s")"); done
  for ((i = ${#vs[@]} - 1; i >= 1; i -= 2)); do rev+=(--variant "${vs[$i]}"); done
  brun "bench${name}_ab" 90 "$DF" bench attention --shape "$shape" $c "${vs[@]}" --repeats 3
  brun "bench${name}_ba" 90 "$DF" bench attention --shape "$shape" $c "${rev[@]}" --repeats 3
}
if [ "$PART" = 1 ]; then
  { grep -c "Registers are spilled" build.log; grep -A1 "Registers are spilled" build.log | grep -o "[0-9]* bytes spill stores" | sort | uniq -c
    echo "wgmma serialized (C7512): $(grep -c C7512 build.log)"; } > "$OUT/spills.txt" 2>&1
  bench_set 64c 4,32,32,4096,4096,64 --causal 3:3 3:5 3:6 3:7 3:9
  bench_set 64 4,32,32,4096,4096,64 - 3:3 3:5 3:6 3:7 3:9
  bench_set 128 4,32,32,4096,4096,128 - 2:3 2:6 2:8 4:5 4:7
  bench_set 128g 4,32,8,4096,4096,128 - 2:3 2:6 2:8 4:5 4:7
  bench_set 128c 4,32,32,4096,4096,128 --causal 2:3 2:6 2:8 4:5 4:7
  bench_set 8k 1,16,16,8192,8192,128 --causal 2:3 2:6 2:8 4:5
  F="$W.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 $W.fwd.br128_bc160_st2_ov1_pp0_ps1_rd1_ot1_d128 $W.fwd.br128_bc176_st2_ov1_pp0_ps1_rd1_d128 $W.fwd.br128_bc176_st2_ov0_pp0_ps1_d128"
  fv=() rfv=()
  for n in $F; do fv+=(--variant "$n"); done
  for ((i = ${#fv[@]} - 1; i >= 1; i -= 2)); do rfv+=(--variant "${fv[$i]}"); done
  for s in "fwd128 4,32,32,4096,4096,128" "fwd128g 4,32,8,4096,4096,128" "fwd128c 4,32,32,4096,4096,128 --causal"; do
    set -- $s
    brun "bench${1}_ab" 60 "$DF" bench attention --shape "$2" ${3:-} "${fv[@]}" --repeats 5
    brun "bench${1}_ba" 60 "$DF" bench attention --shape "$2" ${3:-} "${rfv[@]}" --repeats 5
  done
  # In order of need: the new variants' correctness first; what does not fit goes to PART=2.
  brun tests_new 240 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Pb5BitsAgainstPb3:AttentionWgmmaBwdGpu.Pds4Pb7BitsAgainstPb5:AttentionWgmmaBwdGpu.Ew*:AttentionWgmmaBwdGpu.TmaConvertUnalignedDq'
  brun tests_pds 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
  brun tests_fwdl 30 "$B/tests/attention_wgmma/test_attention_wgmma_fwd_layout"
  brun tests_var 30 "$B/tests/attention/test_attention_variants"
  for tool in memcheck racecheck synccheck; do
    brun "${tool}_ew" 150 compute-sanitizer --tool $tool --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized:AttentionWgmmaGpu.PersistentSanitizerSized'
  done
  brun tests_fwd 200 "$TW" --gtest_filter='AttentionWgmmaGpu.*:AttentionWgmma.*'
  brun tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
  TESTS="tests_new tests_fwd tests_fwdl tests_pds tests_gpu tests_var"
else
  brun tests_bwd 400 "$TW" --gtest_filter='AttentionWgmmaBwd*'
  SEC="--section SourceCounters --section WarpStateStats --section SpeedOfLight --section InstructionStats --import-source yes"
  for s in 4:7 2:3; do
    tag=pds${s%:*}pb${s#*:}
    brun "ncu_$tag" 120 ncu --clock-control none $SEC -k regex:attention_bwd_kv --launch-count 1 -f -o "$OUT/$tag" \
      "$DF" bench attention --shape 4,32,32,4096,4096,128 --variant "$(vname "$s")" --repeats 1
    [ -f "$OUT/$tag.ncu-rep" ] || continue
    ncu -i "$OUT/$tag.ncu-rep" --page source --print-source sass --csv > "$OUT/${tag}_sass.csv" 2>/dev/null
    ncu -i "$OUT/$tag.ncu-rep" --page details > "$OUT/${tag}_details.txt" 2>&1
    rm -f "$OUT/$tag.ncu-rep"
  done
  TESTS="tests_bwd"
fi
{
  cat "$OUT/gpu.txt"
  [ -f "$OUT/spills.txt" ] && cat "$OUT/spills.txt"
  test_report $TESTS
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/*check_*.log 2>/dev/null
  for f in "$OUT"/bench*.log; do
    [ -f "$f" ] && grep -hE "^attention\." "$f" | sed "s|^attention.bf16.wgmma.||; s|^|$(basename "$f" .log) |" | cut -c1-150
  done
  for f in "$OUT"/*_details.txt; do
    [ -f "$f" ] || continue
    echo "=== $(basename "$f")"; grep -E "Duration|Warp Cycles Per Issued|Executed Instructions  |Registers Per" "$f" | head -5
    python3 experiments/ncu_sass_phases.py "${f%_details.txt}_sass.csv" 2>&1 | grep -E "samples|total" | head -30
  done
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
mkdir -p "$OUT/keep" && mv "$OUT"/*.log "$OUT"/keep/ 2>/dev/null
mv "$OUT"/*.csv "$OUT"/*details.txt "$OUT/keep/" 2>/dev/null
tar czf "$OUT/s23-part$PART-logs.tgz" -C "$OUT" keep && rm -rf "$OUT/keep"
