#!/usr/bin/env bash
# Session 15, first call (cold machine, carry [".debs", ".deps"]): where the heuristic's
# attention kernels stand now (after ew2 / ew1, spt1), to compare with FlashAttention-4's
# deterministic kv kernel (session 11: 1.27 ms at 4,32,32,4096,64 causal, same grid,
# block, registers; ours then 2.64 ms).
#   1. build only the command (TARGETS);
#   2. per-kernel durations of one fwd+bwd at d64 causal and d128 causal (ncu, clock
#      control off, SpeedOfLight + launch stats, every kernel of one bench repeat);
#   3. per-instruction samples (SourceCounters, WarpStateStats) of the d64 causal
#      ew2 kv kernel and of the d64 causal forward (session 12's method:
#      experiments/ncu_sass_stalls.py reads the SASS page).
# Logs under /tmp/s15-ncu, tarred into $OUT.
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
[ -x build/detfuse ] || TARGETS="detfuse" DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) \
  bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
source "$(dirname "$0")/lib.sh"
logs_in_tmp s15-ncu
gpu_line "$OUT/gpu.txt"
attention_bins
W=attention.bf16.wgmma
KV64=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
KV128=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
F64=$W.fwd.br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64
F128=$W.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128
run bench 60 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$F64" --variant "$KV64" --repeats 3
BASIC="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats"
run kernels64 120 ncu --clock-control none $BASIC -k regex:'attention|rowsum|convert|pds_stage' --launch-count 16 \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$KV64" --repeats 2
run kernels128 120 ncu --clock-control none $BASIC -k regex:'attention|rowsum|convert|pds_stage' --launch-count 16 \
  "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal --variant "$KV128" --repeats 2
SEC="--section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight
     --section InstructionStats --import-source yes"
export_pages() {  # REP NAME: the SASS page (CSV) and the details
  ncu -i "$1" --page source --print-source sass --csv > "$OUT/$2_sass.csv" 2> "$OUT/$2_sass.err"
  ncu -i "$1" --page details > "$OUT/$2_details.txt" 2>&1
}
run ncu_kv64 150 ncu --clock-control none $SEC -k regex:attention_bwd_kv --launch-count 1 -f -o "$OUT/kv64" \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$KV64" --repeats 1
export_pages "$OUT/kv64.ncu-rep" kv64
run ncu_fwd64 150 ncu --clock-control none $SEC -k regex:attention_fwd --launch-count 1 -f -o "$OUT/fwd64" \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$F64" --repeats 1
export_pages "$OUT/fwd64.ncu-rep" fwd64
rm -f "$OUT"/*.ncu-rep
{
  cat "$OUT/gpu.txt"
  grep -E "TFLOP|variant|^attention" "$OUT/bench.log" | head -20
  for f in kernels64 kernels128; do
    echo "=== $f"
    grep -E "^  [a-zA-Z_].*\(|Duration|Issue Slots Busy|Eligible Warps Per|Warp Cycles Per Issued|Registers Per" "$OUT/$f.log" | cut -c1-150
  done
  for f in kv64 fwd64; do
    echo "=== $f"
    grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|No Eligible|Executed Instructions  " "$OUT/${f}_details.txt" | head -12
    python3 experiments/ncu_sass_stalls.py "$OUT/${f}_sass.csv" 2>&1 | head -60
  done
  echo "--- runs"
  cat "$SUMMARY"
} > "$OUT/report.txt"
pack_logs s15-ncu
