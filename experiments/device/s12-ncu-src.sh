#!/usr/bin/env bash
# Session 12: where the stalls are, per instruction (ncu source counters: the
# warp-state samples of every SASS instruction, with the CUDA line from
# -lineinfo). Two kernels: the d64 causal attention kv kernel of the heuristic
# (`ordered` pds3; issue 16: 2.64 ms against FlashAttention-4's 1.27 at the same
# residency, session 11) and the FLCE ex16 logits GEMM of the default variant
# at 4096,4096,128256 (issue 17: 5.85 ms against Liger's plain-store 5.5).
# Each: one launch, clock control off; the report exported as the source page
# (SASS with samples), the CUDA-line page and the warp-state details. Logs
# under /tmp/s12-ncu-src, tarred into $OUT.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s12-ncu-src
gpu_line "$OUT/gpu.txt"
attention_bins
SEC="--section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight
     --section InstructionStats --import-source yes"
export_pages() {  # REP NAME: the SASS page (CSV), the CUDA-line page, the details
  ncu -i "$1" --page source --print-source sass --csv > "$OUT/$2_sass.csv" 2> "$OUT/$2_sass.err"
  ncu -i "$1" --page source --print-source cuda --csv > "$OUT/$2_cuda.csv" 2> "$OUT/$2_cuda.err"
  ncu -i "$1" --page details > "$OUT/$2_details.txt" 2>&1
}
W=attention.bf16.wgmma.ordered.br128_bc128_st2_tma1_pds3_d64
run ncu_kv64 150 ncu --clock-control none $SEC -k regex:attention_bwd_kv --launch-count 1 -f -o "$OUT/kv64" \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$W" --repeats 1
export_pages "$OUT/kv64.ncu-rep" kv64
F=flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024
run ncu_logits 150 ncu --clock-control none $SEC -k regex:gemm_wgmma_kernel --launch-count 1 -f -o "$OUT/logits" \
  "$DF" bench flce --shape 4096,4096,128256 --variant "$F" --repeats 1 --no-baseline
export_pages "$OUT/logits.ncu-rep" logits
{
  cat "$OUT/gpu.txt"
  for f in kv64 logits; do
    echo "=== $f"
    grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|No Eligible|Executed Instructions  " "$OUT/${f}_details.txt" | head -12
    wc -l "$OUT/${f}_sass.csv" "$OUT/${f}_cuda.csv"
    head -c 600 "$OUT/${f}_sass.csv"; echo
  done
  echo "--- runs"
  cat "$SUMMARY"
} > "$OUT/report.txt"
rm -f "$OUT"/*.ncu-rep.bak
pack_logs s12-ncu-src
