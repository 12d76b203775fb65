#!/usr/bin/env bash
# Issue 17 (branch flcefast) on the H200, from the repository root:
#   bash experiments/device/flcefast.sh              tests, sanitizers, bench (< 4 min)
#   bash experiments/device/flcefast.sh --peers-only  experiments/flce_peers.py and `detfuse bench`
#                                                     at the issue's four shapes (< 4 min)
#   bash experiments/device/flcefast.sh --all         both
# Binaries: dist/ from experiments/make_dist.sh (dist/bin.tar.xz or dist/bin),
# else the Release build in ./build. The peers part wants the peer wheels
# installed first (experiments/peers/install.sh; the PYTHONPATH lib.sh sets) and
# libdetfuse_c.so (copied into python/detfuse/). Output: logs under $OUT; the
# summary table last.
set -u
source "$(dirname "$0")/lib.sh"
if [ -f dist/bin.tar.xz ] && [ ! -d dist/bin ]; then tar -C dist -xJf dist/bin.tar.xz; fi
if [ -d dist/bin ]; then
  T=dist/bin; TFLCE=$T/test_flce_gpu; TVAR=$T/test_flce_variants; TENG=$T/test_engines; CLI=$T/detfuse; LIB=$T/libdetfuse_c.so
else
  B=${BUILD:-build}
  TFLCE=$B/tests/flce/test_flce_gpu; TVAR=$B/tests/flce/test_flce_variants; TENG=$B/tests/engines/test_engines
  CLI=$B/detfuse; LIB=$B/capi/libdetfuse_c.so
fi
L=flce.bf16.cublaslt
SHAPES3="16384,4096,128256 8192,2304,256000 4096,4096,128256"
mode=${1:---device}

if [ "$mode" != --peers-only ]; then
  gpu_line "$OUT/tests.log"
  # The variants touched (every cuBLASLt variant: fp32 and bf16 logits) and a
  # sample of old ones (the row pass and its reductions changed under them).
  run tests 20 "$TVAR"
  run tests 200 "$TFLCE" --gtest_filter='*cublaslt*:*bf16_mma_owning_bm128_bn128*mb1024*:*fp32_fma_partials_bm64*:*wgmma_owning_bm128_bn256*c2*mb1920*:FlceBadInput*'
  run tests 40 "$TENG" --gtest_filter='LtMatmul.*:ThreeGemms.*'
  # Sanitizers on the cuBLASLt row pass (its reductions on cub::BlockReduce).
  sanitize memcheck 100 "$TFLCE" \
    --gtest_filter='*MatchesReference*cublaslt_owning_mb512'
  sanitize racecheck 60 "$TFLCE" \
    --gtest_filter='*RepeatsBitwise*cublaslt_owning_mb512'
  sanitize synccheck 60 "$TFLCE" \
    --gtest_filter='*RepeatsBitwise*cublaslt_owning_mb512'
  # New against old cuBLASLt owning variants at the issue's three shapes (3 GEMMs in the same process).
  for s in $SHAPES3; do
    run bench 40 "$CLI" bench flce --shape "$s" --dtype bf16 --repeats 5 \
      --variant $L.owning.mb1024 --variant $L.owning.mb2000
  done
fi

if [ "$mode" = --peers-only ] || [ "$mode" = --all ]; then
  [ -f "$LIB" ] && cp "$LIB" python/detfuse/libdetfuse_c.so
  run peers 230 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" --budget-s 180
  for s in $SHAPES3 32768,4096,128256; do
    run peers 60 "$CLI" bench flce --shape "$s" --dtype bf16 --repeats 3 \
      --variant $L.owning.mb1024 --variant $L.owning.mb2000
  done
fi

echo
echo "## summary ($mode)"
if [ "$mode" != --peers-only ]; then
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran" "$OUT/tests.log" | sort | uniq -c | head -30
  # Precision of the bf16-logits variants beside their fp32-logits twin (every case).
  awk '/^\[ RUN .*MatchesReference.*cublaslt_owning_(lg16_)?mb1024$/ {p=1; print; next} /^\[ RUN/ {p=0} p && /rel errors|Failure|Expected|Which is/' "$OUT/tests.log"
  grep -E "ERROR SUMMARY|=== exit" "$OUT/sanitize.log"
  grep -E "distinct digests" "$OUT/tests.log" | sort | uniq -c
  grep -E "cuBLAS|owning" "$OUT/bench.log" | grep -v "^===" | head -30
fi
if [ "$mode" = --peers-only ] || [ "$mode" = --all ]; then
  sed -n '/^| N,D,V/,/^JSON/p' "$OUT/peers.log"
  grep -E "cuBLAS|owning" "$OUT/peers.log" | grep -v "^===\|^|" | head -20
fi
