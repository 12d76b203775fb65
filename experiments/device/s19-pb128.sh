#!/usr/bin/env bash
# Branch s19-pb128 (issue 16, session 19; not run on a GPU yet): pb1 at d128, ew2 pds2 with
# FlashAttention-4's d128 step (its sm90 backward at d128 has Mma_dKV_is_RS: SdP_swapAB,
# AtomLayoutMSdP 1, AtomLayoutNdKV 2): P^T rounded to bf16 into dV's A fragment right after the
# exp, dV issued from registers at once (no P^T store, fence or 128-thread barrier), dS^T from
# the bf16 P^T (stored for dQ, dK from registers), dQ before dK and handed over while dK runs.
# Registered as ordered ..pds2_ew2_pb1_spt1_d128 and atomic ..pds2_ew2_pb1_d128; the heuristic
# is unchanged. One cold call, carry [".debs", ".deps"]: the build, the spill warnings, the
# backward registry test, the Ew* tests (float64 reference on every backward case incl. softcap +
# window, sanitizer-sized, 20 repeats one digest, bitwise equality of the others with their base),
# the layout tests, every wgmma registry case, the three sanitizers on EwSanitizerSized, then the
# bench of the heuristic's d128 kv variant (sp1 ew1 spt1) beside pb1 in both orders on the d128
# rows. Prediction: pb1 d128 fwd+bwd 2-4% faster than sp1 ew1 (d64's pb1 gained 3.5% over ew2;
# here it also gives up sp1's dK across the back edge, which was worth 0.8%).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
W=attention.bf16.wgmma
A=ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
PB=ordered.br64_bc128_st2_tma1_pds2_ew2_pb1_spt1_d128
AA=atomic.br64_bc128_st2_tma1_pds2_sp1_ew1_d128
AB=atomic.br64_bc128_st2_tma1_pds2_ew2_pb1_d128
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
{ grep -c "Registers are spilled" build.log; grep -B1 "Registers are spilled" build.log | grep -o "bwd_kv[A-Za-z0-9_]*" | sort | uniq -c; } > "$OUT/spills.txt" 2>&1
gpu_line "$OUT/gpu.txt"
run tests_kv 240 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Ew*'
run tests_pds 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_gpu 150 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
sanitize3 ew "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'
for s in "128 4,32,32,4096,4096,128" "128c 4,32,32,4096,4096,128 --causal" "128gn 4,32,8,4096,4096,128" \
         "8k 1,16,16,8192,8192,128 --causal"; do
  set -- $s
  run "bench$1_ab" 60 "$DF" bench attention --shape "$2" ${3:-} --variant "$W.$A" --variant "$W.$PB" --repeats 3
  run "bench$1_ba" 60 "$DF" bench attention --shape "$2" ${3:-} --variant "$W.$PB" --variant "$W.$A" --repeats 3
done
run bench128_atomic 60 "$DF" bench attention --shape 4,32,32,4096,4096,128 --variant "$W.$AA" --variant "$W.$AB" --repeats 3
{
  cat "$OUT/gpu.txt" "$OUT/spills.txt"
  test_report tests_kv tests_pds tests_gpu
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log 2>/dev/null
  for f in "$OUT"/bench*.log; do grep -hE "^attention\." "$f" | sed "s|^attention.bf16.wgmma.||; s|^|$(basename "$f" .log) |" | cut -c1-150; done
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
