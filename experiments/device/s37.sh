#!/usr/bin/env bash
# Session 37 (issue 16): the overlapped TMA dQ convert (programmatic dependent launch; attention_wgmma_bwd.h
# dq_done_bytes) A/B against the stream-ordered convert in one build (DETFUSE_ATTN_PDL=0 / 1, read at every
# launch). (Session 36's fe1 / fe2 ran in session 38 from branch s37-pdl; they are not on main: results/h100-2026-12-07/s38.)
#   PART=a, carry ["dist"] (pack.sh of the build: detfuse, the attention test binaries,
#          experiments/attention_fwd_group_probe). In order, each cut to what is left of UNTIL (560):
#          fwd+bwd of the heuristic's variants (named) at rows 4, 1, 2, PDL 0 / 1 / 1 / 0; the whole wgmma GPU test
#          binary (OverlappedConvertBitsEqualStreamOrdered among them); memcheck / racecheck /
#          synccheck on two backward and two forward sanitizer-sized tests; rows 3, 5, 6, 7 as rows 4, 1, 2;
#          test_attention_variants; the L2 group probe.
#          Prediction: the convert (52.6 us at row 4, 105 us at d128 rows 1 / 2 under ncu, session 15) runs in the
#          kv kernel's tail instead of after it: fwd+bwd -1 to -2% at row 4 (the causal grid's last CTAs, key
#          block 0 of the last heads, walk all 32 query blocks alone), -0.7 to -1.5% at the d128 rows; dQ, dK,
#          dV bits unchanged (same sums, same convert arithmetic).
#   PART=b, the short form (~200 s, when little device time is left): rows 4 and 1, PDL 0 / 1 / 1 / 0; the backward
#          tests the change touches (the overlapped convert's bits, the float64 list of the TMA kernels the
#          heuristic takes, the unaligned dQ convert); memcheck / racecheck / synccheck on the ew sanitizer-sized case.
#   peers: s35.sh's PART=peers, carry ["dist", ".peers/c"] (stage .peers/a, .peers/b first; fetch.sh makes c).
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
here=$(dirname "$0")
# The A / B steps of parts a and b: the heuristic's variants per row, named (a bench without --variant runs all 143:
# session 37's first call spent its 560 s that way); the d64 causal forward is ls1 on H100s (attention.cpp).
setup() {
  source "$here/lib.sh"
  attention_bins
  W=attention.bf16.wgmma
  export UNTIL=${UNTIL:-$1}
  gpu_line "$OUT/gpu.txt"
  local f128=fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 f64=fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64
  local p4=ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1
  nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && f64=fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64
  rows=("1|4,32,32,4096,4096,128|$f128|${p4}_d128" "2|4,32,32,4096,4096,128 --causal|$f128|${p4}_se1_d128"
        "4|4,32,32,4096,4096,64 --causal|$f64|ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64"
        "3|4,32,8,4096,4096,128 --causal|$f128|${p4}_hs2_d128" "5|1,16,16,8192,8192,128 --causal|$f128|${p4}_se1_d128"
        "6|4,32,8,4096,4096,128|$f128|${p4}_d128" "7|2,32,8,8192,8192,128 --causal|$f128|${p4}_hs2_d128")
}
# pdl_rows I...: rows[I] of setup's list, PDL 0 / 1 / 1 / 0, each bench within 30 s (brun: and UNTIL).
pdl_rows() {
  local i r shape fwd kv k pdl
  for i in "$@"; do
    IFS='|' read -r r shape fwd kv <<< "${rows[$i]}"
    k=0
    for pdl in 0 1 1 0; do
      k=$((k + 1))
      DETFUSE_ATTN_PDL=$pdl brun "pdl_row${r}_${k}_p$pdl" 30 "$DF" bench attention --shape $shape --repeats 5 \
        --variant "$W.$fwd" --variant "$W.$kv"
    done
  done
}
# pdl_table: fwd+bwd ms and distinct dQ digests per run (the kv line's columns 4 and 9) into $OUT/pdl.txt.
pdl_table() {
  local f
  for f in "$OUT"/pdl_row*.log; do
    printf '%s %s\n' "$(basename "$f" .log)" "$(grep -E "^attention\.bf16\.wgmma\.(ordered|atomic)" "$f" | awk '{print $4, $9}')"
  done | sort -V > "$OUT/pdl.txt"
}
case ${PART:-a} in
  a)
    setup 560
    pdl_rows 2 0 1
    brun tests_all 200 "$TW" --gtest_brief=1
    sanitize_gtest bwd 70 'AttentionWgmmaBwdGpu.EwSanitizerSized:AttentionWgmmaBwdGpu.Spt1SanitizerSized'
    sanitize_gtest fwd 40 'AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized:AttentionWgmmaGpu.TmaOSanitizerSized'
    pdl_rows 3 4 5 6
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    brun group 60 "$B/experiments/attention_fwd_group_probe"
    pdl_table
    grep -vE "^=== " "$OUT/group.log" > "$OUT/group.txt" 2>/dev/null
    REPORT_TESTS="tests_all tests_var" fwd_report s37 "Duration"
    cat "$OUT/pdl.txt" "$OUT/group.txt" ;;
  b)
    setup 200
    pdl_rows 2 0
    brun tests_bwd 90 "$TW" --gtest_brief=1 --gtest_filter='AttentionWgmmaBwdGpu.OverlappedConvertBitsEqualStreamOrdered:AttentionWgmmaBwdGpu.TmaConvertUnalignedDq:AttentionWgmmaBwdGpu.Pds3MatchesFloat64Reference:AttentionWgmmaBwdGpu.Pds4Se1BitsAgainstPb5:AttentionWgmmaBwdGpu.HsMatchesFloat64Reference:AttentionWgmmaBwd.*'
    sanitize_gtest bwd 40 'AttentionWgmmaBwdGpu.EwSanitizerSized'
    pdl_table
    REPORT_TESTS="tests_bwd" fwd_report s37b "Duration"
    cat "$OUT/pdl.txt" ;;
  peers)
    PART=peers bash "$here/s35.sh" ;;
esac
