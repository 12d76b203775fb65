#!/usr/bin/env bash
# Session 28 (issue 16): main's build (carried as dist/, from experiments/device/pack.sh) on the lent GPU
# (the H200 asked for; an H100 came).
#   PART=suite, carry ["dist"]: ls1 (the split walk, with ov2) against the heuristic's forwards at d64 causal and
#            not and d128 causal and not (forward ms, 5 repeats, both orders); the attention GPU tests of main (the whole wgmma test binary: float64 lists,
#            20 repeats, bits against bases, sanitizer-sized cases; the registry's per-variant wgmma tests;
#            the heuristic's expectations), memcheck / racecheck / synccheck on the hs family's sanitizer-sized
#            case (the variant session 27 landed), and d64 GQA with softcap (owning, the heuristic there,
#            against ew2 spt1), 3 repeats, both orders.
#   PART=final, carry ["dist"]: the last build's forward tests and heuristic expectations, d64 GQA softcap
#            non-causal (owning against ew2 spt1).
#   then, carry [".peers/a"] and then [".peers/b"]: bash experiments/peers/install.sh stage (two calls)
#   PART=peers, carry ["dist"]: RUNS (default 2) runs of detfuse beside FA4 deterministic on the
#            issue's seven rows (one process each, 8 interleaved passes, --profile: GPU ms per kernel; the
#            heuristic, and its backward with the ls1 forwards: ATTN_V replaces those columns); then the host's share of the timed window at two rows (fwd+bwd with
#            the launches hidden behind a GPU spin, the host time per call, cProfile's top functions).
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
attention_bins
gpu_line "$OUT/gpu.txt"
# bench_sc64 TAG [--causal]: d64 GQA 32/8 with softcap 50, owning against ordered ew2 spt1, fwd+bwd, 3 repeats,
# both orders, into $OUT/bench_TAG_{ab,ba}.log.
bench_sc64() {
  local own=$W.owning.br64_bc128_st2_qbc64_qst3_d64 ew2=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
  brun "bench_$1_ab" 40 "$DF" bench attention --shape 4,32,8,4096,4096,64 ${2:-} --softcap 50 \
    --variant "$own" --variant "$ew2" --repeats 3
  brun "bench_$1_ba" 40 "$DF" bench attention --shape 4,32,8,4096,4096,64 ${2:-} --softcap 50 \
    --variant "$ew2" --variant "$own" --repeats 3
}
case ${PART:-suite} in
  suite)
    # ls1 (the split walk) with ov2 against the heuristic's forwards, forward ms, 5 repeats, both orders.
    bench_pair 64c 4,32,32,4096,4096,64 --causal br192_bc128_st3_ov1_pp0_rd1_ot1_d64 br192_bc128_st3_ov2_pp0_rd1_ot1_ls1_d64
    bench_pair 64n 4,32,32,4096,4096,64 - br192_bc128_st3_ov1_pp0_ps1_rd1_d64 br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64
    bench_pair 128n 4,32,32,4096,4096,128 - br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_ls1_d128
    bench_pair 128c 4,32,32,4096,4096,128 --causal br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128 br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_ls1_d128
    brun tests_all 300 "$TW"
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    sanitize_gtest fwd 90 'AttentionWgmmaGpu.TmaOSanitizerSized:AttentionWgmmaGpu.PersistentSanitizerSized:AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'
    sanitize_gtest hs 60 'AttentionWgmmaBwdGpu.HsSanitizerSized'
    bench_sc64 sc64 --causal
    brun tests_reg 200 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
    REPORT_TESTS="tests_var tests_all tests_reg" fwd_report s28suite "Duration" ;;
  final)
    # The last build (2ffeae0): the forward's tests (TmaOSanitizerSized's count), the heuristic's expectations,
    # and d64 GQA with softcap non-causal (owning against ew2 spt1, the heuristic there since 2ffeae0).
    brun tests_fwd 120 "$TW" --gtest_filter='AttentionWgmma.*:AttentionWgmmaGpu.*'
    brun tests_var 30 "$B/tests/attention/test_attention_variants"
    bench_sc64 sc64n
    REPORT_TESTS="tests_fwd tests_var" fwd_report s28final "Duration" ;;
  peers)
    peers_setup
    # Besides the heuristic: its backward with the ls1 forwards (a d64 one and a d128 one; each row reports the
    # other's refusal).
    LS="--variant $W.fwd.br192_bc128_st3_ov2_pp0_rd1_ot1_ls1_d64+heuristic"
    LS="$LS --variant $W.fwd.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_ls1_d128+heuristic"
    for i in $(seq 1 "${RUNS:-2}"); do
      gpu_line "$OUT/gpu.txt"
      brun "peers_$i" 240 python3 experiments/attention_peers.py --json "$OUT/peers_$i.jsonl" \
        --rows issue ${ATTN_V-$LS} --impl detfuse --impl fa4-det --reps 6 --warmup 2 --digest-runs 2 --interleave 8 --profile
    done
    # The host's share of the timed window: fwd+bwd with a 3 ms GPU spin queued first (the launches hidden) beside
    # the interleaved figure; the host time per call and cProfile's top functions.
    brun host 120 python3 experiments/attention_peers.py --rows 4,32,32,4096,64,1 4,32,32,4096,128,0 \
      --impl detfuse --impl fa4-det --reps 10 --warmup 2 --digest-runs 1 --interleave 8 --host-hidden-ms 3 --cprofile 50
    {
      cat "$OUT/gpu.txt"
      echo "=== host"; grep -E "host hidden|host time per|^    " "$OUT/host.log" | cut -c1-160
      for i in $(seq 1 "${RUNS:-2}"); do
        echo "=== run $i"; grep -E "interleaved \(" "$OUT/peers_$i.log" | cut -c1-200
      done
      cat "$SUMMARY"
    } > "$OUT/report.txt"
    cat "$OUT/report.txt"
    # At most 8 files come back: the report and one archive of the rest.
    mkdir -p "$OUT/keep" && mv "$OUT"/*.log "$OUT"/*.jsonl "$OUT"/gpu.txt "$OUT"/summary.txt "$OUT"/keep/ 2>/dev/null
    tar czf "$OUT/s28peers-logs.tgz" -C "$OUT" keep && rm -rf "$OUT/keep" ;;
esac
