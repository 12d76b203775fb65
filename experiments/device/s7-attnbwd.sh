#!/usr/bin/env bash
# The pds2 attention backward (issue 16: dS^T double-buffered by query-block
# parity, LSE / D brought into shared memory by a producer thread's bulk
# copies, d128 with one fp32 dQ tile) on the H200: run from the repo root with
# a Release build in ./build (DETFUSE_WGMMA=ON); logs under $OUT; about 2.5
# minutes (the timeouts, caps, add up to 3 min 50 s). Stages:
#   1. the pds layout test (CPU) and the pds2 variants' GPU tests
#      (AttentionWgmmaBwdGpu.Pds2*: float64 reference on every backward case,
#      at 18 key blocks, at 65 query blocks per key block, 20 repeats at 18 key
#      blocks) plus the registry test (names, workspace sizes, can_run);
#   2. compute-sanitizer memcheck, racecheck, synccheck on the sanitizer-sized
#      pds2 cases (all four pds2 variants);
#   3. `detfuse bench attention` at B=4, H=32, S=4096, d=128 and d=64, causal
#      and not, pds2 beside pds1 (3 repeats), and 20 repeats of the ordered
#      pds2 variants at 18 key blocks (the dQ# column: distinct dQ digests).
# Look for: PASSED lines (no FAILED), "ERROR SUMMARY: 0 errors" three times,
# the bench rows (fwd+bwd TFLOP/s, pds2 against pds1; dQ# = 1 for every
# ordered row).
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

TW=$B/tests/attention_wgmma/test_attention_wgmma
DF=$B/detfuse
[ -x "$DF" ] || DF=$B/cli/detfuse

# 1. tests
run layout_cpu 5 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_pds2 40 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Pds2*'

# 2. sanitizers
F='AttentionWgmmaBwdGpu.Pds2SanitizerSized'
run memcheck_pds2 12 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run racecheck_pds2 15 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run synccheck_pds2 12 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter="$F"

# 3. bench, pds2 beside pds1
W=attention.bf16.wgmma
V128="--variant $W.ordered.br64_bc128_st2_tma1_pds2_d128 --variant $W.atomic.br64_bc128_st2_tma1_pds2_d128
      --variant $W.ordered.br64_bc128_st2_tma1_pds1_d128 --variant $W.atomic.br64_bc128_st2_tma1_pds1_d128"
V64="--variant $W.ordered.br64_bc128_st2_tma1_pds2_d64 --variant $W.atomic.br64_bc128_st2_tma1_pds2_d64
     --variant $W.ordered.br64_bc128_st2_tma1_pds1_d64 --variant $W.atomic.br64_bc128_st2_tma1_pds1_d64"
run bench_d128 18 "$DF" bench attention --shape 4,32,32,4096,4096,128 $V128 --repeats 3
run bench_d128_causal 18 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $V128 --repeats 3
run bench_d64 18 "$DF" bench attention --shape 4,32,32,4096,4096,64 $V64 --repeats 3
run bench_d64_causal 18 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $V64 --repeats 3
# 20 repeats, one dQ digest (the dQ# column) for the ordered pds2 variants at
# 18 key blocks of 128 (B=2, H=16, Hkv=8, S=2304, causal)
run digest20_d128 14 "$DF" bench attention --shape 2,16,8,2304,2304,128 --causal \
  --variant $W.ordered.br64_bc128_st2_tma1_pds2_d128 --repeats 20
run digest20_d64 14 "$DF" bench attention --shape 2,16,8,2304,2304,64 --causal \
  --variant $W.ordered.br64_bc128_st2_tma1_pds2_d64 --repeats 20

{
  echo
  echo "--- tests"
  for f in layout_cpu tests_pds2; do
    echo "# $f"
    grep -hE "^\[  (PASSED|FAILED|SKIPPED) \]|^\[       OK \] |^\[  FAILED  \] " "$OUT/$f.log" | head -30
  done
  grep -hE "Failure|error:" "$OUT"/tests_pds2.log | head -10
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_pds2.log "$OUT"/racecheck_pds2.log "$OUT"/synccheck_pds2.log
  echo "--- bench (B=4, H=32, S=4096, 3 repeats; digest20_*: 2,16,8,2304 causal, 20 repeats)"
  for f in "$OUT"/bench*.log "$OUT"/digest20*.log; do
    echo "# $(basename "$f" .log)"
    grep -E "^variant|^attention\.bf16|detfuse bench:|rror" "$f" | grep -v "^===" | cut -c1-150
  done
  echo "--- summary"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
