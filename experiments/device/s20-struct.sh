#!/usr/bin/env bash
# Session 20 on the H200 (issue 16 item 4, no kernel function over ~200 lines): the kv kernel's walk
# without pds moved into BwdKvMainloop::consume, and from consume_pds the exp and mask (scores_to_p)
# and rs1's half step (rs_half). cuobjdump here, nvcc 13.0: the SASS of the heuristic's kv kernels
# (pb1 d64 and d128, sp1 ew1 d128, the d64 ew kernels) and rs1 d64 byte for byte as before; rs1 d128 the
# same instructions in another order; the non-pds kernels changed (kv_d128_br64_st2_o: +16 of 3888
# instructions, its spills 720 / 972 -> 768 / 960 bytes). One cold call, carry [".debs", ".deps"]: the
# build, every backward test of test_attention_wgmma (the float64 reference on every backward
# variant, 20 repeats one digest, Rs1BitwiseEqualsBase and EwBitwiseEqualsBase), the registry cases,
# test_bwd_dq_order, memcheck / racecheck / synccheck on the non-pds, rs1 and ew sanitizer-sized cases.
set -uo pipefail
source "$(dirname "$0")/lib.sh"  # OUT (made), run, sanitize3, attention_bins
gpu_line "$OUT/gpu.txt"
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
{ grep -c "Registers are spilled" build.log; grep -A1 "bwd_kv_d128_br64_st2_o\b" build.log | grep -o "[0-9]* bytes spill stores, [0-9]* bytes spill loads" | head -2; } > "$OUT/spills.txt" 2>&1
run tests_bwd 240 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.*'
run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
run tests_order 30 "$B/tests/attention_wgmma/test_bwd_dq_order"
sanitize3 base "$TW" --gtest_filter='AttentionWgmmaBwdGpu.SanitizerSized'
sanitize3 rs1 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Rs1SanitizerSized'
sanitize3 ew "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
{
  cat "$OUT/gpu.txt" "$OUT/spills.txt"
  test_report tests_bwd tests_gpu tests_order
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log 2>/dev/null
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
