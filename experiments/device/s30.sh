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
#   PART=ab, carry ["dist"]: the heuristic's forwards at rows 1, 2 and 4 (forward ms, 5 repeats), this build's
#            `detfuse` against an older one's (dist/old/detfuse.xz: `xz -c build/detfuse` of the other tree's
#            build), alternating, ROUNDS (3) rounds; for a kernel change whose bits are the same (branch
#            s30-stsm: ot1's O tile by stmatrix; its GPU tests first: PART=sweep's suite, which holds
#            TmaOBitsEqualDirectStore there).
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
    xz -dc dist/old/detfuse.xz > /tmp/detfuse_old && chmod +x /tmp/detfuse_old
    F=$W.fwd
    for r in $(seq 1 "${ROUNDS:-3}"); do
      for bin in "$DF" /tmp/detfuse_old; do
        tag=$([ "$bin" = "$DF" ] && echo new || echo old)
        brun "bench_${tag}_$r" 60 "$bin" bench attention --shape 4,32,32,4096,4096,128 --causal \
          --variant "$F.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128" --repeats 5
        brun "bench_${tag}n_$r" 60 "$bin" bench attention --shape 4,32,32,4096,4096,128 \
          --variant "$F.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128" --repeats 5
        brun "bench_${tag}64_$r" 60 "$bin" bench attention --shape 4,32,32,4096,4096,64 --causal \
          --variant "$F.br192_bc128_st3_ov1_pp0_rd1_ot1_d64" --repeats 5
      done
    done
    REPORT_TESTS=" " fwd_report s30ab "Duration" ;;  # (" ": no test logs to report)
  peers)
    ATTN_V="" PART=peers bash experiments/device/s28.sh ;;
esac
