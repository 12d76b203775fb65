#!/usr/bin/env bash
# Session 15, the backward's memory-bound passes (issue 16): D = rowsum(dO * O)
# with 16-byte loads (bwd_common.cu, the same bits), the TMA dQ convert through a
# row-major shared tile with 16-byte stores (bwd_dq_writer.cuh), the atomic
# strategies' fp32 -> bf16 convert vectorised. Cold machine, carry [".debs", ".deps"]:
#   1. build the command and the attention test binaries (TARGETS);
#   2. tests: AttentionGpuBwdCommon (the bits of both passes against the host's
#      statement of their order), the heuristic's and the atomic variants of
#      test_attention_gpu (float64 reference, repeats), AttentionWgmmaBwd* (every
#      backward test of the wgmma engine, the TMA convert under all of them);
#   3. memcheck / racecheck / synccheck: AttentionGpuBwdCommon, EwSanitizerSized;
#   4. per-kernel durations (ncu) at 4,32,32,4096,{64,128} causal, as s15-ncu.sh;
#   5. bench of the heuristic at the issue's shapes (3 repeats).
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
TARGETS="${TARGETS:-detfuse test_attention_gpu test_attention_wgmma test_attention_variants}" \
  DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
source "$(dirname "$0")/lib.sh"
logs_in_tmp s15-glue
gpu_line "$OUT/gpu.txt"
attention_bins
TG=$B/tests/attention/test_attention_gpu
W=attention.bf16.wgmma
KV64=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
KV128=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
run tests_common 60 "$TG" --gtest_filter='AttentionGpuBwdCommon.*:AttentionGpuApi.*'
run tests_variants 240 "$TG" --gtest_filter='*ordered_br128_bc128_st2_tma1_pds3_ew2_spt1_d64*:*ordered_br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128*:*atomic_br64_bc128_st2_d64*:*atomic_br64_bc128_st2_tma1_pds2_d128*'
run tests_bwd 120 "$TW" --gtest_filter='AttentionWgmmaBwd*'
run heuristic 30 "$B/tests/attention/test_attention_variants" --gtest_filter='*euristic*'
sanitize3 common "$TG" --gtest_filter='AttentionGpuBwdCommon.*'
sanitize3 ew "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
BASIC="--section SpeedOfLight --section LaunchStats"
run kernels64 120 ncu --clock-control none $BASIC -k regex:'rowsum|convert|pds_stage|bwd_kv' --launch-count 8 \
  "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$KV64" --repeats 1
run kernels128 120 ncu --clock-control none $BASIC -k regex:'rowsum|convert|pds_stage|bwd_kv' --launch-count 8 \
  "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal --variant "$KV128" --repeats 1
run bench128 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 --variant "$KV128" --repeats 3
run bench128c 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal --variant "$KV128" --repeats 3
run bench128g 60 "$DF" bench attention --shape 4,32,8,4096,4096,128 --causal --variant "$KV128" --repeats 3
run bench64c 60 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal --variant "$KV64" --repeats 3
run bench64 60 "$DF" bench attention --shape 4,32,32,4096,4096,64 --variant "$KV64" --repeats 3
run bench8k 60 "$DF" bench attention --shape 1,16,16,8192,8192,128 --causal --variant "$KV128" --repeats 3
{
  cat "$OUT/gpu.txt"
  echo "--- tests"
  test_report tests_common tests_variants tests_bwd heuristic
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log
  for f in kernels64 kernels128; do
    echo "=== $f"
    grep -E "^  [a-zA-Z_].*\(|Duration|Memory Throughput" "$OUT/$f.log" | cut -c1-120
  done
  echo "--- bench"
  for f in bench128 bench128c bench128g bench64c bench64 bench8k; do grep -E "^attention|^heuristic|^ *variant" "$OUT/$f.log" | cut -c1-170; done
  echo "--- runs"
  cat "$SUMMARY"
} > "$OUT/report.txt"
pack_logs s15-glue
