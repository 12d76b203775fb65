#!/usr/bin/env bash
# Session 16: what limits detfuse's d128 causal forward and kv kernel beside FlashAttention-4's (issue 16), on a
# warm machine after s16-peers.sh (peers installed, ./build there): ncu (clock control off) of the first forward
# and the first backward main kernel of each at 4,32,32,4096,128 causal, one fwd+bwd each through
# attention_peers.py: speed of light, compute workload (pipe utilisation, issue slots), warp state (stall
# reasons), scheduler, occupancy, launch statistics.
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
source "$(dirname "$0")/lib.sh"
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
S="$S --section Occupancy --section LaunchStats"
ROW=${ROW:-4,32,32,4096,128,1}
run ncu_fa4 150 ncu --clock-control none $S -k regex:'FlashAttention(Forward|Backward)Sm90' --launch-count 2 \
  python3 experiments/attention_peers.py --rows $ROW --impl fa4-det --reps 1 --warmup 0 --digest-runs 1 --interleave 0
run ncu_detfuse 150 ncu --clock-control none $S -k regex:'attention_fwd_wgmma|attention_bwd_kv' --launch-count 2 \
  python3 experiments/attention_peers.py --rows $ROW --impl detfuse --reps 1 --warmup 0 --digest-runs 1 --interleave 0
for f in ncu_fa4 ncu_detfuse; do
  echo "=== $f"
  grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|No Eligible|Warp Cycles Per Issued|Compute \(SM\) Throughput|Memory Throughput|Dynamic Shared|Threads  |Stall|Block Limit Reg" \
    "$OUT/$f.log" | cut -c1-150
done
