#!/usr/bin/env bash
# Session 19 (issue 16): what limits detfuse's forward and kv kernel beside FlashAttention-4's, per row. On a
# machine with ./build (build_there.sh) and the peers staged (peers/install.sh stage, carry [".peers/a"]); this
# call carries [".peers/b"] and installs them. ncu (clock control off; speed of light, compute workload, warp
# state, scheduler, instruction statistics, the SASS opcode mix) of the first forward and, separately, the first backward main kernel
# of one fwd+bwd of each side through attention_peers.py, per row while the call has time left (ROWS, default
# the d64 causal row, then 4,32,32,4096,128 non-causal; BUDGET_S).
# (Session 19's first form ran s16-ncu-peer.sh, whose --launch-count 2 over one regex now catches two forwards:
# attention_peers.py times forward-only calls first. Hence one ncu per kernel here.)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
bash experiments/peers/install.sh stage install > "$OUT/peers_install.log" 2>&1 || { tail -20 "$OUT/peers_install.log"; exit 1; }
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
S="$S --section InstructionStats --section LaunchStats"
# The SASS opcode mix (session 17's form): which instructions one side executes more of.
S="$S --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,sm__cycles_elapsed.max --print-metric-instances details"
start=$SECONDS
for row in ${ROWS:-4,32,32,4096,64,1 4,32,32,4096,128,0}; do
  t=${row//,/_}
  for k in "fa4 fwd FlashAttentionForwardSm90" "fa4 kv FlashAttentionBackwardSm90" \
           "detfuse fwd attention_fwd_wgmma" "detfuse kv attention_bwd_kv"; do
    set -- $k
    [ $((SECONDS - start)) -lt ${BUDGET_S:-330} ] || { echo "s19-ncu: no time left for $row $1 $2"; break 2; }
    run "ncu_${1}_${2}_$t" 75 ncu --clock-control none $S -k regex:"$3" --launch-count 1 python3 experiments/attention_peers.py \
      --rows "$row" --impl "$( [ "$1" = fa4 ] && echo fa4-det || echo detfuse)" --reps 1 --warmup 0 --digest-runs 1 --interleave 0
    echo "=== $1 $2 $row"
    grep -E "Duration|Compute \(SM\) Throughput|Executed Ipc A|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued|Executed Instructions  |Block Size|Grid Size|Registers Per" \
      "$OUT/ncu_${1}_${2}_$t.log" | tr -s ' ' | cut -c1-110
    grep -E "sass__inst_executed_per_opcode" -A3 "$OUT/ncu_${1}_${2}_$t.log" | tr -s ' ' | cut -c1-2000 | head -4
  done
done
