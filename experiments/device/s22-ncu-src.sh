#!/usr/bin/env bash
# Written in session 21 for the next (issue 16), not run yet: where pb3's warps wait. pb3's d64 causal kv
# kernel now executes fewer warp instructions than FlashAttention-4's backward kernel (395 M against 412 M)
# but 9.29 cycles per issued instruction against 6.64 (ncu, session 21): the per-instruction warp-state
# samples (ncu source counters, as session 12's s12-ncu-src.sh) of pb3 and, with FA4=1 (the peers staged
# and installed first: experiments/peers/install.sh stage, then this with carry [".peers/b"]), of FA4's
# backward kernel at the same shape, each summarised by experiments/ncu_sass_stalls.py (samples by stall
# reason, the top instructions). Carry [".debs", ".deps"] on a cold machine (the build). Logs under
# /tmp/s22-ncu-src, tarred into $OUT.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s22-ncu-src
[ -x build/detfuse ] || DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
gpu_line "$OUT/gpu.txt"
attention_bins
SEC="--section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight
     --section InstructionStats --import-source yes"
W=attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb3_spt1_d64
run ncu_pb3 150 ncu --clock-control none $SEC -k regex:attention_bwd_kv --launch-count 1 -f -o "$OUT/pb3" \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W" --repeats 1
if [ "${FA4:-0}" = 1 ]; then
  bash experiments/peers/install.sh stage install > "$OUT/peers_install.log" 2>&1 || tail -5 "$OUT/peers_install.log"
  run ncu_fa4 200 ncu --clock-control none $SEC -k regex:FlashAttentionBackwardSm90 --launch-count 1 -f -o "$OUT/fa4" \
    python3 experiments/attention_peers.py --rows 4,32,32,4096,64,1 --impl fa4-det --reps 1 --warmup 0 --digest-runs 1 --interleave 0
fi
{
  cat "$OUT/gpu.txt"
  for k in pb3 fa4; do
    [ -f "$OUT/$k.ncu-rep" ] || continue
    ncu -i "$OUT/$k.ncu-rep" --page source --print-source sass --csv > "$OUT/${k}_sass.csv" 2> "$OUT/${k}_sass.err"
    ncu -i "$OUT/$k.ncu-rep" --page details > "$OUT/${k}_details.txt" 2>&1
    echo "=== $k"
    grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|No Eligible" "$OUT/${k}_details.txt" | head -8
    python3 experiments/ncu_sass_stalls.py "$OUT/${k}_sass.csv" 30 2>&1 | head -60
  done
  echo "--- runs"
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
rm -f "$OUT"/*.ncu-rep  # tens of MB each; the SASS pages and details stay
pack_logs s22-ncu-src
