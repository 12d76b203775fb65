#!/usr/bin/env bash
# Session 40 (issue 16): the persistent causal forward's order at rows 2 and 3, as session 39's probes suggested.
#   PART=ab, carry ["dist"] (pack.sh of the build): forward ms (`bench attention`, the d128 heuristic forward named,
#          5 repeats) in alternation, three rounds: row 2 (4,32,32,4096,128 causal) with the default order (the search
#          keeps the L2 rule's 12 heads in round robin) against the snake over groups of 12 (DETFUSE_FWD_GROUP=12
#          DETFUSE_FWD_SNAKE=2); row 3 (4,32,8,4096,128 causal) with the default (44 heads as a snake) against groups
#          of 12 in round robin (DETFUSE_FWD_GROUP=12 DETFUSE_FWD_SNAKE=0). Prediction (the two H100 probes of
#          session 39, adjacent in each round): row 2's snake 1-3% faster, row 3's groups of 12 1-3% faster; the model
#          (fwd_static_imbalance) says the reverse for row 2 (1.004 round robin, 1.009 snake). Then the whole wgmma GPU
#          test binary, test_attention_variants and memcheck on the persistent forward's and the ew sanitizer-sized
#          cases (this build has the order search's cache first, bd813c9, and the env override: host code).
# $OUT/report.txt and one archive of the logs.
set -uo pipefail
here=$(dirname "$0")
source "$here/lib.sh"
attention_bins
W=attention.bf16.wgmma
export UNTIL=${LIMIT:-560}
f128=$W.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128
case ${PART:-ab} in
  ab)
    gpu_line "$OUT/gpu.txt"
    fb() { brun "bench_$1" 30 "$DF" bench attention --shape "$2" --causal --repeats 5 --variant "$f128"; }
    for k in 1 2 3; do
      fb "r2_default_$k" 4,32,32,4096,4096,128
      DETFUSE_FWD_GROUP=12 DETFUSE_FWD_SNAKE=2 fb "r2_g12snake_$k" 4,32,32,4096,4096,128
      fb "r3_default_$k" 4,32,8,4096,4096,128
      DETFUSE_FWD_GROUP=12 DETFUSE_FWD_SNAKE=0 fb "r3_g12rr_$k" 4,32,8,4096,4096,128
    done
    brun tests_all 150 "$TW" --gtest_brief=1
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    sanitize_gtest fwd 40 'AttentionWgmmaGpu.PersistentSanitizerSized'
    sanitize_gtest bwd 45 'AttentionWgmmaBwdGpu.EwSanitizerSized'
    REPORT_TESTS="tests_all tests_var" fwd_report s40ab "Duration"
    rm -f "$OUT/summary.txt" "$OUT/gpu.txt" ;;
esac
