#!/usr/bin/env bash
# Session 40 (issue 16): the causal forwards' tile orders: the non-persistent one by groups of heads (row 4 on the
# H200), the persistent one at rows 2 and 3 as session 39's probes suggested.
#   PART=ab, carry ["dist"] (pack.sh of the build), forward ms (`bench attention`, 5 repeats) in alternation:
#          row 4 (4,32,32,4096,64 causal): the non-persistent br192 ov1 rd1 ot1 (the H200's heuristic) with its
#          tiles by groups of heads (fwd_lpt_group, session 40) beside ls1 ps1 (the H100s'), against the order
#          before (head after head: DETFUSE_FWD_GROUP=1), three rounds. Prediction (the list schedule's model:
#          4.9% -> 0.3% above the mean; the persistent forward's order change of session 39 took 5.4% -> 0.8% and
#          gave 3.3%): the non-persistent forward 2-4% faster (0.69 -> ~0.67 ms on an H100), still behind ls1 ps1.
#          Row 2 (4,32,32,4096,128 causal) default (the L2 rule's 12 heads in round robin) against the snake over
#          groups of 12 (DETFUSE_FWD_GROUP=12 DETFUSE_FWD_SNAKE=2), row 3 (4,32,8,4096,128 causal) default (44 heads
#          as a snake) against groups of 12 in round robin, two rounds each. Prediction (session 39's two H100
#          probes, within their own noise of 2-5%): row 2's snake and row 3's groups of 12 1-3% faster, or nothing.
#          Then the whole wgmma GPU test binary (NonPersistentCausalGroupOrders: groups 1, 4 and all heads against
#          the float64 reference, the same bits), memcheck / racecheck / synccheck on TmaOSanitizerSized with
#          DETFUSE_FWD_GROUP=3 (the non-persistent causal tiles by groups, the last one smaller),
#          test_attention_variants, the L2 group probe (the non-persistent forward by groups and head after head).
#   PART=rows: row 4's forwards and the seven rows' fwd+bwd on whatever GPU comes (below).
#   PART=all: the A/B benches, the peers and the GPU tests in one call (see below); PART=t: the sanitizers,
#          test_attention_variants and the probe, carry ["dist"] on the same warm machine.
# $OUT/report.txt and one archive of the logs.
set -uo pipefail
here=$(dirname "$0")
source "$here/lib.sh"
attention_bins
W=attention.bf16.wgmma
export UNTIL=${LIMIT:-560}
f128=$W.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128
# ab_benches [r4|r23]: the forward A/B above (3 rounds at row 4, 2 at rows 2 and 3; r4 or r23 alone), into
# $OUT/bench_*.log.
ab_benches() {
  fb() { local log=$1 shape=$2; shift 2; brun "bench_$log" 30 "$DF" bench attention --shape "$shape" --causal --repeats 5 "$@"; }
  local f64=$W.fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64 f64ps=$W.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 k
  [ "${1:-}" = r23 ] || for k in 1 2 3; do
    fb "r4_default_$k" 4,32,32,4096,4096,64 --variant "$f64" --variant "$f64ps"
    DETFUSE_FWD_GROUP=1 fb "r4_np_g1_$k" 4,32,32,4096,4096,64 --variant "$f64"
  done
  [ "${1:-}" = r4 ] && return
  for k in 1 2; do
    fb "r2_default_$k" 4,32,32,4096,4096,128 --variant "$f128"
    DETFUSE_FWD_GROUP=12 DETFUSE_FWD_SNAKE=2 fb "r2_g12snake_$k" 4,32,32,4096,4096,128 --variant "$f128"
    fb "r3_default_$k" 4,32,8,4096,4096,128 --variant "$f128"
    DETFUSE_FWD_GROUP=12 DETFUSE_FWD_SNAKE=0 fb "r3_g12rr_$k" 4,32,8,4096,4096,128 --variant "$f128"
  done
}
# checks: the sanitizers, test_attention_variants and the probe (into $OUT; group.txt kept).
checks() {
  DETFUSE_FWD_GROUP=3 sanitize_gtest fwd 40 'AttentionWgmmaGpu.TmaOSanitizerSized'
  brun tests_var 30 "$B/tests/attention/test_attention_variants"
  brun group 90 "$B/experiments/attention_fwd_group_probe"
  grep -vE "^=== " "$OUT/group.log" > "$OUT/group.txt" 2>/dev/null
}
case ${PART:-ab} in
  ab)
    # (in order of need when the call is cut short: row 4's A/B, the GPU tests, the sanitizers, rows 2 and 3)
    gpu_line "$OUT/gpu.txt"
    ab_benches r4
    brun tests_all 150 "$TW" --gtest_brief=1
    DETFUSE_FWD_GROUP=3 sanitize_gtest fwd 40 'AttentionWgmmaGpu.TmaOSanitizerSized'
    ab_benches r23
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    brun group 90 "$B/experiments/attention_fwd_group_probe"
    grep -vE "^=== " "$OUT/group.log" > "$OUT/group.txt" 2>/dev/null
    REPORT_TESTS="tests_all tests_var" fwd_report s40ab "Duration"
    rm -f "$OUT/summary.txt" "$OUT/gpu.txt" ;;
  all)
    # The third of three calls made back to back (install.sh stage with .peers/a, then .peers/b; this one carries
    # ["dist", ".peers/c"]): the A/B benches (into $OUT/ab), the peers as session 39's PART=peers (s35.sh's, three
    # runs; into $OUT), the whole wgmma GPU test binary (into $OUT/t). Seven files come back. PART=t next, warm.
    ( export OUT=$OUT/ab; source "$here/lib.sh"; gpu_line "$OUT/gpu.txt"; ab_benches
      { cat "$OUT/gpu.txt"; bench_lines; cat "$SUMMARY"; } > "$OUT/report.txt"; cat "$OUT/report.txt"
      tar czf "$OUT/s40ab-logs.tgz" -C "$OUT" $(cd "$OUT" && ls *.log) && rm -f "$OUT"/*.log "$OUT/gpu.txt" "$OUT/summary.txt" )
    ATTN_V=${ATTN_V-"--variant $W.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64+heuristic"} RUNS=${RUNS:-3} PART=peers \
      bash "$here/s35.sh"
    rm -f "$OUT/summary.txt"
    ( export OUT=$OUT/t; source "$here/lib.sh"; gpu_line "$OUT/gpu.txt"
      brun tests_all 150 "$TW" --gtest_brief=1
      REPORT_TESTS="tests_all" fwd_report s40t "Duration"; rm -f "$OUT/summary.txt" "$OUT/gpu.txt" ) ;;
  r7rows)
    # Row 7's persistent order (three probes on two H100s: the snake over groups of 6 1.743-1.758 ms against the
    # default's 22 heads as a snake 1.834-1.849; the model puts 6 0.8 points further from the mean) and the groups of
    # 11 as a snake that a rule "the smallest group within 1 point of the model's best" would take at rows 2, 3 and 7,
    # in alternation, two rounds; then PART=rows with what is left of LIMIT.
    gpu_line "$OUT/gpu.txt"
    fb() { local log=$1 shape=$2; shift 2; brun "bench_$log" 30 "$DF" bench attention --shape "$shape" --causal --repeats 5 --variant "$f128"; }
    for k in 1 2; do
      fb "r7_default_$k" 2,32,8,8192,8192,128
      DETFUSE_FWD_GROUP=6 DETFUSE_FWD_SNAKE=2 fb "r7_g6snake_$k" 2,32,8,8192,8192,128
      DETFUSE_FWD_GROUP=11 DETFUSE_FWD_SNAKE=2 fb "r7_g11snake_$k" 2,32,8,8192,8192,128
      fb "r2_default_$k" 4,32,32,4096,4096,128
      DETFUSE_FWD_GROUP=11 DETFUSE_FWD_SNAKE=2 fb "r2_g11snake_$k" 4,32,32,4096,4096,128
      fb "r3_default_$k" 4,32,8,4096,4096,128
      DETFUSE_FWD_GROUP=11 DETFUSE_FWD_SNAKE=2 fb "r3_g11snake_$k" 4,32,8,4096,4096,128
    done
    mkdir -p "$OUT/r7" && mv "$OUT"/bench_r*.log "$OUT/r7/"
    LIMIT=$((UNTIL - SECONDS)) PART=rows bash "$0"
    { for f in "$OUT"/r7/*.log; do grep -hE "^attention\." "$f" | sed "s|^attention.bf16.wgmma.||; s|^|$(basename "$f" .log) |" | cut -c1-110; done; } > "$OUT/r7.txt"
    tar czf "$OUT/s40r7-logs.tgz" -C "$OUT" r7 && rm -rf "$OUT/r7" ;;
  rows)
    # One short call on whatever GPU comes (carry ["dist"]): row 4's d64 causal forwards in both orders (the H200's
    # heuristic br192 ov1 rd1 ot1 with its tiles by groups, ls1 ps1, ov1 ps1 rd1), br192 once more head after head
    # (DETFUSE_FWD_GROUP=1), then the seven rows' fwd+bwd with the heuristic's forward and kv variants, two rounds.
    # On an H200: whether ls1 ps1 wins there too (session 25, before ls1 and both orders: the persistent ov1 ps1 rd1
    # 7% slower), and row 4's fwd+bwd with the new order (session 35: 2.3 ms with the forward 0.691).
    gpu_line "$OUT/gpu.txt"
    BENCH_T=25 bench_pair 64c 4,32,32,4096,4096,64 --causal br192_bc128_st3_ov1_pp0_rd1_ot1_d64 \
      br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64
    DETFUSE_FWD_GROUP=1 brun bench64c_g1 25 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --repeats 5 \
      --variant $W.fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64
    f64=br192_bc128_st3_ov1_pp0_rd1_ot1_d64
    nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && f64=br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64
    p4=ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1 fd=fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128
    for k in 1 2; do
      i=0
      for row in "4,32,32,4096,4096,128||$fd|${p4}_d128" "4,32,32,4096,4096,128|--causal|$fd|${p4}_se1_d128" \
                 "4,32,8,4096,4096,128|--causal|$fd|${p4}_hs2_d128" \
                 "4,32,32,4096,4096,64|--causal|fwd.$f64|ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64" \
                 "1,16,16,8192,8192,128|--causal|$fd|${p4}_se1_d128" "4,32,8,4096,4096,128||$fd|${p4}_d128" \
                 "2,32,8,8192,8192,128|--causal|$fd|${p4}_hs2_d128"; do
        i=$((i + 1))
        IFS='|' read -r shape c fwd kv <<< "$row"
        brun "bench_row${i}_$k" 30 "$DF" bench attention --shape "$shape" $c --repeats 5 --variant "$W.$fwd" --variant "$W.$kv"
      done
    done
    { cat "$OUT/gpu.txt"; bench_lines; cat "$SUMMARY"; } > "$OUT/report.txt"
    cat "$OUT/report.txt"
    tar czf "$OUT/s40rows-logs.tgz" -C "$OUT" $(cd "$OUT" && ls *.log) && rm -f "$OUT"/*.log "$OUT/gpu.txt" "$OUT/summary.txt" ;;
  t)
    gpu_line "$OUT/gpu.txt"
    checks
    REPORT_TESTS="tests_var" fwd_report s40c "Duration"
    rm -f "$OUT/summary.txt" "$OUT/gpu.txt" ;;
esac
