#!/usr/bin/env bash
# Session 9, the final build's GPU checks (< 2 min with ./build): the ot1 TMA
# epilogue's bit-identity tests after the N % 8 rule (their N % 8 != 0 cases now
# take the register epilogue), its sanitizers, the attention backward registry
# test (35 variants), the heuristics' tests (FLCE ot1 default, attention sp1),
# the float64 FLCE reference on the default variant, the Python suite (the eager
# attention path's bits test). Every log flat in $OUT, then tarred.
set -u
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=build
cp $B/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
run engines 90 $B/tests/engines/test_engines_wgmma --gtest_filter='GemmWgmma.TmaEpilogue*:GemmWgmma.WgPing128c2t_*:GemmWgmma.WgPing128c22t_*'
for t in memcheck racecheck; do sanitize $t 60 $B/tests/engines/test_engines_wgmma --gtest_filter='GemmWgmma.TmaEpilogueSanitizerSized'; done
run attn 60 $B/tests/attention_wgmma/test_attention_wgmma --gtest_filter='AttentionWgmmaBwd.*'
run heur 60 bash -c "$B/tests/attention/test_attention_variants && $B/tests/flce/test_flce_variants && $B/tests/tuner_gpu/test_tuner_gpu --gtest_filter='*euristic*'"
run flce_default 120 $B/tests/flce/test_flce_gpu --gtest_filter='*c2_st5_pp1_ot1_ex16_mb1024*'
run pytests 200 python3 python/tests/run.py
echo "--- tests"
test_report engines attn heur flce_default
grep -h "ERROR SUMMARY" "$OUT/sanitize.log"
tail -2 "$OUT/pytests.log"
cat "$SUMMARY"
