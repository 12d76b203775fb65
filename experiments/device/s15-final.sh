#!/usr/bin/env bash
# Session 15's last build on the H200 (cold machine, carry [".debs", ".deps"]):
#   1. the whole build (experiments/device/build_there.sh; units of 4 configurations);
#   2. tests: the backward's memory-bound passes (AttentionGpuBwdCommon, AttentionGpuApi),
#      the wgmma backward's Spt1*, Pds3* and TmaConvert* tests (s15-pb1.sh runs the
#      registry test, Ew* and the sanitizers on EwSanitizerSized: the heuristic's kernels
#      among them), the heuristic tests; memcheck / racecheck / synccheck on
#      AttentionGpuBwdCommon (the device budget leaves no room for the whole suites);
#   3. the helpers' scripts when in the tree (HELPERS, default s15-pb1 s15-fwd192), each with its own OUT and at most HELPER_S seconds (150);
#   4. per-kernel durations (ncu) of the backward at 4,32,32,4096,{64,128} causal and
#      the bench of the heuristic's backward variants at the issue's shapes.
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"
attention_bins
TG=$B/tests/attention/test_attention_gpu
W=attention.bf16.wgmma
KV64=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
KV128=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128

run tests_common 60 "$TG" --gtest_filter='AttentionGpuBwdCommon.*:AttentionGpuApi.*'
run tests_bwd 150 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Spt1*:AttentionWgmmaBwdGpu.Pds3*:AttentionWgmmaBwdGpu.TmaConvert*'
run heuristic 30 "$B/tests/attention/test_attention_variants" --gtest_filter='*euristic*'
sanitize3 common "$TG" --gtest_filter='AttentionGpuBwdCommon.*'
for h in ${HELPERS:-s15-pb1 s15-fwd192}; do
  if [ -f "experiments/device/$h.sh" ]; then
    mkdir -p "$OUT/$h"
    OUT=$OUT/$h timeout ${HELPER_S:-150} bash "experiments/device/$h.sh" > "$OUT/$h.log" 2>&1
    echo "$h exit $?" >> "$SUMMARY"
  fi
done
BASIC="--section SpeedOfLight --section LaunchStats"
run kernels64 120 ncu --clock-control none $BASIC -k regex:'rowsum|convert|pds_stage|bwd_kv' --launch-count 4 \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$KV64" --repeats 1
run kernels128 120 ncu --clock-control none $BASIC -k regex:'rowsum|convert|pds_stage|bwd_kv' --launch-count 4 \
  "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal --variant "$KV128" --repeats 1
for s in "128 4,32,32,4096,4096,128" "128c 4,32,32,4096,4096,128 --causal" "128g 4,32,8,4096,4096,128 --causal" \
         "64c 4,32,32,4096,4096,64 --causal" "64 4,32,32,4096,4096,64" "8k 1,16,16,8192,8192,128 --causal"; do
  set -- $s
  tag=$1; shift
  v=$KV128; [ "$tag" = 64 ] || [ "$tag" = 64c ] && v=$KV64
  run "bench$tag" 60 "$DF" bench attention --shape "$@" --variant "$v" --repeats 3
done
{
  cat "$OUT/gpu.txt"
  echo "--- tests"
  test_report tests_common tests_bwd heuristic
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log
  for f in kernels64 kernels128; do
    echo "=== $f"
    grep -E "^  [a-zA-Z_].*\(|Duration" "$OUT/$f.log" | cut -c1-110
  done
  echo "--- bench"
  for f in "$OUT"/bench*.log; do grep -E "^attention\." "$f" | cut -c1-170; done
  for h in ${HELPERS:-s15-pb1 s15-fwd192}; do [ -f "$OUT/$h.log" ] && { echo "=== $h"; tail -40 "$OUT/$h.log"; }; done
  echo "--- runs"
  cat "$SUMMARY"
} > "$OUT/report.txt"
