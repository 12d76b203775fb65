#!/usr/bin/env bash
# Session 21 on the H200 (issue 16): pb2 and pb3, the d64 kv step with FlashAttention-4's instruction
# count (BwdKvPbNConfig: descriptors from the warp-uniform warpgroup index, the dQ part handed over
# unscaled and scaled by the convert pass, the A fragments written as 32-bit words; pb3 also FA4's
# step order: dS^T from the fp32 P^T, dV issued once dS^T is formed). SASS here (nvcc 13.0, ordered
# kernel): R2UR in the key-block loop 0 (pb1: 24), PRMT 96 -> 32 (pb2) / 0 (pb3), 3576 -> 3440 / 3168
# instructions; no spills. Prediction (ncu at 4,32,32,4096,64 causal, pb1 506 M instructions, 1.63 ms):
# pb3 ~420-440 M, the kv kernel 3-8% faster; pb2 between.
#   STAGE=1 (cold, carry [".debs", ".deps"]): build, spills, the bench of pb1 / pb2 / pb3 (ordered
#           spt1) at d64 causal and non-causal in both orders, the float64 reference and pb tests.
#   STAGE=2 (carry [".debs", ".deps"]; incremental where warm): the build (the heuristic on pb3),
#           softcap 50 at d64 causal (ew2, the heuristic there, against pb3), the heuristic's tests,
#           every backward test.
#   STAGE=4 (carry [".debs", ".deps"]): pb3 at d128, see below.
#   STAGE=5 (carry [".debs", ".deps"]): pb2 / pb3 without the P^T tile, the LSE / D ring two deep, see below.
#   STAGE=3 (warm): the layout and registry tests, the sanitizers on EwSanitizerSized (pb2 / pb3
#           among the ew variants), ncu of pb1 and pb3 at d64 causal.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
P1=ordered.br128_bc128_st2_tma1_pds3_ew2_pb1_spt1_d64
P2=ordered.br128_bc128_st2_tma1_pds3_ew2_pb2_spt1_d64
P3=ordered.br128_bc128_st2_tma1_pds3_ew2_pb3_spt1_d64
STAGE=${STAGE:-1}
if [ "$STAGE" = 1 ]; then
  DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
  attention_bins
  { grep -c "Registers are spilled" build.log; grep -B1 "Registers are spilled" build.log | grep -o "bwd_kv[A-Za-z0-9_]*" | sort | uniq -c; } > "$OUT/spills.txt" 2>&1
  gpu_line "$OUT/gpu.txt"
  for s in "64c 4,32,32,4096,4096,64 --causal" "64 4,32,32,4096,4096,64"; do
    set -- $s
    run "bench$1_abc" 60 "$DF" bench attention --shape "$2" ${3:-} --variant "$W.$P1" --variant "$W.$P2" --variant "$W.$P3" --repeats 3
    run "bench$1_cba" 60 "$DF" bench attention --shape "$2" ${3:-} --variant "$W.$P3" --variant "$W.$P2" --variant "$W.$P1" --repeats 3
  done
  run tests_pb 200 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.PbN*:AttentionWgmmaBwdGpu.EwMatches*'
  TESTS="tests_pb"
elif [ "$STAGE" = 2 ]; then
  bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2  # incremental: the heuristic on pb3, the tests
  attention_bins
  gpu_line "$OUT/gpu.txt"
  E2=ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
  run bench64cap_ab 60 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --softcap 50 --variant "$W.$E2" --variant "$W.$P3" --repeats 3
  run bench64cap_ba 60 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --softcap 50 --variant "$W.$P3" --variant "$W.$E2" --repeats 3
  run tests_var 30 "$B/tests/attention/test_attention_variants"
  run tests_bwd 300 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.*'
  TESTS="tests_var tests_bwd"
