#!/usr/bin/env bash
# Attention softcap and sliding window (issue 16, item 3) on the H200: run
# from the repo root with a Release build in ./build (DETFUSE_WGMMA on);
# logs under $OUT; under 4 minutes. Stages:
#   1. the attention GPU tests (every registered variant: fma and wgmma),
#      the new softcap / window cases first, then the whole binaries;
#   2. compute-sanitizer memcheck, racecheck, synccheck on the sanitizer-sized
#      wgmma softcap+window backward case (every wgmma strategy) and memcheck
#      on a small fma softcap+window filter;
#   3. `detfuse bench attention` at B=4, H=32, S=4096, d=128, causal, without
#      and with --softcap 50 --window 1024, for the heuristic's variant (the
#      wgmma owning d128), the ordered TMA variant and the ov1 pp1 forward
#      (forward only).
# Look for: PASSED lines, "ERROR SUMMARY: 0 errors" four times, and the
# bench table rows (fwd ms, fwd+bwd ms, distinct dQ digests = 1 for the
# deterministic ones). The TFLOP/s column counts the full causal triangle
# (problem.h's flops_forward does not know the window), so compare the ms.
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

TA=$B/tests/attention/test_attention_gpu
TW=$B/tests/attention_wgmma/test_attention_wgmma
TV=$B/tests/attention/test_attention_variants
DF=$B/detfuse

# 1. tests (timeouts are caps; the whole script stays under 4 minutes)
run variants_cpu 10 "$TV"
run attention_gpu 35 "$TA" --gtest_filter='*Correct*:*DeterminismSoftcapWindow*'
run attention_wgmma 55 "$TW" --gtest_filter='AttentionWgmmaGpu.*:AttentionWgmmaBwdGpu.MatchesFloat64ReferenceAndRepeats:AttentionWgmmaBwdGpu.OrderedManyKeyBlocks:AttentionWgmmaBwdGpu.SanitizerSizedSoftcapWindow:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered'

# 2. sanitizers (small filters: memcheck and synccheck over every wgmma strategy
#    on the sanitizer-sized softcap+window cases, racecheck over the ordered
#    ones (semaphores, TMA dQ writer) on the window case; memcheck over two fma
#    strategies on the softcap+window cases)
SW='AttentionWgmmaBwdGpu.SanitizerSizedSoftcapWindow:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered'
run memcheck_wgmma 25 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter="$SW"
run racecheck_wgmma 25 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" \
  --gtest_filter='AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered' 
run synccheck_wgmma 25 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter="$SW"
run memcheck_fma 10 compute-sanitizer --tool memcheck --error-exitcode 9 "$TA" \
  --gtest_filter='*DeterminismSoftcapWindow*bf16_fma_partials_br32_bc32_w4_d64*:*DeterminismSoftcapWindow*fp32_fma_atomic_br32_bc32_w4_d64*'

# 3. the cost of softcap 50 + window 1024 at the issue's shape (causal)
W=attention.bf16.wgmma
VS="--variant $W.owning.br64_bc128_st2_qbc64_qst2_d128 --variant $W.ordered.br64_bc128_st2_tma1_d128
    --variant $W.fwd.br128_bc128_st2_ov1_pp1_d128"
run bench_plain 25 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $VS --repeats 3
run bench_softcap50_window1024 25 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal \
  --softcap 50 --window 1024 $VS --repeats 3

{
  echo
  echo "--- tests"
  grep -hE "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran" "$OUT"/variants_cpu.log "$OUT"/attention_*.log | tail -40
  grep -hE "distinct dQ digests" "$OUT"/attention_*.log | grep -v atomic | head -5
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log
  echo "--- bench (causal, 4,32,32,4096,4096,128)"
  for f in "$OUT"/bench*.log; do echo "# $(basename "$f" .log)"; grep -E "attention\.bf16" "$f"; done
  echo "--- summary"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
