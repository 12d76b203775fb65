#!/usr/bin/env bash
# Session 30 (issue 16; written in a session with no device time, for the next one). Binaries: main's build,
# carried as dist/ (experiments/device/pack.sh; PACK_ONLY needs detfuse, the attention test binaries and
# capi/libdetfuse_c.so).
#   PART=sweep, carry ["dist"]: every registered forward of the head dim (`detfuse list`), forward ms, 5 repeats,
#            in list order then reversed, at the rows whose forward decides the must-bar: row 2
#            (4,32,32,4096,128 causal) and row 1 (non-causal) with the d128 forwards, row 4 (4,32,32,4096,64
#            causal) with the d64 ones. Question: does the machine that comes (an H100 in sessions 26-29, where
#            row 2's forward was 0.93-0.945x of FA4's against 1.00x on the H200 in session 25) rank the
#            forwards as the H200 did (the heuristic's ov2 ps1 rd1 ot1 at d128, br192 rd1 ot1 at d64 causal)?
#            Then the attention GPU suite (the wgmma test binary, the variants test, the registry's wgmma
#            cases) for figures of record on that machine.
#   PART=ab, carry ["dist"]: ot2 (session 30: ot1's O tile written by stmatrix, the same bits) against ot1 on
#            the d128 heuristic's forward (rows 1 and 2) and the d64 causal one (row 4), forward ms, 5 repeats,
#            both orders, ROUNDS (2) rounds; before it the forward tests that take ot2 (the float64 list,
#            the persistent walks, Ot2BitsEqualOt1, TmaOSanitizerSized, TmaOStoresNoRowPastSq, the registry's
#            count) and memcheck / racecheck / synccheck on TmaOSanitizerSized.
#   then, carry [".peers/a"] and then [".peers/b"]: bash experiments/peers/install.sh stage (two calls)
#   PART=peers, carry ["dist"]: s28.sh's peers part (RUNS runs beside FA4 deterministic, the issue's rows).
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
attention_bins
gpu_line "$OUT/gpu.txt"
# fwd_names D: the forward-only wgmma variants of head dim D, without the prefix $W.fwd.
fwd_names() { "$DF" list --kernel attention --engine wgmma | awk '{print $1}' | grep "^$W\.fwd\..*_d$1\$" | sed "s|^$W\.fwd\.||"; }
case ${PART:-sweep} in
  sweep)
    mapfile -t F128 < <(fwd_names 128)
    mapfile -t F64 < <(fwd_names 64)
    echo "d128 forwards: ${#F128[@]}, d64: ${#F64[@]}" | tee -a "$OUT/gpu.txt"
    export BENCH_T=${BENCH_T:-120}
    bench_pair 128c 4,32,32,4096,4096,128 --causal "${F128[@]}"
    bench_pair 64c 4,32,32,4096,4096,64 --causal "${F64[@]}"
    bench_pair 128n 4,32,32,4096,4096,128 - "${F128[@]}"
    brun tests_all 240 "$TW" --gtest_brief=1
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    brun tests_reg 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
    REPORT_TESTS="tests_all tests_var tests_reg" fwd_report s30sweep "Duration" ;;
  ab)
    # Correct first: the forward tests that take ot2 (float64 list with 5 repeats, the persistent walks, the
    # TMA-O cases, the bits against ot1), the sanitizers on the sanitizer-sized TMA-O case, then the bench.
    brun tests_fwd 150 "$TW" --gtest_filter='AttentionWgmma.*:AttentionWgmmaGpu.MatchesFloat64*:AttentionWgmmaGpu.Persistent*:AttentionWgmmaGpu.Ot2*:AttentionWgmmaGpu.TmaO*'
    sanitize3 tmao "$TW" --gtest_filter='AttentionWgmmaGpu.TmaOSanitizerSized'
    for r in $(seq 1 "${ROUNDS:-2}"); do
      bench_pair "128c_$r" 4,32,32,4096,4096,128 --causal br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 \
        br128_bc128_st2_ov2_pp0_ps1_rd1_ot2_d128
      bench_pair "128n_$r" 4,32,32,4096,4096,128 - br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 \
        br128_bc128_st2_ov2_pp0_ps1_rd1_ot2_d128
      bench_pair "64c_$r" 4,32,32,4096,4096,64 --causal br192_bc128_st3_ov1_pp0_rd1_ot1_d64 br192_bc128_st3_ov1_pp0_rd1_ot2_d64
    done
    REPORT_TESTS="tests_fwd" fwd_report s30ab "Duration" ;;
  peers)
    ATTN_V="" PART=peers bash experiments/device/s28.sh ;;
esac
