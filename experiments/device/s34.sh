#!/usr/bin/env bash
# Session 34 (issue 16). Carry ["dist"] (pack.sh) unless said otherwise.
#   PART=ab, carry ["dist"] with build/detfuse_old (main at 2b891ba) packed beside build/detfuse
#            built from branch s33-fwdpk-epi after session 34's first run: s33.sh's PART=ab (the forward tests,
#            the backward suite with StagedDkDvRowsAndAlignment, `detfuse verify` bits against the old binary,
#            old / new bench at rows 4, 1, 2, the sanitizers). Session 34's first run (H100) had the forward's
#            interleaved rescale / pack 1-2% slower at d128 (reverted on the branch) and the staged dK / dV
#            epilogue 3-4% faster in the backward at d64 causal; this one measures the epilogue alone (the two
#            binaries' forwards are the same code, so their forward columns give the noise).
#   PART=peers, carry [".peers/c", "dist"], after two staging calls (.peers/a, .peers/b: experiments/peers/install.sh
#            stage): s28.sh's peers part, RUNS (3) runs of the seven rows beside FA4 deterministic.
#   PART=ncu128, on a warm machine with the peers installed: s33.sh's PART=ncu (per-instruction samples,
#            SourceCounters) for row 1 (4,32,32,4096,128, not causal): the d128 heuristic's kv kernel (pds4 pb5
#            spt1) and FA4 deterministic's backward kernel, one launch each ($OUT/pb5d128_source.csv,
#            $OUT/fa4d128_source.csv, details_*.log). Question: is row 1's gap, as row 4's was, in the per-CTA
#            code (now staged) or in the steady step?
# Logs in $OUT; $OUT/report.txt last.
set -uo pipefail
here=$(dirname "$0")
case ${PART:-peers} in
  ab) PART=ab bash "$here/s33.sh" ;;
  peers) RUNS=${RUNS:-3} PART=peers bash "$here/s33.sh" ;;
  ncu128)
    source "$here/lib.sh"
    attention_bins
    gpu_line "$OUT/gpu.txt"
    export DETFUSE_LIB=$PWD/$B/capi/libdetfuse_c.so
    S="--section SourceCounters --section WarpStateStats --section SpeedOfLight"
    brun ncu_pb5d128 200 ncu --clock-control none $S -k regex:attention_bwd_kv --launch-count 1 -f -o /tmp/pb5d128 \
      "$DF" bench attention --shape 4,32,32,4096,4096,128 --repeats 1 \
      --variant attention.bf16.wgmma.ordered.br80_bc128_st2_tma1_pds4_ew2_pb5_spt1_d128
    brun ncu_fa4d128 220 ncu --clock-control none $S -k regex:FlashAttentionBackwardSm90 --launch-count 1 -f \
      -o /tmp/fa4d128 python3 experiments/attention_peers.py --rows 4,32,32,4096,128,0 --impl fa4-det --reps 1 \
      --warmup 0 --digest-runs 1 --interleave 0
    for k in pb5d128 fa4d128; do
      [ -f /tmp/$k.ncu-rep ] || continue
      brun "page_$k" 60 sh -c "ncu -i /tmp/$k.ncu-rep --page source --print-source sass --csv > $OUT/${k}_source.csv"
      brun "details_$k" 60 ncu -i /tmp/$k.ncu-rep --page details
    done
    {
      cat "$OUT/gpu.txt"
      for k in pb5d128 fa4d128; do
        echo "=== $k"
        grep -E "^  [a-zA-Z_].*\(|Duration|Elapsed Cycles|Warp Cycles Per Issued|Issued Instructions|Stall" \
          "$OUT/details_$k.log" 2>/dev/null | cut -c1-150
      done
      cat "$SUMMARY"
    } > "$OUT/report.txt"
    gzip -9 "$OUT"/*_source.csv 2>/dev/null
    cat "$OUT/report.txt" ;;
esac
