#!/usr/bin/env bash
# Session 35 (issue 16): main's build (pack.sh; main at 430be72, the staged dK / dV epilogue at d64) on the lent
# GPU. The H200 is asked for first: no H200 has run main's code since session 25.
#   PART=suite, carry ["dist"]: the whole attention wgmma GPU test binary (float64 lists, 20 repeats, bits
#            against bases, sanitizer-sized cases, the heuristic's expectations), test_attention_variants,
#            memcheck / racecheck / synccheck on the staged epilogue's and ew2's sanitizer-sized cases and the
#            forward's; then ncu of the d128 causal forward (the heuristic's, ps1) at row 2 (4,32,32,4096,128: 32
#            kv heads) and row 3 (4,32,8,4096,128: 8 kv heads): DRAM bytes, L2 hit rate, tensor pipe, time.
#            Question: session 34 (H100) had our forward 525 TFLOP/s at row 2 and 564 at row 3 against FA4's 557 /
#            560; is row 2's loss the 4x K / V bytes from DRAM (the L2 groups, fwd_l2_head_group)?
#   then, carry [".peers/a"] and then [".peers/b"]: bash experiments/peers/install.sh stage (two calls)
#   PART=peers, carry [".peers/c", "dist"]: s28.sh's peers part (RUNS (3) runs of the issue's seven rows beside FA4
#            deterministic, one process each; the host's share), then in the same call `detfuse bench attention`
#            of the heuristic's forward and kv variant at each row (5 repeats). ATTN_V: extra detfuse columns
#            (attention_peers.py --variant ...), none by default. (Run on main 430be72's build on an H200, RUNS=3, and on
#            the se1 build on an H100, RUNS=2; the bench's list is main's variants: pds4 pb5 at rows 2 and 5.)
#   PART=se, carry ["dist"] with build/detfuse_old (main 430be72's) packed beside build/detfuse of branch s35-se:
#            se1 (the d128 pds4 pb5 kv kernel with dK / dV staged, the causal heuristic there). The whole wgmma GPU
#            test binary (se1 in the Ew lists: float64 reference, 20 repeats, sanitizer-sized; Pds4Se1BitsAgainstPb5;
#            StagedDkDvRowsAndAlignment), test_attention_variants, the sanitizers on EwSanitizerSized and the staged
#            test; `detfuse verify` bits of se1 against the old binary's pds4 pb5; fwd+bwd ms of se1 against pb5 at
#            rows 2 and 5 (causal), both orders, 5 repeats; then the d64 causal forwards on this GPU (the H200 has
#            never run ls1, the H100's heuristic: session 33's ncu there had ls1 ps1 625 us against br192 rd1 ot1's
#            671, FA4 582), forward ms, both orders. Prediction: se1 2% less fwd+bwd time at rows 2 and 5 (H100:
#            3.961 / 3.970 against 4.051 / 4.055); ls1 ps1 ~5% less forward time than br192 rd1 ot1.
#            (Run once, on an H100: se1 -2.4% / -1.0%; experiments/attention_bench_log.md "Session 35".)
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
here=$(dirname "$0")
W=attention.bf16.wgmma
# The heuristic's variants per row (kernels/attention/attention.cpp: se1 for causal MHA d128 since session 35, the
# ls1 ps1 d64 causal forward on every Hopper GPU since 8954a50), forward then backward: "SHAPE [--causal]|FWD|KV".
ROWS=(
  "4,32,32,4096,4096,128|br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128|ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128"
  "4,32,32,4096,4096,128 --causal|br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128|ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_se1_d128"
  "4,32,8,4096,4096,128 --causal|br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128|ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_hs2_d128"
  "4,32,32,4096,4096,64 --causal|br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64|ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64"
  "1,16,16,8192,8192,128 --causal|br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128|ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_se1_d128"
  "4,32,8,4096,4096,128|br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128|ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128"
  "2,32,8,8192,8192,128 --causal|br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128|ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_hs2_d128"
)
case ${PART:-suite} in
  suite)
    source "$here/lib.sh"
    attention_bins
    gpu_line "$OUT/gpu.txt"
    brun tests_all 220 "$TW" --gtest_brief=1
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    sanitize_gtest bwd 90 'AttentionWgmmaBwdGpu.EwSanitizerSized:AttentionWgmmaBwdGpu.StagedDkDvRowsAndAlignment'
    sanitize_gtest fwd 90 'AttentionWgmmaGpu.TmaOSanitizerSized:AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'
    m="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct"
    m="$m,sm__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    m="$m,dram__throughput.avg.pct_of_peak_sustained_elapsed"
    for r in "2 4,32,32,4096,4096,128" "3 4,32,8,4096,4096,128"; do
      set -- $r
      brun "ncu_fwd_row$1" 60 ncu --clock-control none --metrics "$m" -k regex:attention_fwd --launch-count 2 \
        "$DF" bench attention --shape "$2" --causal --variant $W.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 --repeats 1
    done
    REPORT_TESTS="tests_all tests_var" fwd_report s35suite "gpu__time|dram__|lts__|hmma|cycles_elapsed" ;;
  se)
    source "$here/lib.sh"
    attention_bins
    OLD=$B/detfuse_old
    gpu_line "$OUT/gpu.txt"
    brun tests_all 220 "$TW" --gtest_brief=1
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    sanitize_gtest se 90 'AttentionWgmmaBwdGpu.EwSanitizerSized:AttentionWgmmaBwdGpu.StagedDkDvRowsAndAlignment'
    K=ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128
    KS=ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_se1_d128
    # (the old binary has no se1: its pds4 pb5 bits against the new binary's se1 and pds4 pb5, same seed)
    for c in "2,8,2,1000,1300,128 --causal" "1,4,4,777,777,128 --causal --softcap 30 --window 200"; do
      brun verify_new 60 "$DF" verify --kernel attention --shape $c --variant $W.$K --variant $W.$KS --repeats 2 --seed 35
      brun verify_old 60 "$OLD" verify --kernel attention --shape $c --variant $W.$K --repeats 2 --seed 35
      grep -E '^attention\.|  x[0-9]+$' "$OUT/verify_new.log" | tail -40 > "$OUT/v_new.txt"
      grep -E '^attention\.|  x[0-9]+$' "$OUT/verify_old.log" | tail -20 > "$OUT/v_old.txt"
      echo "== $c" >> "$OUT/bits.txt"; cat "$OUT/v_old.txt" "$OUT/v_new.txt" >> "$OUT/bits.txt"
      mv "$OUT/verify_new.log" "$OUT/verify_new_$(echo $c | tr -c 'a-z0-9' _).log"
      mv "$OUT/verify_old.log" "$OUT/verify_old_$(echo $c | tr -c 'a-z0-9' _).log"
    done
    for r in "2 4,32,32,4096,4096,128" "5 1,16,16,8192,8192,128"; do
      set -- $r
      brun "bench_se_row$1_ab" 60 "$DF" bench attention --shape "$2" --causal --repeats 5 --variant $W.$K --variant $W.$KS
      brun "bench_se_row$1_ba" 60 "$DF" bench attention --shape "$2" --causal --repeats 5 --variant $W.$KS --variant $W.$K
    done
    bench_pair 64c 4,32,32,4096,4096,64 --causal br192_bc128_st3_ov1_pp0_rd1_ot1_d64 br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 \
      br192_bc128_st3_ov1_pp0_ps1_rd1_d64
    REPORT_TESTS="tests_all tests_var" fwd_report s35se "Duration"
    cat "$OUT/bits.txt" ;;
  peers)
    RUNS=${RUNS:-3} PART=peers ATTN_V=${ATTN_V:-} bash "$here/s28.sh"
    source "$here/lib.sh"  # (after s33.sh: its report and archive are in $OUT; the bench adds its own)
    attention_bins
    for i in "${!ROWS[@]}"; do
      IFS='|' read -r shape fwd kv <<< "${ROWS[$i]}"
      brun "bench_row$((i + 1))" 60 "$DF" bench attention --shape $shape --repeats 5 --variant $W.fwd.$fwd --variant $W.$kv
    done
    {
      gpu_line /dev/stdout
      bench_lines
      cat "$SUMMARY"
    } > "$OUT/bench-report.txt"
    cat "$OUT/bench-report.txt"
    tar czf "$OUT/s35bench-logs.tgz" -C "$OUT" $(cd "$OUT" && ls bench_row*.log) && rm -f "$OUT"/bench_row*.log ;;
esac
