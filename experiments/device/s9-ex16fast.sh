#!/usr/bin/env bash
# Branch s9-ex16fast on the H200, from the repository root (< 3 min with a
# prebuilt ./build): issue 17, the ex16 logits epilogue through the TMA store
# (ot1) at the speed of the plain bf16 TMA store (kernels/flce/README.md "TMA
# store epilogue"). Every log flat in $OUT.
#   1. CPU: tile addresses, TMA boxes, storage, the TMA rule and fallback, names;
#   2. GPU: the TMA epilogue bit-identical to the register epilogue (ex16 chunk
#      and statistics, store_bf16; guard rows and the columns past N untouched,
#      N % 8 != 0 included: the failure session 9 found), the ot1 configs'
#      layout cases (now the fallback configuration), the ot1 and ex16 FLCE
#      variants against the float64 reference (their test names carry the
#      variant names: *ex16*, not *exp16*);
#   3. compute-sanitizer memcheck and racecheck on the sanitizer-sized case;
#   4. wgmma_probe, the logits alone (bf16 out, ex16, ex16 softcap 30; TF/s) at
#      M,N,K 4096,128256,4096 and 2048,256000,2304, ot1 beside st6;
#   5. detfuse bench flce, st6 and ot1 ex16 variants at 16384,4096,128256 and
#      8192,2304,256000, 3 repeats;
#   6. ncu of the c2 ot1 logits kernel at the Gemma-2 chunk (ex16, then ex16
#      with softcap): the "no instruction" stall share (was 32.9% of the issue
#      gap), the instruction count. NCU=0 skips it.
# Output: logs under $OUT; the summary table last.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=build; CLI=$B/detfuse; TE=$B/tests/engines/test_engines_wgmma
LT=flce.bf16.wgmmalt.owning
ST6=$LT.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024
OT2=$LT.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1024
OT22=$LT.bm128_bn128_bk64_c22_st5_pp1_ot1_ex16_mb1024
ST6B=$LT.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1920
OT2B=$LT.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1920
run cpu 30 bash -c "$B/tests/engines/test_engines_epi_tma_layout && $B/tests/flce/test_flce_variants"
run engines 90 $TE --gtest_filter='GemmWgmma.TmaEpilogue*:GemmWgmma.WgPing128c2t_*:GemmWgmma.WgPing128c22t_*'
run flce 120 $B/tests/flce/test_flce_gpu --gtest_filter='*ot1*:*ex16*'
for t in memcheck racecheck; do sanitize $t 60 $TE --gtest_filter='GemmWgmma.TmaEpilogueSanitizerSized'; done
run probe_llama 40 $B/experiments/wgmma_probe 4096 4096 128256 5 logits
run probe_gemma 40 $B/experiments/wgmma_probe 2048 2304 256000 5 logits
for s in 16384,4096,128256 8192,2304,256000; do
  run "bench_flce_${s//,/x}" 60 "$CLI" bench flce --shape "$s" --repeats 3 \
    --variant $ST6 --variant $OT2 --variant $OT22 --variant $ST6B --variant $OT2B
done
if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
  # Launches of the probe with reps 1 (warm-up, timed): bf16 x2, ex16 x2, ex16 cap30 x2;
  # profiled: ex16 timed, cap30 warm-up and timed (session 9's logs have the bf16 launch).
  run ncu_logits_ot1 90 ncu --clock-control none --print-summary none --section SpeedOfLight \
    --section WarpStateStats --section InstructionStats -k regex:gemm_wgmma_kernel \
    --launch-skip 3 --launch-count 3 $B/experiments/wgmma_probe 2048 2304 256000 1 "logits ping bm128_bn128_c2_st5_ot1"
fi
echo
cat "$OUT/gpu.txt"
echo "--- tests"
for f in cpu engines flce; do
  printf '%-9s %s\n' "$f" "$(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/$f.log" | tr '\n' ' ')"
done
grep -h "FAILED  \]" "$OUT"/*.log | sort -u | head -20
echo "sanitizer runs with 0 errors (of 2): $(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/sanitize.log")"
grep "ERROR SUMMARY" "$OUT/sanitize.log" | grep -v " 0 errors"
if [ -f "$OUT/ncu_logits_ot1.log" ]; then
  echo "--- ncu c2 ot1 at 2048,256000,2304 (launches: ex16, ex16 cap30 x2; the no-instruction stall was 32.9% of the issue gap)"
  grep -hE "Duration|Executed Instructions  |Warp Cycles Per Issued|excessive sectors" \
    "$OUT/ncu_logits_ot1.log" | sed 's/^ *//' | cut -c1-120
  grep -hE "On average, each warp|cycles being stalled|represents about" "$OUT/ncu_logits_ot1.log" | sed 's/^ *//' | cut -c1-120
fi
echo "--- logits alone (ms, TF/s): ot1 vs st6 register epilogue (targets: ot1 ex16 >= 680 Gemma-2, >= 660 Llama)"
grep -h "^shape" "$OUT"/probe_*.log
grep -h "^logits" "$OUT"/probe_*.log
echo "--- bench flce"
grep -hE "^flce\.|^variant" "$OUT"/bench_*.log
cat "$SUMMARY"
