#!/usr/bin/env bash
# Session 32, third call: ncu's stall reasons (per issued instruction) of the d64 kv kernel at row 4 causal for
# pb5, pb10 and wq1 over pb5 (s32.sh: pb10 2% slower, wq1 flat; s32b.sh: the same instructions, pb10 8.90 cycles
# per issued instruction against pb5's 8.64). Carry ["dist"] (pack.sh).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
attention_bins
gpu_line "$OUT/gpu.txt"
P=attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2
for v in pb5 pb10 wq1_pb5; do
  brun "ncu_$v" 120 ncu --clock-control none -k regex:attention_bwd_kv --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.max" \
    "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "${P}_${v}_spt1_d64" --repeats 1
done
for v in pb5 pb10 wq1_pb5; do
  echo "== $v"
  grep -E "stalled|inst_executed|cycles_elapsed" "$OUT/ncu_$v.log" | awk '$NF+0 >= 0.05 || /inst_exec|cycles/' |
    sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done > "$OUT/report.txt"
cat "$OUT/summary.txt" >> "$OUT/report.txt"
cat "$OUT/report.txt"
