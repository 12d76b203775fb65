#!/usr/bin/env bash
# Session 16 (issue 16): the wgmma thread slices taken at the first thread of the warpgroup, its index read
# from lane 0 (detail::wg_slice_thread), so ptxas builds the shared-memory operands' descriptors in uniform
# registers (no R2UR / move / add before every HGMMA). Meant as the same descriptors and bits: every attention wgmma
# kernel changes machine code, none its results. NOT on main: the change is
# experiments/results/h200-2026-12-03/s16/uniform/uniform-descriptors.patch, measured and reverted (that
# folder's report.txt: the ot1 forwards wrong, the kv kernel's cycles unchanged). One cold call (carry [".debs", ".deps"]):
#   1. build (the detfuse command and the two attention GPU test binaries);
#   2. R2UR / HGMMA counts of the heuristic's kv and forward kernels (cuobjdump);
#   3. bench of the heuristic's variants at the issue's shapes (3 repeats, dQ digests);
#   4. the whole wgmma attention test binary (float64 reference, repeats, bitwise comparisons between
#      variants, sanitizer-sized cases), the wgmma variants of test_attention_gpu's registry tests;
#      memcheck / racecheck on the sanitizer-sized backward and forward cases.
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
export OUT
mkdir -p "$OUT"
TARGETS="detfuse test_attention_wgmma test_attention_gpu" DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) \
  bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
source "$(dirname "$0")/lib.sh"
attention_bins
gpu_line "$OUT/gpu.txt"
W=attention.bf16.wgmma
KV64=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb1_spt1_d64
KV128=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
for o in "$OBJ"/*.o; do
  cuobjdump -sass "$o" | awk -v f="$(basename "$o")" '/Function :/ {fn = $3} /R2UR/ {n[fn]++} /HGMMA/ {h[fn]++}
    END {for (k in h) print f, n[k] + 0, h[k], substr(k, 1, 140)}'
done > "$OUT/r2ur.txt" 2>&1
for s in "128 4,32,32,4096,4096,128" "128c 4,32,32,4096,4096,128 --causal" "128g 4,32,8,4096,4096,128 --causal" \
         "64c 4,32,32,4096,4096,64 --causal" "64 4,32,32,4096,4096,64" "8k 1,16,16,8192,8192,128 --causal"; do
  set -- $s
  tag=$1; shift
  v=$KV128; [ "$tag" = 64 ] || [ "$tag" = 64c ] && v=$KV64
  run "bench$tag" 60 "$DF" bench attention --shape "$@" --variant "$v" --repeats 3
done
run tests_wgmma 170 "$TW" --gtest_brief=1
run tests_gpu 60 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
run memcheck_san 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" \
  --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized:AttentionWgmmaGpu.PersistentSanitizerSized'
run racecheck_san 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" \
  --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized:AttentionWgmmaGpu.PersistentSanitizerSized'
{
  cat "$OUT/gpu.txt"
  for f in "$OUT"/bench*.log; do grep -hE "^attention\." "$f" | cut -c1-170; done
  test_report tests_wgmma tests_gpu
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_san.log "$OUT"/racecheck_san.log
  awk '$3 > 0' "$OUT/r2ur.txt" | sort -k2 -n -r | head -5
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
