#!/usr/bin/env bash
# Written in session 24 (issue 16) for the next session with a GPU, branch s24-ov2; not run yet (only
# s24-ov2-quick.sh ran: bits, float64, d128 ov2 1.8-3.3% faster, d64 br128 ov2 slower).
# ov2: the overlapped forward loop rotated (fwd_mainloop.cuh). Finding (session 24, cuobjdump here): in every
# ov1 forward ptxas puts the wait for block n+1's P V (`WARPGROUP.DEPBAR.LE gsb0, 0x0`) at the top of the
# basic block that holds block n's softmax, before its first exp2: the softmax runs after the warpgroup's own
# P V, not under it, so the intra-warpgroup overlap FlashAttention-3 / -4 build on is lost and only the other
# warpgroup's products fill the tensor cores while one does its softmax. ov2 opens the next iteration with
# that wait (a basic block of its own), so all 66 MUFU.EX2 sit between the gsb0 0x1 and 0x0 waits. Same
# operations, same bits (Ov2BitsEqualOv1). At d64 only br128 (with three warpgroups, 160 registers each,
# ptxas serialises every wgmma of ov2: C7512).
# Prediction: the d128 forward kernel 3-8% faster (its 2.93 M cycles against FA4's 2.59 M at 4,32,32,4096,128
# non-causal, session 17, are cycles the tensor cores wait on one warpgroup's softmax); d64 br128 ov2 within
# 5% of br192 ov1 (heuristic) either way (br128 ov1 was 1.5% slower than br192 at d64 causal).
# Calls, carry [".debs", ".deps"]:
#   PART=1 (cold): build (spills, C7512 / C7514 counted), benches ov1 / ov2 both orders (5 repeats, forward
#          ms) on the issue's d128 rows and d64 rows, the forward tests (float64 reference on every variant,
#          Ov2BitsEqualOv1, the persistent and ot1 sanitizer-sized cases under memcheck / racecheck /
#          synccheck), ncu of ov1 / ov2 at 4,32,32,4096,128 (instructions, cycles, warp states).
#   then carry [".peers/a"] `bash experiments/peers/install.sh stage`, then carry [".peers/b"]
#   STAGE=2 ATTN_V="--variant $W.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128+heuristic" bash experiments/device/s17.sh
#   (the branch's heuristic already takes ov2 `ps1 rd1 ot1` as the d128 forward; ov1 beside it in the same
#   process; the d64 rows report the refusal of that name). If the tests, the sanitizers and the peers
#   run hold, merge s24-ov2 into main: those peers figures are then the figures of record.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
gpu_line "$OUT/gpu.txt"
{ grep -c "Registers are spilled" build.log; grep -A1 "Registers are spilled" build.log | grep -o "[0-9]* bytes spill stores" | sort | uniq -c
  echo "wgmma serialized (C7512 / C7514): $(grep -c 'C751[24]' build.log)"; } > "$OUT/spills.txt" 2>&1
F128="br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov1_pp1_rd1_ot1_d128 br128_bc128_st2_ov2_pp1_rd1_ot1_d128"
F64="br192_bc128_st3_ov1_pp0_rd1_ot1_d64 br128_bc128_st3_ov1_pp0_rd1_ot1_d64 br128_bc128_st3_ov2_pp0_rd1_ot1_d64 br128_bc128_st3_ov2_pp0_ps1_rd1_ot1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64"
bench_pair 128 4,32,32,4096,4096,128 - $F128
bench_pair 128g 4,32,8,4096,4096,128 - $F128
bench_pair 128c 4,32,32,4096,4096,128 --causal $F128
bench_pair 8k 1,16,16,8192,8192,128 --causal $F128
bench_pair 64c 4,32,32,4096,4096,64 --causal $F64
bench_pair 64 4,32,32,4096,4096,64 - $F64
fwd_tests 'AttentionWgmmaGpu.TmaOSanitizerSized:AttentionWgmmaGpu.PersistentSanitizerSized'
M="--metrics smsp__inst_executed.sum,sm__cycles_elapsed.max,gpu__time_duration.sum,smsp__average_warp_latency_issue_stalled_wait,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
for v in br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128; do
  brun "ncu_${v%%_pp*}_${v##*_d}" 90 ncu --clock-control none --section WarpStateStats --section SpeedOfLight $M \
    -k regex:attention_fwd --launch-count 1 "$DF" bench attention --shape 4,32,32,4096,4096,128 --variant "$W.fwd.$v" --repeats 1
done
fwd_report s25 "Duration|inst_executed.sum|cycles_elapsed|Warp Cycles Per Issued|Stall|stalled"