fi
if [ "$STAGE" = 4 ]; then
  # pb3 at d128 (ew2 pds2, pb1 d128's base): the build, the bench of pb1 / pb3 on the d128 rows in
  # both orders, the backward registry tests, PbN bits, the float64 reference and 20 repeats on the
  # ew variants, layout and registry tests, the sanitizers on EwSanitizerSized.
  DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
  attention_bins
  { grep -c "Registers are spilled" build.log; grep -B1 "Registers are spilled" build.log | grep -o "bwd_kv[A-Za-z0-9_]*" | sort | uniq -c; } > "$OUT/spills.txt" 2>&1
  gpu_line "$OUT/gpu.txt"
  Q1=ordered.br64_bc128_st2_tma1_pds2_ew2_pb1_spt1_d128
  Q3=ordered.br64_bc128_st2_tma1_pds2_ew2_pb3_spt1_d128
  for s in "128 4,32,32,4096,4096,128" "128c 4,32,32,4096,4096,128 --causal" "128gn 4,32,8,4096,4096,128" \
           "8k 1,16,16,8192,8192,128 --causal"; do
    set -- $s
    run "bench$1_ab" 60 "$DF" bench attention --shape "$2" ${3:-} --variant "$W.$Q1" --variant "$W.$Q3" --repeats 3
    run "bench$1_ba" 60 "$DF" bench attention --shape "$2" ${3:-} --variant "$W.$Q3" --variant "$W.$Q1" --repeats 3
  done
  run tests_pb 240 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.PbN*:AttentionWgmmaBwdGpu.Ew*'
  run tests_pds 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
  run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
  for tool in memcheck racecheck synccheck; do
    run "${tool}_ew" 90 compute-sanitizer --tool $tool --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
  done
  TESTS="tests_pb tests_pds tests_gpu"
fi
if [ "$STAGE" = 5 ]; then
  # pb2 / pb3 without the (unused) P^T tile and with the LSE / D ring at the Q / dO depth (d64: two
  # stages instead of one): pb3 against pb1 (unchanged) at d64 and d128, both orders; the tests of
  # the ew / pb variants and the sanitizers on EwSanitizerSized.
  DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
  attention_bins
  gpu_line "$OUT/gpu.txt"
  Q1=ordered.br64_bc128_st2_tma1_pds2_ew2_pb1_spt1_d128
  Q3=ordered.br64_bc128_st2_tma1_pds2_ew2_pb3_spt1_d128
  for s in "64c 4,32,32,4096,4096,64 --causal $P1 $P3" "64 4,32,32,4096,4096,64 - $P1 $P3" \
           "128 4,32,32,4096,4096,128 - $Q1 $Q3"; do
    set -- $s
    c=$3; [ "$c" = - ] && c=""
    run "bench$1_ab" 60 "$DF" bench attention --shape "$2" $c --variant "$W.$4" --variant "$W.$5" --repeats 3
    run "bench$1_ba" 60 "$DF" bench attention --shape "$2" $c --variant "$W.$5" --variant "$W.$4" --repeats 3
  done
  run tests_pb 240 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.PbN*:AttentionWgmmaBwdGpu.Ew*'
  run tests_pds 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
  for tool in memcheck racecheck synccheck; do
    run "${tool}_ew" 90 compute-sanitizer --tool $tool --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
  done
  TESTS="tests_pb tests_pds"
fi
if [ "$STAGE" = 3 ]; then
  attention_bins
  run tests_pds 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
  run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
  for tool in memcheck racecheck synccheck; do
    run "${tool}_ew" 90 compute-sanitizer --tool $tool --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
  done
  for v in "$P1" "$P3"; do
    run "ncu_$(echo "$v" | grep -o "pb[0-9]")" 90 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum -k regex:attention_bwd_kv --launch-count 1 \
      "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W.$v" --repeats 1
  done
  TESTS="tests_pds tests_gpu"
fi
{
  cat "$OUT/gpu.txt" "$OUT/spills.txt" 2>/dev/null
  test_report $TESTS
  grep -h "ERROR SUMMARY" "$OUT"/*check_*.log 2>/dev/null
  for f in "$OUT"/bench*.log; do [ -f "$f" ] && grep -hE "^attention\." "$f" | sed "s|^attention.bf16.wgmma.||; s|^|$(basename "$f" .log) |" | cut -c1-150; done
  for f in "$OUT"/ncu_*.log; do [ -f "$f" ] && { echo "# $f"; grep -E "Duration|inst_executed.sum|Warp Cycles Per Issued|Eligible Warps|One or More" "$f"; }; done
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
