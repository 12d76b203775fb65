#!/usr/bin/env bash
# Session 24 (issue 16): after s23.sh PART=1 measured pds4 pb5 ahead of pb3 on every d128 row, the heuristic
# takes it at d128 (kernels/attention/attention.cpp). One cold call, carry [".debs", ".deps"]: the build, the
# heuristic's test, the forward's GPU tests (the count of forward variants fixed: 29 with bc176), the registry's
# wgmma cases, every backward test of test_attention_wgmma. Then beside FA4 (s17.sh STAGE=2, after
# experiments/peers/install.sh stage) on the same warm machine.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
gpu_line "$OUT/gpu.txt"
brun tests_var 30 "$B/tests/attention/test_attention_variants"
brun tests_fwd 60 "$TW" --gtest_filter='AttentionWgmmaGpu.MatchesFloat64ReferenceAndIsDeterministic'
brun tests_bwd 300 "$TW" --gtest_filter='AttentionWgmmaBwd*'
brun tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
{ cat "$OUT/gpu.txt"; test_report tests_var tests_fwd tests_bwd tests_gpu; cat "$SUMMARY"; } > "$OUT/report.txt"
cat "$OUT/report.txt"
