#!/usr/bin/env bash
# Branch s8-cluster on the H200, from the repository root (< 3 min), issue 17:
# 2x2 clusters for the wgmma GEMM (A multicast along the cluster's N pair, B
# along its M pair): WgPing128c22, WgCoop256c22 and the hybrid variants
# flce.bf16.wgmmalt.owning.bm128_bn128_bk64_c22_st6_pp1_ex16_mb{1024,1920},
# flce.bf16.wgmmalt.owning.bm128_bn256_bk64_c22_st4_pp0_ex16_mb{1024,1920}.
# The kernel change (2-D cluster, units per cluster tile, overhanging tiles
# skipped) touches every wgmma configuration, so the whole engine suite runs.
# Binaries: the Release build in ./build (configured with -DDETFUSE_WGMMA=ON), or
# dist/build.tar.xz from experiments/device/pack.sh.
# Look for: every exit 0; "[  PASSED  ]" and no FAILED; ERROR SUMMARY: 0 errors;
# the probe's ex16 TF/s of c22 against c2 (prediction ~700 against ~650 at
# 16384,4096,128256, kernels/flce/README.md "2x2 clusters"); the grid size of
# the c22 kernel (132 CTAs = 33 clusters of 4, or fewer); bench ms of c22
# against c2 at the three shapes. Output: logs under $OUT; the summary table last.
set -u
source "$(dirname "$0")/lib.sh"
B=${BUILD:-build}
TENG=$B/tests/engines/test_engines_wgmma; TFLCE=$B/tests/flce/test_flce_gpu
TVAR=$B/tests/flce/test_flce_variants; TOWN=$B/tests/flce/test_flce_owning_gpu
CLI=$B/detfuse; PROBE=$B/experiments/wgmma_probe
LT=flce.bf16.wgmmalt.owning
P2=bm128_bn128_bk64_c2_st6_pp1
P22=bm128_bn128_bk64_c22_st6_pp1
C22=bm128_bn256_bk64_c22_st4_pp0

gpu_line "$OUT/tests.log"
# Engine: every configuration against the float64 GEMM (odd shapes, cluster
# tiles overhanging M and N, raster groups, split-K with empty splits,
# accumulate, softcap logits, row statistics with a guard row) and c22 against
# c2 bit for bit (store, partials, ex16 epilogue).
run tests 45 "$TENG"
# Registration and plans (CPU).
run tests 10 "$TVAR" --gtest_filter='FlceExp16*'
# FLCE: the float64 reference with every option, every mode, repeats: the
# hybrid variants (c2 and coop for the regression, c22 new).
run tests 45 "$TFLCE" --gtest_filter='*wgmmalt*'
# Owning dW in the accumulators across chunks: every wgmma configuration, c22 included.
run tests 20 "$TOWN" --gtest_filter='OwningChain.Wgmma*'
# Sanitizers on small c22 cases: the engine's odd shapes (logits layout) and
# the 2x2 raster; racecheck on the logits layout's odd shapes; one FLCE case.
sanitize memcheck 30 "$TENG" --gtest_filter='GemmWgmma.WgPing128c22_AK_BK:GemmWgmma.WgCoop256c22_AK_BK:GemmWgmma.Cluster2x2Exp16SameBitsAs2x1'
sanitize racecheck 25 "$TENG" --gtest_filter='GemmWgmma.WgPing128c22_AK_BK'
sanitize memcheck 25 "$TFLCE" --gtest_filter="*RepeatsBitwise*wgmmalt_owning_${P22}_ex16_mb1024"
# The GEMMs alone at the Llama and Gemma-2 heads: every c2 and c22
# configuration (the filter "_c2" matches both), the ex16 column is the
# wgmmalt logits GEMM; cuBLASLt's three GEMMs first.
run probe 35 "$PROBE" 16384 4096 128256 5 "_c2"
run probe 30 "$PROBE" 8192 2304 256000 5 "_c2"
# Launch shape of the c22 kernel (grid = active clusters x 4) and its L2
# traffic beside c2's: the ex16 launches of a 4096-row probe (reps 1: per
# config 10 launches, ex16 the 5th and 6th; c2's are launches 4-5, c22's 14-15).
run ncu 30 ncu --clock-control none --print-summary none --csv -k 'regex:gemm_wgmma' --launch-skip 4 --launch-count 12 \
  --section LaunchStats --section SpeedOfLight --metrics lts__t_bytes.sum \
  "$PROBE" 4096 4096 128256 1 "ping bm128_bn128_c2"
# FLCE end to end, 3 repeats: c22 beside c2 (ping-pong and cooperative) at the issue's shapes.
for st in 4096,4096,128256:20 16384,4096,128256:30 8192,2304,256000:25; do
  run bench ${st#*:} "$CLI" bench flce --shape "${st%:*}" --dtype bf16 --repeats 3 \
    --variant $LT.${P2}_ex16_mb1024 --variant $LT.${P22}_ex16_mb1024 --variant $LT.${P22}_ex16_mb1920 \
    --variant $LT.bm128_bn256_bk64_c2_st4_pp0_ex16_mb1024 --variant $LT.${C22}_ex16_mb1024
done
# 20 repeats, one dW digest, at a two-chunk shape (8192 rows at mb1024: the
# beta = 1 path), without the float64 reference (the dW# column must read 1).
run digest20 30 "$CLI" bench flce --shape 8192,4096,128256 --repeats 20 --no-baseline --variant $LT.${P22}_ex16_mb1024

echo
echo "## summary"
cat "$SUMMARY"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/tests.log" | sort | uniq -c | head -20
grep -E "ERROR SUMMARY" "$OUT/sanitize.log"
echo "-- probe (ms, TF/s; ex16 = the wgmmalt logits GEMM):"
grep -E "^shape|^ping|^coop" "$OUT/probe.log"
echo "-- ncu (launch id, config, metric, value; the ex16 launches: c2 4-5, c22 14-15):"
grep -E '"(Duration|Grid Size|Cluster Size|L2 Cache Throughput|Compute \(SM\) Throughput|lts__t_bytes.sum)"' "$OUT/ncu.log" |
  awk -F'","' '{c=$5; sub(/.*WgConfig</,"",c); sub(/>.*/,"",c); print $1"\" <"c"> "$(NF-2)" "$(NF-1)" "$NF}' | tr -d '"' | head -80
echo "-- bench (ms):"
grep -E "^flce|^three cuBLAS|^FLCE" "$OUT/bench.log"
echo "-- 20 repeats (dW# = distinct dW digests):"
grep -E "^flce" "$OUT/digest20.log"
