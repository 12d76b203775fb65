#!/usr/bin/env bash
# Session 11: where the d64 causal backward's time goes, ours beside
# FlashAttention-4's deterministic one (issue 16: 0.58x at 4,32,32,4096,64
# causal). ncu (clock control off) on one launch of each backward kernel:
# ours the `ordered` pds3 kv kernel (the heuristic) and rs1 (dV, dK from
# registers, measured 3% slower in s11-attnrs.sh); FA4's through
# experiments/attention_peers.py (needs experiments/peers/install.sh stage /
# stage install on this machine first; skipped without it). Sections: speed
# of light, compute workload (tensor pipe), warp states, scheduler, occupancy.
# Logs under /tmp/s11-ncu-kv64, tarred into $OUT.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s11-ncu-kv64
gpu_line "$OUT/gpu.txt"
attention_bins
NCU="ncu --clock-control none --print-summary none --section SpeedOfLight --section ComputeWorkloadAnalysis
     --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
W=attention.bf16.wgmma.ordered
for v in br128_bc128_st2_tma1_pds3_d64 br128_bc128_st2_tma1_pds3_rs1_d64; do
  run "ncu_$v" 90 $NCU -k regex:attention_bwd_kv --launch-count 1 \
    "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W.$v" --repeats 1
done
if [ -d "${PEERS_SITE:-/tmp/peers/site-packages}" ]; then
  cp "$B/capi/libdetfuse_c.so" python/detfuse/libdetfuse_c.so
  export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
  run ncu_fa4det 150 $NCU -k regex:'[Bb]wd|backward' --launch-count 2 \
    python3 experiments/attention_peers.py --rows 4,32,32,4096,64,1 --impl fa4-det --reps 1 --warmup 1 --digest-runs 1
fi
{
  cat "$OUT/gpu.txt"
  for f in "$OUT"/ncu_*.log; do
    echo "=== $(basename "$f")"
    grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|No Eligible|Eligible Warps Per Scheduler|Executed Ipc Active|SM Busy|Issue Slots Busy|Shared Memory Configuration Size|Dynamic Shared Memory Per Block|Block Size|Grid Size" "$f" | cut -c1-160
  done
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s11-ncu-kv64
