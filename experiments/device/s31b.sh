#!/usr/bin/env bash
# Session 31, the d64 backward's LSE / D ring (experiments/results/sass-bwd-d64-2026-12-06, item 3): the pb
# kernels (dV's A operand from registers) no longer allocate the P^T tile they never use, and pds3 pb takes the
# LSE / D ring at the Q / dO depth (two stages, rs1's protocol) instead of one stage released after the dS^T
# barrier. Same operations, same order: the same bits. Carry ["dist"] with build/detfuse (new) and
# build/detfuse_old (main before the change) packed (experiments/device/pack.sh).
#   1. the backward tests of the pb kernels (Ew*: float64 reference, 20 repeats; Pb*: bits against pb1 / pb3;
#      the registry's CPU-side checks), memcheck / racecheck / synccheck on EwSanitizerSized;
#   2. bits against the old binary: `detfuse verify` of every pb variant (d64 and d128) at four cases, old and
#      new, outputs diffed (O, lse, dQ, dK, dV digests);
#   3. fwd+bwd ms of the d64 heuristic's backward (pb5 spt1) at 4,32,32,4096,64 causal, old and new
#      alternating, 5 repeats, ROUNDS (3) rounds; then non-causal once each.
# Prediction: 0-2% of the kv kernel at d64 causal (0.035 ms of S^T wait is the ceiling), same bits.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
attention_bins
gpu_line "$OUT/gpu.txt"
OLD=$B/detfuse_old
brun tests_pb 200 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Ew*:AttentionWgmmaBwdGpu.Pb*:AttentionWgmmaBwdGpu.Pds4Pb7*'
sanitize_gtest ew 90 'AttentionWgmmaBwdGpu.EwSanitizerSized'
for d in 64 128; do
  mapfile -t PB < <("$DF" list --kernel attention --engine wgmma | awk '{print $1}' | grep "_pb[0-9]" | grep "_d$d\$")
  verify_against_old "$d" 31 "2,8,2,1000,1300,$d --causal" "1,8,8,1100,900,$d" \
    "1,4,4,777,777,$d --causal --softcap 30 --window 200" "1,4,2,300,2900,$d" -- "${PB[@]}"
done
V=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64
for r in $(seq 1 "${ROUNDS:-3}"); do
  brun "benchab_old_$r" 40 "$OLD" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$V" --repeats 5
  brun "benchab_new_$r" 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$V" --repeats 5
  brun "benchba_new_$r" 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$V" --repeats 5
  brun "benchba_old_$r" 40 "$OLD" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$V" --repeats 5
done
brun "benchn_old" 40 "$OLD" bench attention --shape 4,32,32,4096,4096,64 --variant "$V" --repeats 5
brun "benchn_new" 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 --variant "$V" --repeats 5
REPORT_TESTS="tests_pb" fwd_report s31b "Duration"
cat "$OUT/bits.txt"
