#!/usr/bin/env bash
# Session 15 (helper s15-fwd192), issue 16 item 2: the d64 forward with three
# consumer warpgroups, 192 query rows per tile (FlashAttention-3 / -4's sm90
# tile at d <= 64; kernels/attention/wgmma/README.md "Three consumer
# warpgroups"). Registered: attention.bf16.wgmma.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_d64
# and ..._ps1_rd1_ot1_d64 (512 threads, setmaxnreg 32 / 160, 0 spills by ptxas).
#
# Run from the repository root with a Release build of this branch in ./build
# (DETFUSE_WGMMA=ON; targets detfuse test_attention_wgmma
# test_attention_wgmma_fwd_layout test_attention_gpu test_attention_variants,
# e.g. TARGETS="..." experiments/device/build_there.sh build). Logs under /tmp/s15-fwd192, tarred into
# $OUT/s15-fwd192.tar.gz (OUT made absolute; default ./out), the report also as
# $OUT/s15-fwd192-report.txt. About 2.5 minutes expected (timeouts bound a
# hang). Stages (each runs whatever the one before returned; exit codes in
# summary.txt):
#   1. tests: the CPU layout test (the S and O fragments of three warpgroups,
#      the storage, the thread and register counts); the registry test (24 fwd
#      variants); the float64 reference walk of every fwd variant (15 cases x
#      d64 / d128: GQA, odd lengths, causal Sq > Sk, softcap, window, 5
#      repeats one digest); the persistent tests (grids of 1, 7 CTAs and the
#      full grid, causal head groups; ThreeWarpgroupsSanitizerSized) and the ot1
#      tests (no O row written past Sq); the per-variant suites of
#      tests/attention for the two new variants;
#   2. registers and spills of the new batch object and of the br128 d64
#      forwards' (cuobjdump, where present; 0 STL expected);
#   3. compute-sanitizer memcheck, racecheck, synccheck on
#      ThreeWarpgroupsSanitizerSized (the two br192 variants, causal Sq > Sk and
#      non-causal GQA with odd lengths, on 2 CTAs and the full grid);
#   4. `detfuse bench attention` B=4 H=32 S=4096 d=64, 3 repeats, causal and not:
#      the two br192 forwards beside the heuristic's (br128 ps1 rd1 ot1 causal,
#      br128 ps1 non-causal), causal again in the reverse order; S=4608 (a
#      multiple of 192 and of 128: no padded query block) causal and not;
#   5. ncu (clock control off, SpeedOfLight): the duration of one causal
#      forward of br192 rd1 ot1 and of br128 rd1 ot1 (the lead's 0.774 ms).
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, STL 0,
# the tables last (prediction in the README "Three consumer warpgroups":
# d64 causal br192 rd1 ot1 ~0.71-0.74 ms by ncu against br128's 0.774,
# non-causal br192 ~8-12% above br128 ps1).
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
export OUT
source "$(dirname "$0")/lib.sh"
logs_in_tmp s15-fwd192
gpu_line "$OUT/gpu.txt"
attention_bins

# 1. tests
run layout_cpu 10 "$B/tests/attention_wgmma/test_attention_wgmma_fwd_layout"
run tests_reg 20 "$TW" --gtest_filter='AttentionWgmma.*'
run tests_ref 90 "$TW" --gtest_filter='AttentionWgmmaGpu.MatchesFloat64Reference*'
run tests_ps 90 "$TW" --gtest_filter='AttentionWgmmaGpu.Persistent*:AttentionWgmmaGpu.ThreeWarpgroups*:AttentionWgmmaGpu.TmaO*'
run tests_attn 60 "$B/tests/attention/test_attention_gpu" --gtest_filter='*br192*'
run tests_variants 20 "$B/tests/attention/test_attention_variants"

# 2. registers and spills (the br192 batch; the br128 d64 forwards' batches)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" fwd_d64_br192_bc128_st3_ov1_ps1_rd1 fwd_d64_bc128_st3_ov1_ps1 fwd_d64_bc128_st3_ov1_ps1_rd1_ot1 \
  > "$OUT/regs.log" 2>&1

# 3. sanitizers (the two br192 variants, two sanitizer-sized cases)
sanitize3 fwd192 "$TW" --gtest_filter='AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'

# 4. bench (forward ms, column 2; forward TFLOP/s, column 3)
W=attention.bf16.wgmma.fwd
NAMES="br192_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64
       br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64 br128_bc128_st3_ov1_pp0_ps1_d64"
REV=$(echo $NAMES | tr ' ' '\n' | tac | tr '\n' ' ')
bench_both d64 4,32,32,4096,4096,64 $NAMES
vs=""
for n in $REV; do vs="$vs --variant $W.$n"; done
run bench_d64_causal_rev 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $vs --repeats 3
[ -n "${FWD192_FULL:-}" ] && bench_both d64_s4608 4,32,32,4608,4608,64 $NAMES  # (the lead: off in s15-final.sh, device budget)

# 5. ncu: one causal forward of each tile (the kernel's duration)
for n in ${FWD192_FULL:+br192_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64 br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64}; do
  run "ncu_${n%%_bc128*}" 60 ncu --clock-control none --section SpeedOfLight --section LaunchStats -k regex:attention_fwd --launch-count 1 \
    "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W.$n" --repeats 1
done

# fwd_table LOG_A LOG_B NAME...: forward ms and TFLOP/s of each $W.NAME in two logs.
fwd_table() {
  local la=$1 lb=$2 v a c
  shift 2
  for v in "$@"; do
    a=$(awk -v n="$W.$v" '$1 == n { print $2 " ms " $3 }' "$la")
    c=$(awk -v n="$W.$v" '$1 == n { print $2 " ms " $3 }' "$lb")
    printf '%-44s %20s %20s\n' "$v" "${a:-missing}" "${c:-missing}"
  done
}

{
  echo
  echo "--- tests"
  test_report layout_cpu tests_reg tests_ref tests_ps tests_attn tests_variants
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per forward kernel)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_fwd192.log "$OUT"/racecheck_fwd192.log \
    "$OUT"/synccheck_fwd192.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log | head -10
  echo "--- forward (ms, TFLOP/s), B=4 H=32 d=64, 3 repeats"
  printf '%-44s %20s %20s\n' "S=4096" "non-causal" "causal"
  fwd_table "$OUT/bench_d64.log" "$OUT/bench_d64_causal.log" $NAMES
  printf '%-44s %20s %20s\n' "S=4096, reverse order" "-" "causal"
  fwd_table /dev/null "$OUT/bench_d64_causal_rev.log" $REV
  printf '%-44s %20s %20s\n' "S=4608 (no padded query block)" "non-causal" "causal"
  fwd_table "$OUT/bench_d64_s4608.log" "$OUT/bench_d64_s4608_causal.log" $NAMES
  echo "--- ncu, causal 4,32,32,4096,64 forward kernel"
  for f in "$OUT"/ncu_*.log; do
    echo "$(basename "$f" .log): $(grep -E '^ +Duration' "$f" | head -1 | tr -s ' ')"
    grep -E "attention_fwd_wgmma_kernel|Registers Per|Compute \(SM\) Throughput|Memory Throughput" "$f" | head -4 | cut -c1-140
  done
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s15-fwd192
