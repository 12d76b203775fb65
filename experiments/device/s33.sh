#!/usr/bin/env bash
# Session 33 (issue 16). Carry ["dist"] (pack.sh; main's build) unless said otherwise.
#   PART=peers, carry [".peers/c", "dist"], after two staging calls (.peers/a, .peers/b: experiments/peers/install.sh
#            stage): s28.sh's peers part (install, then RUNS runs of the issue's seven rows beside FA4
#            deterministic, one process each, and the host part). On an H200 these are the issue's figures.
#   PART=ncu, on a warm machine with the peers installed (after PART=peers): ncu's per-instruction warp-stall
#            samples (SourceCounters, WarpStateStats) of one launch of the d64 kv kernel (pb5 spt1, the
#            heuristic's) and of FA4 deterministic's backward kernel, both at row 4 (4,32,32,4096,64 causal), as
#            SASS listings with their sample columns ($OUT/pb5_source.csv, $OUT/fa4_source.csv): where each
#            kernel's consumer warps wait (s32c.sh's kernel-wide stall reasons mix in the producer and writer
#            warps). Replaces session 32's s32d.sh (pb5 alone, never run). Map them with experiments/results/sass-bwd-d64-2026-12-06/segments.py.
#   PART=rowsum, carry ["dist"] with build/detfuse_old (main before the change) packed beside build/detfuse: the
#            backward's D = rowsum(dO * O) with four row groups a warp (bwd_common.cu). Correct first: the bits
#            test (AttentionGpuBwdCommon.*: the host's statement of the order, rows up to 20011) and memcheck on
#            it; then ncu (clock control off) of the rowsum kernel's launches in `detfuse bench attention` (no
#            --variant: the registry's variants in order; the rowsum pass is every backward's), old and new binary alternately, at row 4 (4,32,32,4096,64
#            causal) and row 1 (4,32,32,4096,128), and dQ digests of both binaries at both rows (the same bits).
#            Prediction: 0.049 -> ~0.03 ms at row 4, 0.092 -> ~0.055 at row 1 (H100 figures of session 31).
#            Run once (H100): flat, the kernel already reads dO and O at ~2.8 TB/s (the prediction took one
#            tensor's bytes for both); the change was reverted (f899cd8), this part stays as the record.
#   PART=ncufwd, as PART=ncu: the same for the d64 causal forwards at row 4 (the H100 heuristic's ls1 ps1
#            forward, FA4's FlashAttentionForwardSm90): $OUT/fwd_source.csv, $OUT/fa4fwd_source.csv. (Its one run
#            had no --variant, so ncu took the first registered forward, br128; the heuristic's two forwards
#            were then profiled by hand, experiments/results/h100-2026-12-06/s33/README.md.)
#            (experiments/ncu_sass_phases.py with a lower executed-count floor cuts their steps). Question: the
#            d64 forward kernel is ~0.85x of FA4's with the same steady-step instructions (session 28's reading
#            of both machine codes): is the loss in the masked steps, the waits, or outside the loop?
#   PART=ab, carry ["dist"] with build/detfuse_old (main at 300c811) packed beside build/detfuse built from
#            branch s33-fwdpk-epi (not run: no machine came for its last tries and the device time ran out; both
#            changes live on that branch until this has run): (1) the overlapped forwards (ov1, ov2: every
#            heuristic forward) with O's rescale and P's bf16 packs interleaved (fwd_softmax.cuh rescale_o_to_p; this session's ncu had the 32 packs back
#            to back at 4x FA4's stall samples); (2) the kv kernels' dK / dV through the K / V tiles, 16-byte
#            stores (bwd_epilogue.cuh; the ncu's largest per-CTA cost of the d64 kv kernel). Correct first: the
#            forward GPU tests (float64 list, ov2 = ov1 bits, the heuristic's d64 twins, persistent, TMA-O) and
#            the backward suite (AttentionWgmmaBwd*, with StagedDkDvRowsAndAlignment); `detfuse verify` (O, LSE, dQ, dK,
#            dV) of the heuristic's kv variants (their ov1 forwards) against the old binary; then forward ms and
#            fwd+bwd ms, old / new alternately, ROUNDS (2) rounds, at rows 4, 1, 2; the sanitizers on the
#            forward's and the backward's sanitizer-sized cases with the time left. Prediction: the d64 causal
#            forward 3-4% faster, d128 1-3%; the d64 kv kernel ~3% (0.04 ms), d128 1-2%.
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
attention_bins
gpu_line "$OUT/gpu.txt"
case ${PART:-peers} in
  peers)
    ATTN_V="" bash experiments/device/s28.sh ;;
  ab)
    OLD=$B/detfuse_old
    brun tests_fwd 150 "$TW" --gtest_brief=1 --gtest_filter='AttentionWgmma.*:AttentionWgmmaGpu.MatchesFloat64*:AttentionWgmmaGpu.Ov2BitsEqualOv1:AttentionWgmmaGpu.HeuristicD64*:AttentionWgmmaGpu.Ot2*:AttentionWgmmaGpu.TmaO*:AttentionWgmmaGpu.Persistent*'
    brun tests_bwd 200 "$TW" --gtest_brief=1 --gtest_filter='AttentionWgmmaBwd*'
    K64=attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64
    K128=attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128
    verify_against_old 64 33 "2,8,2,1000,1300,64 --causal" "1,4,4,777,777,64 --causal --softcap 30 --window 200" \
      -- $K64 attention.bf16.wgmma.atomic.br128_bc128_st2_tma1_pds3_ew2_pb5_d64
    verify_against_old 128 33 "2,8,2,1000,1300,128 --causal" "1,4,2,300,2900,128" -- $K128
    F=attention.bf16.wgmma.fwd
    for r in $(seq 1 "${ROUNDS:-2}"); do
      for bin in detfuse_old detfuse detfuse detfuse_old; do
        brun "bench64c_${bin}_$r" 60 "$B/$bin" bench attention --shape 4,32,32,4096,4096,64 --causal --repeats 5 \
          --variant $K64 --variant $F.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64 --variant $F.br192_bc128_st3_ov1_pp0_rd1_ot1_d64
        brun "bench128c_${bin}_$r" 60 "$B/$bin" bench attention --shape 4,32,32,4096,4096,128 --causal --repeats 5 \
          --variant $K128 --variant $F.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128
        brun "bench128n_${bin}_$r" 60 "$B/$bin" bench attention --shape 4,32,32,4096,4096,128 --repeats 5 \
          --variant $K128 --variant $F.br128_bc128_st2_ov2_pp0_ps1_rd1_ot1_d128
      done
    done
    if [ $SECONDS -lt $(( ${UNTIL:-555} - 150 )) ]; then
      sanitize_gtest ew 90 'AttentionWgmmaBwdGpu.EwSanitizerSized:AttentionWgmmaBwdGpu.StagedDkDvRowsAndAlignment'
      sanitize3 fwd "$TW" --gtest_filter='AttentionWgmmaGpu.TmaOSanitizerSized:AttentionWgmmaGpu.ThreeWarpgroupsSanitizerSized'
    else echo "sanitizers skipped: no time left" | tee -a "$SUMMARY"; fi
    REPORT_TESTS="tests_fwd tests_bwd" fwd_report ab "Duration"
    cat "$OUT/bits.txt" ;;
  rowsum)
    TG=$B/tests/attention/test_attention_gpu
    brun tests 120 "$TG" --gtest_filter='AttentionGpuBwdCommon.*'
    sanitize memcheck 120 "$TG" --gtest_filter='AttentionGpuBwdCommon.*'
    for r in 1 2; do
      for bin in detfuse_old detfuse; do
        for row in "64c 4,32,32,4096,4096,64 --causal" "128n 4,32,32,4096,4096,128"; do
          set -- $row
          brun "ncu_${bin}_$1_$r" 60 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:rowsum \
            --launch-count 6 "$B/$bin" bench attention --shape "$2" ${3:-} --repeats 3
        done
      done
    done
    {
      cat "$OUT/gpu.txt"
      test_report tests
      grep -E "ERROR SUMMARY" "$OUT/sanitize.log"
      for f in "$OUT"/ncu_*.log; do
        printf '%s ' "$(basename "$f" .log)"
        grep -E "gpu__time_duration.sum" "$f" | awk '{printf "%s ", $NF}'; echo
        grep -E "dQ#|digest" "$f" | head -2 | cut -c1-160
      done
      cat "$SUMMARY"
    } > "$OUT/report.txt"
    cat "$OUT/report.txt" ;;
  ncu | ncufwd)
    export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
    S="--section SourceCounters --section WarpStateStats --section SpeedOfLight"
    if [ "$PART" = ncu ]; then
      V="--variant attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_ew2_pb5_spt1_d64" OURS=pb5 THEIRS=fa4
      KO=attention_bwd_kv KT=FlashAttentionBackwardSm90
    else
      V="--variant attention.bf16.wgmma.fwd.br192_bc128_st3_ov2_pp0_ps1_rd1_ls1_d64" OURS=fwd THEIRS=fa4fwd
      KO=attention_fwd_wgmma KT=FlashAttentionForwardSm90
    fi
    brun "ncu_$OURS" 150 ncu --clock-control none $S -k regex:$KO --launch-count 1 -f -o /tmp/$OURS \
      "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $V --repeats 1
    brun "ncu_$THEIRS" 200 ncu --clock-control none $S -k regex:$KT --launch-count 1 -f -o /tmp/$THEIRS \
      python3 experiments/attention_peers.py --rows 4,32,32,4096,64,1 --impl fa4-det --reps 1 --warmup 0 \
      --digest-runs 1 --interleave 0
    for k in $OURS $THEIRS; do
      [ -f /tmp/$k.ncu-rep ] || continue
      brun "page_$k" 60 sh -c "ncu -i /tmp/$k.ncu-rep --page source --print-source sass --csv > $OUT/${k}_source.csv"
      brun "details_$k" 60 ncu -i /tmp/$k.ncu-rep --page details
    done
    {
      cat "$OUT/gpu.txt"
      for k in $OURS $THEIRS; do
        echo "=== $k"
        grep -E "^  [a-zA-Z_].*\(|Duration|Elapsed Cycles|Warp Cycles Per Issued|Issued Instructions|Stall" \
          "$OUT/details_$k.log" 2>/dev/null | cut -c1-150
      done
      ls -la "$OUT"
      cat "$SUMMARY"
    } > "$OUT/report.txt"
    cat "$OUT/report.txt" ;;
esac
