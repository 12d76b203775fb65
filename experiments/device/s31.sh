#!/usr/bin/env bash
# Session 31 (issue 16), carry ["dist"] (main's build, experiments/device/pack.sh). The d64 causal forward on
# the machine that comes (an H100): session 30's sweep put the persistent br192 forwards (ov1 ps1 rd1; ov2 ps1
# rd1 ls1) 2-5% ahead of the heuristic's non-persistent br192 rd1 ot1, where session 25 (H200) had them 7%
# behind. Prediction: the persistent order's L2 head groups read less from DRAM, which matters more with the
# H100's 3.35 TB/s than the H200's 4.8. Here: forward ms of the three, 5 repeats, both orders, ROUNDS (2)
# rounds; then ncu (clock control off) of one launch each: time, cycles, DRAM bytes read, L2 hit rate.
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
attention_bins
gpu_line "$OUT/gpu.txt"
V=(br192_bc128_st3_ov1_pp0_rd1_ot1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64 br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64)
for r in $(seq 1 "${ROUNDS:-2}"); do bench_pair "64c_$r" 4,32,32,4096,4096,64 --causal "${V[@]}"; done
m="gpu__time_duration.sum,sm__cycles_elapsed.max,dram__bytes_read.sum,lts__t_sector_hit_rate.pct"
m="$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
for v in "${V[@]}"; do
  brun "ncu_$v" 90 ncu --clock-control none --metrics "$m" -k regex:fwd --launch-count 1 \
    "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W.fwd.$v" --repeats 1
done
REPORT_TESTS=" " fwd_report s31 "gpu__time|sm__cycles|dram__|lts__|hmma"
