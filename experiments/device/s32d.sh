#!/usr/bin/env bash
# Session 32, fourth call: ncu's per-instruction warp-stall samples (SourceCounters) of the d64 kv kernel
# (pb5 spt1, the heuristic's) at row 4 causal, one launch, as a SASS listing with its sample columns
# ($OUT/pb5_source.csv), for reading where the consumer warps wait (s32c.sh's kernel-wide stall reasons mix in
# the producer and writer warps). Carry ["dist"] (pack.sh). Not run in session 32: no machine could be started
# for its last three tries (the next session: run it, then map the samples onto the step with
# experiments/results/sass-bwd-d64-2026-12-06/segments.py).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
attention_bins
gpu_line "$OUT/gpu.txt"
V=attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64
brun ncu_src 200 ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:attention_bwd_kv \
  --launch-count 1 -f -o /tmp/pb5 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$V" --repeats 1
brun ncu_page 120 sh -c "ncu -i /tmp/pb5.ncu-rep --page source --print-source sass --csv > $OUT/pb5_source.csv"
ls -la "$OUT"
head -3 "$OUT/pb5_source.csv" | cut -c1-600
cat "$SUMMARY"
