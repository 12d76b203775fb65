#!/usr/bin/env bash
# Branch s10-coopot1 on the H200, from the repository root (~3-4 min with a
# prebuilt ./build): issue 17, the ex16 logits through the TMA store (ot1) on
# the cooperative tiles, 128x256 in 2x1 clusters (WgCoop256c2t) and 256x128 in
# 1x2 clusters (WgCoop256x128c12t), each tile stored in two passes through one
# 32 KiB shared tile (kernels/flce/README.md "Cooperative tiles with the TMA
# store"). Logs under /tmp/s10-coopot1, tarred into $OUT/s10-coopot1.tar.gz.
#   1. CPU: tile addresses per pass, TMA boxes, storage, fallbacks, the names;
#   2. GPU: the TMA epilogue bit-identical to the register epilogue of the same
#      tile (ex16 chunk and statistics, store_bf16; guard rows and columns past
#      N untouched; N % 8 != 0 and an odd ldc falling back), the new configs'
#      layout cases (the fp32 store: their fallbacks), the two new FLCE variants
#      against the float64 reference;
#   3. compute-sanitizer memcheck, racecheck, synccheck on the cooperative
#      sanitizer-sized case, memcheck on ping-pong's (its epilogue code moved);
#   4. wgmma_probe, the logits alone (bf16 out, ex16, ex16 softcap 30; TF/s),
#      every "logits" row (ping ot1 beside the coop rows) at the Llama chunk
#      4096,4096,128256 and the Gemma-2 chunk 2048,2304,256000;
#   5. detfuse bench flce, 3 repeats: the two new variants beside the default
#      (c2 st5 pp1 ot1) at 16384,4096,128256, 8192,2304,256000 and 4096,4096,128256.
# Each step runs under a timeout and the script goes on past a failing one
# (its exit code is in summary.txt).
set -uo pipefail
FINAL_OUT=${OUT:-out}
mkdir -p "$FINAL_OUT"
export OUT=/tmp/s10-coopot1
rm -rf "$OUT"
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
B=build; CLI=$B/detfuse; TE=$B/tests/engines/test_engines_wgmma
LT=flce.bf16.wgmmalt.owning
DEF=$LT.bm128_bn128_bk64_c2_st5_pp1_ot1_ex16_mb1024
C2T=$LT.bm128_bn256_bk64_c2_st4_pp0_ot1_ex16_mb1024
C12T=$LT.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024
run cpu 30 bash -c "$B/tests/engines/test_engines_epi_tma_layout && $B/tests/flce/test_flce_variants"
run engines 120 $TE --gtest_filter='GemmWgmma.TmaEpilogue*:GemmWgmma.WgCoop256c2t_*:GemmWgmma.WgCoop256x128c12t_*'
run flce 90 $B/tests/flce/test_flce_gpu --gtest_filter="*bm128_bn256_bk64_c2_st4_pp0_ot1_ex16_mb1024*:*bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024*"
for t in memcheck racecheck synccheck; do
  sanitize $t 60 $TE --gtest_filter='GemmWgmma.TmaEpilogueSanitizerSizedCoop'
done
sanitize memcheck 60 $TE --gtest_filter='GemmWgmma.TmaEpilogueSanitizerSized'  # ping-pong, after the shared code's change
run probe_llama 40 $B/experiments/wgmma_probe 4096 4096 128256 5 logits
run probe_gemma 40 $B/experiments/wgmma_probe 2048 2304 256000 5 logits
for s in 16384,4096,128256 8192,2304,256000 4096,4096,128256; do
  run "bench_flce_${s//,/x}" 50 "$CLI" bench flce --shape "$s" --repeats 3 --variant $DEF --variant $C2T --variant $C12T
done
{
  echo
  cat "$OUT/gpu.txt"
  echo "--- tests"
  test_report cpu engines flce
  # memcheck / synccheck print "ERROR SUMMARY: 0 errors", racecheck "RACECHECK SUMMARY: 0 hazards displayed (0 errors"
  echo "sanitizer runs with 0 errors (of 4): $(grep -cE 'ERROR SUMMARY: 0 errors|SUMMARY: 0 hazards displayed \(0 errors' "$OUT/sanitize.log")"
  grep "ERROR SUMMARY" "$OUT/sanitize.log" | grep -v " 0 errors"
  echo "--- logits alone (ms, TF/s); session 9: ping c2 ot1 ex16 661 (Gemma-2) / 626 (Llama), cuBLASLt 690 / 679"
  grep -h "^shape" "$OUT"/probe_*.log
  grep -h "^logits" "$OUT"/probe_*.log
  echo "--- bench flce"
  grep -hE "^flce\.|^variant" "$OUT"/bench_*.log
  echo "--- steps"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
tar -czf "$FINAL_OUT/s10-coopot1.tar.gz" -C /tmp s10-coopot1
cp "$OUT/report.txt" "$FINAL_OUT/s10-coopot1-report.txt"
