#!/usr/bin/env bash
# Session 39 (issue 16): main (the overlapped TMA dQ convert, 05168ec) on an H200, and the d64 causal forwards that
# the H200 has never compared since ls1 (29ba197).
#   PART=a, carry ["dist"] (pack.sh of main's build: detfuse, the attention test binaries,
#          experiments/attention_fwd_group_probe): first the d64 causal forwards at row 4 (4,32,32,4096,4096,64
#          causal), forward ms, 5 repeats, in one order and the reverse: br192 ov1 rd1 ot1 (the H200's heuristic),
#          ov2 ps1 rd1 ls1 (the H100s'), ov1 ps1 rd1, ov2 rd1 ot1 ls1. Prediction (session 35 on an H100: ls1 ps1
#          0.648 / 0.676 against 0.689 / 0.700; session 25 on the H200, before ls1: ov1 ps1 rd1 7% slower): ls1 ps1
#          within +-5% of br192 rd1 ot1 here; if it is ahead in both orders the heuristic takes it on every GPU.
#          Then s37.sh's PART=a in $OUT/s37 with what is left of 560 s (PDL 0 / 1 / 1 / 0 at rows 4, 1, 2, the whole
#          wgmma GPU test binary, sanitizers, rows 3, 5, 6, 7, test_attention_variants, the L2 group probe).
#   PART=t, carry ["dist"]: see below (after dq_convert_overlaps took the overlap to causal problems only).
#   peers: s35.sh's PART=peers (carry ["dist", ".peers/c"] after staging .peers/a and .peers/b), with ls1 ps1's d64
#          forward beside the heuristic as an extra detfuse column (ATTN_V).
# Logs in $OUT; $OUT/report.txt (and $OUT/s37/report.txt) last.
set -uo pipefail
here=$(dirname "$0")
case ${PART:-a} in
  a)
    source "$here/lib.sh"
    attention_bins
    W=attention.bf16.wgmma
    export UNTIL=560
    gpu_line "$OUT/gpu.txt"
    BENCH_T=40 bench_pair 64c 4,32,32,4096,4096,64 --causal br192_bc128_st3_ov1_pp0_rd1_ot1_d64 \
      br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64 br192_bc128_st3_ov2_pp0_rd1_ot1_ls1_d64
    { cat "$OUT/gpu.txt"; bench_lines; cat "$SUMMARY"; } > "$OUT/report.txt"
    cat "$OUT/report.txt"
    OUT=$OUT/s37 UNTIL=$((UNTIL - SECONDS)) PART=a bash "$here/s37.sh" ;;
  t)
    # The build with the overlap for causal problems only (dq_convert_overlaps) and the persistent causal forward's
    # order by the model's search (fwd_causal_order): the seven rows with the heuristic's variants (named); rows 3, 4,
    # 7 (whose forward order the search changes) also with DETFUSE_FWD_SNAKE=0 (the order before: round robin over
    # the L2 rule's groups) and again without; rows 1 and 6 (non-causal) with DETFUSE_ATTN_PDL=1 (the overlap forced)
    # and again without; the d64 causal forwards in both orders (the H200's and the H100s' heuristic forward, ov1 ps1
    # rd1); the L2 group probe (its default is the new order; "before s39" the old); the whole wgmma GPU test binary,
    # test_attention_variants, then the sanitizers on two backward and two forward sanitizer-sized tests. At most
    # eight files come back: report.txt, gpu.txt, group.txt and one archive of the logs.
    # Prediction (the H100's probe in PART=a: the d64 causal persistent forward 0.676 ms with the old order, 0.623-0.636
    # with the snake over groups of 6-24): row 4's ls1 ps1 forward 4-7% faster, its fwd+bwd 1-2%; rows 3 and 7 within
    # +-2% (the probe's nearest orders 0.938-0.964 / 1.743-1.848 ms, noisy); rows 1 and 6 as PDL=0 in PART=a.
    source "$here/lib.sh"
    attention_bins
    W=attention.bf16.wgmma
    export UNTIL=560
    gpu_line "$OUT/gpu.txt"
    f128=fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 f64=fwd.br192_bc128_st3_ov1_pp0_rd1_ot1_d64
    nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && f64=fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64
    p4=ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1
    rows=("1|4,32,32,4096,4096,128|$f128|${p4}_d128" "2|4,32,32,4096,4096,128 --causal|$f128|${p4}_se1_d128"
          "3|4,32,8,4096,4096,128 --causal|$f128|${p4}_hs2_d128"
          "4|4,32,32,4096,4096,64 --causal|fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64|ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64"
          "5|1,16,16,8192,8192,128 --causal|$f128|${p4}_se1_d128" "6|4,32,8,4096,4096,128|$f128|${p4}_d128"
          "7|2,32,8,8192,8192,128 --causal|$f128|${p4}_hs2_d128")
    bench_row() {  # bench_row LOG ROW_INDEX: the row's forward and kv variant, 5 repeats
      local r shape fwd kv
      IFS='|' read -r r shape fwd kv <<< "${rows[$2]}"
      brun "bench_row${r}_$1" 30 "$DF" bench attention --shape $shape --repeats 5 --variant "$W.$fwd" --variant "$W.$kv"
    }
    for i in 0 1 2 3 4 5 6; do bench_row a "$i"; done
    for i in 3 2 6; do
      DETFUSE_FWD_SNAKE=0 bench_row old_order "$i"
      bench_row b "$i"
    done
    for i in 0 5; do
      DETFUSE_ATTN_PDL=1 bench_row pdl1 "$i"
      bench_row b "$i"
    done
    BENCH_T=40 bench_pair 64c 4,32,32,4096,4096,64 --causal br192_bc128_st3_ov1_pp0_rd1_ot1_d64 \
      br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64
    DETFUSE_FWD_SNAKE=0 brun bench64c_old_order 30 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal \
      --repeats 5 --variant $W.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 --variant $W.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_d64
    brun group 90 "$B/experiments/attention_fwd_group_probe"
    grep -vE "^=== " "$OUT/group.log" > "$OUT/group.txt" 2>/dev/null
    brun tests_all 200 "$TW" --gtest_brief=1
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    sanitize_gtest bwd 45 'AttentionWgmmaBwdGpu.EwSanitizerSized'
    sanitize_gtest fwd 40 'AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized:AttentionWgmmaGpu.TmaOSanitizerSized'
    REPORT_TESTS="tests_all tests_var" fwd_report s39t "Duration"
    rm -f "$OUT/summary.txt" ;;
  h200)
    # Everything in one call (after staging .peers/a and .peers/b; carry ["dist", ".peers/c"]) when an H200 comes:
    # the d64 causal forwards in both orders (the H200's heuristic br192 ov1 rd1 ot1 against the H100s' ls1 ps1,
    # with the order of fwd_causal_order, and ov1 ps1 rd1), then the peers as in PART=peers, then the whole wgmma GPU
    # test binary and the sanitizers on the ew sanitizer-sized case, each cut to what is left of LIMIT (560) s. Files: the
    # peers' five and pre/report.txt, pre/s39h-logs.tgz.
    ( export OUT=$OUT/pre; source "$here/lib.sh"; attention_bins; W=attention.bf16.wgmma; export UNTIL=60
      gpu_line "$OUT/gpu.txt"
      BENCH_T=25 bench_pair 64c 4,32,32,4096,4096,64 --causal br192_bc128_st3_ov1_pp0_rd1_ot1_d64 \
        br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 br192_bc128_st3_ov1_pp0_ps1_rd1_d64
      { cat "$OUT/gpu.txt"; bench_lines; } > "$OUT/pre.txt"; cat "$OUT/pre.txt" )
    W=attention.bf16.wgmma
    ATTN_V=${ATTN_V-"--variant $W.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64+heuristic"} RUNS=${RUNS:-3} PART=peers \
      bash "$here/s35.sh"
    ( export OUT=$OUT/pre; source "$here/lib.sh"; attention_bins; export UNTIL=${LIMIT:-560}
      brun tests_all 150 "$TW" --gtest_brief=1
      sanitize_gtest bwd 45 'AttentionWgmmaBwdGpu.EwSanitizerSized'
      REPORT_TESTS="tests_all" fwd_report s39h "Duration"
      cat "$OUT/pre.txt" >> "$OUT/report.txt"; rm -f "$OUT/summary.txt" "$OUT/gpu.txt" "$OUT/pre.txt" ) ;;
  peers)
    # (The heuristic's d64 causal forward is ls1 ps1 on every Hopper GPU since 8954a50: no extra column by default.)
    ATTN_V=${ATTN_V-} PART=peers bash "$here/s35.sh" ;;
esac
