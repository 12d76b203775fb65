#!/usr/bin/env bash
# Branch s8-epitma on the H200, from the repository root (< 3 min with a
# prebuilt ./build): issue 17, the ex16 logits epilogue through shared memory
# and a TMA store (WgConfig EPI_TMA, variant token ot1; kernels/flce/README.md
# "TMA store epilogue").
#   1. CPU: the tile addresses against the TMA layout, the storage, the names;
#   2. GPU: the TMA epilogue bit-identical to the register epilogue (ex16 chunk
#      and statistics, store_bf16; guard rows and columns untouched), the new
#      configs' fp32 layout cases, the ot1 wgmmalt variants against the float64
#      FLCE reference (registry walk);
#   3. compute-sanitizer memcheck and racecheck on the sanitizer-sized case;
#   4. wgmma_probe, the logits alone (bf16 out and ex16, TF/s) at the CUTLASS
#      probe's shapes M,N,K 4096,128256,4096 and 2048,256000,2304, ot1 beside
#      the register epilogue of the same tile (st6);
#   5. detfuse bench flce, the ot1 variants beside c2 st6 ex16 mb1024, at
#      16384,4096,128256 and 8192,2304,256000.
# CUTLASS_PROBE=1 also runs experiments/gemm_cutlass_probe (~2 min more; not in
# `all`: cmake --build build --target gemm_cutlass_probe), whose SUMMARY has
# "ours ot1" columns beside CUTLASS's own TMA-epilogue kernel.
# Output: logs under $OUT; the summary table last.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=build; CLI=$B/detfuse; TE=$B/tests/engines/test_engines_wgmma
LT=flce.bf16.wgmmalt.owning
REF=$LT.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024
OT2=$LT.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1024
OT22=$LT.bm128_bn128_bk64_c22_st5_pp1_ot1_ex16_mb1024
OT2B=$LT.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1920
run cpu 30 bash -c "$B/tests/engines/test_engines_epi_tma_layout && $B/tests/flce/test_flce_variants"
run engines 90 $TE --gtest_filter='GemmWgmma.TmaEpilogue*:GemmWgmma.WgPing128c2t_*:GemmWgmma.WgPing128c22t_*:GemmWgmma.WgPing128c2_AK_BK:GemmWgmma.Cluster2x2Exp16SameBitsAs2x1'
run flce_ot1 90 $B/tests/flce/test_flce_gpu --gtest_filter='*ot1*'
for t in memcheck racecheck; do sanitize $t 40 $TE --gtest_filter='GemmWgmma.TmaEpilogueSanitizerSized'; done
run probe_llama 40 $B/experiments/wgmma_probe 4096 4096 128256 5 logits
run probe_gemma 40 $B/experiments/wgmma_probe 2048 2304 256000 5 logits
for s in 16384,4096,128256 8192,2304,256000; do
  run "bench_flce_${s//,/x}" 60 "$CLI" bench flce --shape "$s" --repeats 3 \
    --variant $REF --variant $OT2 --variant $OT22 --variant $OT2B
done
if [ "${CUTLASS_PROBE:-0}" = 1 ] && [ -x $B/experiments/gemm_cutlass_probe ]; then
  run gemm_cutlass_probe 150 $B/experiments/gemm_cutlass_probe 5
fi
echo
cat "$OUT/gpu.txt"
echo "--- tests"
for f in cpu engines flce_ot1; do
  printf '%-9s %s\n' "$f" "$(grep -hE '^\[  (PASSED|FAILED) ' "$OUT/$f.log" | tr '\n' ' ')"
done
grep -h "FAILED  \]" "$OUT"/*.log | sort -u | head -20
echo "sanitizer runs with 0 errors (of 2): $(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/sanitize.log")"
grep "ERROR SUMMARY" "$OUT/sanitize.log" | grep -v " 0 errors"
echo "--- logits alone (ms, TF/s): ot1 vs st6 register epilogue"
grep -h "^shape" "$OUT"/probe_*.log
grep -h "^logits" "$OUT"/probe_*.log
[ -f "$OUT/gemm_cutlass_probe.log" ] && sed -n '/^SUMMARY/,$p' "$OUT/gemm_cutlass_probe.log"
echo "--- bench flce"
grep -hE "^flce\.|^variant" "$OUT"/bench_*.log
cat "$SUMMARY"
