#!/usr/bin/env bash
# Branch s6-flceown on the H200, from the repository root (< 4 min):
#   issue 19 item 2: the owning FLCE variants of one engine tile configuration
#     give one class of bits across chunk budgets (running dW sum in the
#     tensor-core accumulators; a dX split that does not follow the chunk);
#   issue 17 item 1 (first step): the `ex16` wgmma variants (the chunk as bf16
#     exp(z - m_tile), the target logit in the epilogue's statistics).
# Binaries: the Release build in ./build (configured with -DDETFUSE_WGMMA=ON), or
# dist/build.tar.xz from experiments/device/pack.sh.
# Output: logs under $OUT; the summary table last.
set -u
source "$(dirname "$0")/lib.sh"
B=${BUILD:-build}
TFLCE=$B/tests/flce/test_flce_gpu; TVAR=$B/tests/flce/test_flce_variants; TOWN=$B/tests/flce/test_flce_owning_gpu
CLI=$B/detfuse
WG=flce.bf16.wgmma.owning
C2=bm128_bn256_bk64_c2_st4_pp0
P2=bm128_bn128_bk64_c2_st6_pp1

gpu_line "$OUT/tests.log"
# CPU tests of the plan (chunk boundaries, dX split, ex16 plan).
run tests 20 "$TVAR"
# Budget invariance: the engines' chains, the registered owning variants (mma,
# wgmma incl. ex16; cuBLASLt reported), the wgmma driver at tiny budgets.
run tests 90 "$TOWN"
# The float64 reference with every option, every mode, 5 repeats: the touched
# variants (ex16 of both tiles at two budgets, an old wgmma and an mma owning
# variant whose dW and dX paths changed).
run tests 150 "$TFLCE" --gtest_filter="*wgmma_owning_*_ex16_mb512:*wgmma_owning_*_ex16_mb1920:*wgmma_owning_${C2}_mb1920:*bf16_mma_owning_bm128_bn128*mb512"
# One sanitizer pass on a small case of a new variant.
sanitize memcheck 60 "$TFLCE" \
  --gtest_filter="*RepeatsBitwise*wgmma_owning_${C2}_ex16_mb512"
# Config-invariance classes at a multi-chunk shape (mb512/1024/1920 cut
# 20000 rows at 2560/5248/9984 rows, ex16 at 5248/10624/one chunk).
run invariance 70 "$CLI" verify --kernel flce --shape 20000,256,50000 --dtype bf16 --all-variants \
  --seed 0 --repeats 2 --db "$OUT/verify.db"
# Cost of the budget-invariant dW against the read-modify-write (same binary).
run cost 40 "$TOWN" --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_OwningCost*'
# Old against new at the Llama heads, with the three cuBLAS GEMMs of the same process.
for s in 4096,4096,128256 16384,4096,128256; do
  run bench 40 "$CLI" bench flce --shape "$s" --dtype bf16 --repeats 5 \
    --variant $WG.${C2}_mb1024 --variant $WG.${P2}_mb1024 \
    --variant $WG.${C2}_ex16_mb1024 --variant $WG.${P2}_ex16_mb1024 --variant $WG.${P2}_ex16_mb512 \
    --variant flce.bf16.cublaslt.owning.mb2000
done

echo
echo "## summary"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/tests.log" | sort | uniq -c | head -40
echo "-- budget classes (one class per tile configuration expected for mma and wgmma):"
grep -E "class\(es\)|differ from one launch" "$OUT/tests.log" | head -60
echo "-- ex16 precision (rel errors per case):"
awk '/^\[ RUN .*MatchesReference.*ex16_mb1024$/ {p=1; print; next} /^\[ RUN/ {p=0} p && /rel errors|Failure|Expected|Which is/' "$OUT/tests.log" | head -40
echo "-- repeats:"
grep -E "distinct digests" "$OUT/tests.log" | sort | uniq -c
echo "-- sanitizer:"
grep -E "ERROR SUMMARY|=== exit" "$OUT/sanitize.log"
echo "-- verify --all-variants classes:"
grep -iE "class|owning" "$OUT/invariance.log" | grep -v "^===" | head -40
echo "-- cost (accumulators vs read-modify-write):"
grep -E "cost " "$OUT/cost.log"
echo "-- bench (ms):"
grep -E "cuBLAS|owning" "$OUT/bench.log" | grep -v "^===" | head -30
