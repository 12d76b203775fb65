#!/usr/bin/env bash
# What limits the kernels the frontier issues (16, 17) rewrite: ncu on the H200
# (clock control off) over the current fastest deterministic variants, from
# the repo root with ./build (or dist/build.tar.xz) present; logs under $OUT.
#   1. attention: the pds1 kv kernel (ordered, d128 non-causal and d64 causal,
#      B=4 H=32 S=4096): speed of light, warp states, scheduler, source
#      counters (the top stall sites).
#   2. FLCE: every kernel's duration in one forward_backward of the ex16 ping
#      mb1024 and cuBLASLt mb2000 variants at 4096,4096,128256 and
#      16384,4096,128256 (repeats 1), to split the time over the logits GEMM,
#      the row pass, the dX and dW GEMMs.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
DF=build/detfuse
W=attention.bf16.wgmma
NCU="ncu --clock-control none --print-summary none"
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section SourceCounters"
run ncu_attn_d128 90 $NCU $SEC -k regex:attention_bwd_kv --launch-skip 2 --launch-count 1 \
  $DF bench attention --shape 4,32,32,4096,4096,128 --variant $W.ordered.br64_bc128_st2_tma1_pds1_d128 --repeats 1
run ncu_attn_d64c 90 $NCU $SEC -k regex:attention_bwd_kv --launch-skip 2 --launch-count 1 \
  $DF bench attention --shape 4,32,32,4096,4096,64 --causal --variant $W.ordered.br64_bc128_st2_tma1_pds1_d64 --repeats 1
for shape in 4096,4096,128256 16384,4096,128256; do
  for v in flce.bf16.wgmma.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024 flce.bf16.cublaslt.owning.mb2000; do
    run "ncu_flce_${shape%%,*}_${v##*.}" 120 $NCU --metrics gpu__time_duration.sum --csv -c 60 \
      $DF bench flce --shape $shape --variant $v --repeats 1 --no-baseline
  done
done
