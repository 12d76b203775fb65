#!/usr/bin/env bash
# Branch s7-flce on the H200, from the repository root (< 4 min):
#   issue 17 item 1: the hybrid `wgmmalt` variants (ex16 logits GEMM on wgmma,
#     dX and dW on cuBLASLt, dW by beta = 1 per chunk);
#   item 2: even chunks (every engine: N cut into ceil(N / max rows) equal
#     chunks, rounded up to BM; the dX split count unchanged);
#   item 3: where the accumulator-in dW cost of the wgmma owning path comes
#     from (the dW GEMM alone per epilogue and raster group, then ncu on it).
# Binaries: the Release build in ./build (configured with -DDETFUSE_WGMMA=ON), or
# dist/build.tar.xz from experiments/device/pack.sh.
# Output: logs under $OUT; the summary table last.
set -u
source "$(dirname "$0")/lib.sh"
B=${BUILD:-build}
TFLCE=$B/tests/flce/test_flce_gpu; TVAR=$B/tests/flce/test_flce_variants; TOWN=$B/tests/flce/test_flce_owning_gpu
CLI=$B/detfuse
LT=flce.bf16.wgmmalt.owning
WG=flce.bf16.wgmma.owning
C2=bm128_bn256_bk64_c2_st4_pp0
P2=bm128_bn128_bk64_c2_st6_pp1

gpu_line "$OUT/tests.log"
# CPU tests of the plan (even chunks, hybrid plan and registration).
run tests 10 "$TVAR"
# The float64 reference with every option (ignore_index, mean/sum/none, label
# smoothing, z-loss, softcap, grad_output, fp32/bf16 gradients, odd N/V,
# NaN-poisoned outputs), every mode, 5 repeats: the four hybrid variants.
run tests 30 "$TFLCE" --gtest_filter="*wgmmalt*"
# One sanitizer pass on a small case of a hybrid variant (two engines in one call).
sanitize memcheck 25 "$TFLCE" --gtest_filter="*RepeatsBitwise*wgmmalt_owning_${P2}_ex16_mb1024"
# 20 repeats, one digest, at a two-chunk shape (the beta = 1 path).
run repeats 15 "$CLI" verify --kernel flce --shape 8192,4096,128256 --dtype bf16 --variant $LT.${P2}_ex16_mb1024 --repeats 20 --seed 0
# The issue's shapes and 32768: hybrid beside cuBLASLt mb2000 and ex16 ping mb1024.
for st in 4096,4096,128256:25 16384,4096,128256:30 8192,2304,256000:25 32768,4096,128256:30; do
  s=${st%:*}
  run bench ${st#*:} "$CLI" bench flce --shape "$s" --dtype bf16 --repeats 3 \
    --variant $LT.${P2}_ex16_mb1024 --variant $LT.${C2}_ex16_mb1024 --variant $LT.${P2}_ex16_mb1920 \
    --variant flce.bf16.cublaslt.owning.mb2000 --variant $WG.${P2}_ex16_mb1024
done
# Item 3: the dW GEMM alone (M 128256, N 4096, K 4096): store / accumulators in
# / read-modify-write at raster groups 1, 4, 8, 16, event-timed.
run dwcost 15 "$TOWN" --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_DwAloneCost*'
# ... and under ncu, the ping-pong kernel's first 36 launches (group 1 and 4:
# 6 launches each of store, accumulators in, read-modify-write): time, DRAM
# bytes, L2 hit rate (the test launches the ping-pong kernel first: its 18
# launches of group 1, then 18 of group 4).
run ncu 30 ncu --clock-control none --print-summary none --csv -k 'regex:gemm_wgmma' -c 36 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
  "$TOWN" --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_DwAloneCost*'
# Item 3, hypothesis 4 (the accumulator loads serialised): the SASS of the
# ping-pong dW kernel (operands M/N-major), loads and wgmma in program order.
SASSFN=_ZN7detfuse4flce2wg17gemm_wgmma_kernelINS0_8WgConfigILi128ELi128ELi64ELi2ELi6ELb1EEELNS_5MajorE1ELS5_1EEEvNS1_6KernelIT_XT0_EXT1_EE6ParamsE
run sass 5 cuobjdump -sass -fun "$SASSFN" $B/kernels/flce/CMakeFiles/detfuse_flce_wgmma.dir/flce_wgmma_ping128c2.cu.o

echo
echo "## summary"
cat "$SUMMARY"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/tests.log" | sort | uniq -c | head -20
echo "-- hybrid precision (rel errors per case, ping mb1024):"
awk '/^\[ RUN .*MatchesReference.*wgmmalt.*pp1_ex16_mb1024$/ {p=1; print; next} /^\[ RUN/ {p=0} p && /rel errors|Failure|Expected|Which is/' "$OUT/tests.log" | head -14
echo "-- repeats (5 per variant in the test, 20 by verify):"
grep -E "distinct digests" "$OUT/tests.log" | sort | uniq -c
grep -iE "reproduced|mismatch|not stored|distinct|digest" "$OUT/repeats.log" | grep -v "^===" | head -8
echo "-- sanitizer:"
grep -E "ERROR SUMMARY|=== exit" "$OUT/sanitize.log"
echo "-- bench (ms; x GEMMs = ratio to the three cuBLAS GEMMs of the same process):"
grep -E "^FLCE|cuBLAS|owning" "$OUT/bench.log" | grep -v "^===" | head -40
echo "-- item 3, dW alone (ms):"
grep -E "dw-alone" "$OUT/dwcost.log"
echo "-- item 3, ncu (ID, metric, value; IDs 0-5 store, 6-11 accumulators in, 12-17 read-modify-write at group 1; 18-35 the same at group 4):"
grep -E '^"[0-9]+"' "$OUT/ncu.log" | awk -F'","' '{gsub(/"/,"",$1); gsub(/"/,"",$NF); print $1, $(NF-2), $NF}' | awk '$1 % 6 == 1' | head -40
echo "-- item 3, SASS of the ping-pong dW kernel: global loads, wgmma, barrier waits (full listing in sass.log):"
grep -nE "LDG|HGMMA|SYNCS|WARPSYNC|BAR\.|DEPBAR" "$OUT/sass.log" | awk '{$1=$1; print}' | cut -c1-90 | head -40
