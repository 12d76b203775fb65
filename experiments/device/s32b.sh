#!/usr/bin/env bash
# Session 32, second call (after s32.sh): the build as landed (wq1 over pb10 and pds4 pb10 dropped, pb2 / pb9
# retired). Carry ["dist"] with build/detfuse (new) and build/detfuse_old (main at 7f934fe) packed (pack.sh).
#   1. the backward tests (AttentionWgmmaBwd*: the registry's counts, float64 reference, 20 repeats, bits
#      against the bases), memcheck / racecheck / synccheck on EwSanitizerSized;
#   2. d64 bits against the old binary (s32.sh's d64 comparison listed pb2 / pb9, which the new binary no longer
#      has): `detfuse verify` of every ordered TMA d64 variant both binaries list, three cases, digests compared;
#   3. ncu of the kv kernel, pb5 and pb10 at row 4 causal (why pb10 is 2% slower).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
attention_bins
gpu_line "$OUT/gpu.txt"
OLD=$B/detfuse_old
brun tests_bwd 200 "$TW" --gtest_filter='AttentionWgmmaBwd*'
sanitize_gtest ew 90 'AttentionWgmmaBwdGpu.EwSanitizerSized'
for d in 64 128; do
  mapfile -t OV < <(comm -12 <("$OLD" list --kernel attention --engine wgmma | awk '{print $1}' | sort) \
                             <("$DF" list --kernel attention --engine wgmma | awk '{print $1}' | sort) |
                     grep "\.ordered\..*_tma1_" | grep "_d$d\$")
  verify_against_old "$d" 32 "2,8,2,1000,1300,$d --causal" "1,4,4,777,777,$d --causal --softcap 30 --window 200" \
    "1,4,2,300,2900,$d" -- "${OV[@]}"
done
ncu_kv ncu_pb5 4,32,32,4096,4096,64 ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64
ncu_kv ncu_pb10 4,32,32,4096,4096,64 ordered.br128_bc128_st2_tma1_pds3_ew2_pb10_spt1_d64
REPORT_TESTS="tests_bwd" fwd_report s32b "Duration|inst_executed|cycles_elapsed|hmma|pipe_xu|Stall|Warp Cycles|Issued"
cat "$OUT/bits.txt"
