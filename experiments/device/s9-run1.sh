#!/usr/bin/env bash
# Session 9, first H200 call (~7 min with ./build or dist/build.tar.xz from pack.sh):
#   1. branch s8-epitma (merged as s9-epitma): experiments/device/s8-epitma.sh into $OUT/epitma
#      (its tests, sanitizers, logits probe and bench);
#   2. the FLCE accumulate_dW GPU test (not run in session 8);
#   3. ncu (clock control off) of what limits the kernels issues 16 and 17 rewrite:
#      the attention forward (ps1 rd1 ot1, d128 non-causal), the pds2 kv kernel
#      (ordered, d128 non-causal), our logits GEMM (bf16 out and ex16; registers st6 and ot1) and
#      CUTLASS's own ping-pong 128x128 c2x1 kernel at the Gemma-2 chunk;
#   4. the Python FLCE step's host time at 4096,4096,128256 (experiments/device/s8-profile.sh).
set -u
source "$(dirname "$0")/lib.sh"
ROOT=$OUT
OUT=$ROOT/epitma bash experiments/device/s8-epitma.sh > "$ROOT/epitma.txt" 2>&1
source "$(dirname "$0")/lib.sh"   # SUMMARY of this script again
OUT=$ROOT
run accumulate 120 build/tests/flce/test_flce_accumulate_gpu
DF=build/detfuse
NCU="ncu --clock-control none --print-summary none"
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SourceCounters"
W=attention.bf16.wgmma
run ncu_attn_fwd 90 $NCU $SEC -k regex:attention_fwd --launch-skip 2 --launch-count 1 \
  $DF bench attention --shape 4,32,32,4096,4096,128 --variant $W.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 --repeats 1
run ncu_attn_kv 90 $NCU $SEC -k regex:attention_bwd_kv --launch-skip 2 --launch-count 1 \
  $DF bench attention --shape 4,32,32,4096,4096,128 --variant $W.ordered.br64_bc128_st2_tma1_pds2_d128 --repeats 1
for c in c2_st6 c2_st5_ot1; do  # bf16 out (warm-up, timed), then ex16 (warm-up, timed)
  run ncu_logits_$c 120 $NCU $SEC -k regex:gemm_wgmma_kernel --launch-count 4 \
    build/experiments/wgmma_probe 2048 2304 256000 1 "logits ping bm128_bn128_$c"
done
VARIANT=flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024 SHAPES="4096,4096,128256" OUT=$ROOT/profile \
  bash experiments/device/s8-profile.sh > "$ROOT/profile.txt" 2>&1
echo "=== epitma"; tail -40 "$ROOT/epitma.txt"
echo "=== accumulate"; test_report accumulate
echo "=== ncu (duration, SM/DRAM throughput, tensor pipe)"
grep -hE "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|DRAM Throughput|Registers Per|Eligible Warps|Issued Warp|No Eligible" "$ROOT"/ncu_*.log | head -60
echo "=== profile"; tail -30 "$ROOT/profile.txt"
cat "$SUMMARY"
