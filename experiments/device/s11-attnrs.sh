#!/usr/bin/env bash
# Session 11, issue 16: the attention kv kernel with dV and dK from
# registers (`rs1`: pds3 at d64, pds2 at d128, where dV += P^T dO and
# dK += dS^T Q take P^T and dS^T as wgmma A fragments converted from the
# S^T / dP^T accumulators; no P^T tile, dK issued before the dS^T barrier; d64
# with two LSE / D stages;
# kernels/attention/wgmma/README.md "rs1") on the H200. Run from the repo root
# with a Release build in ./build (DETFUSE_WGMMA=ON); logs under
# /tmp/s11-attnrs, tarred into $OUT/s11-attnrs.tar.gz at the end (the report
# also as $OUT/s11-attnrs-report.txt); about 2 minutes expected (the timeouts
# add up to under 8). Stages (each runs whatever the one before returned;
# exit codes in summary.txt):
#   1. the pds layout test (CPU: rs1's A fragment = C fragment identity, its
#      195 / 194 KB storage) and the GPU tests: the registry test (41 backward
#      variants, the rs1 names, the base's workspace, runs with 16 KB less
#      shared memory), AttentionWgmmaBwdGpu.Rs1* (float64 reference on every
#      backward case, 18 key blocks, softcap + window, 33 / 65 query blocks per
#      key block; 20 repeats with one digest; dQ / dK / dV bitwise equal to
#      pds3's at d64, pds2's at d128), and the Pds3* / Sp* tests;
#   2. the ordered tests over all 16 ordered variants, and the full backward walk;
#   3. the kv objects' registers and spills (cuobjdump, where present; 0 STL);
#   4. compute-sanitizer memcheck, racecheck, synccheck on Rs1SanitizerSized;
#   5. `detfuse bench attention` B=4 H=32 S=4096, causal and not, 3 repeats:
#      d64 rs1 ordered / atomic beside pds3 and pds2, d128 rs1 beside sp1 and
#      pds2; 20 repeats of the ordered rs1 variants at 18 key blocks (dQ# must be 1).
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, a hang
# (exit 124), the tables last (prediction in the README: ordered rs1 d64 ~335 /
# ~280 against pds3's 263 causal; d128 ~458 / ~381 against sp1's 454 / 379).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s11-attnrs
gpu_line "$OUT/gpu.txt"
attention_bins

# 1. tests
run layout_cpu 10 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_rs1 60 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Rs1*'
run tests_pds3_sp 60 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Pds3*:AttentionWgmmaBwdGpu.Sp*'
# 2. ordered (15 variants) and every backward variant on every case
run tests_ordered 45 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.OrderedManyKeyBlocks:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered'
run tests_all_bwd 80 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.MatchesFloat64ReferenceAndRepeats'

# 3. registers and spills of the d64 br128 kv kernels (rs1 and pds3)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" bwd_kv_d64_br128_st2_ots3_rs1 bwd_kv_d64_br128_st2_ats3_rs1 bwd_kv_d64_br128_st2_ots3 \
  bwd_kv_d64_br128_st2_ats3 bwd_kv_d128_br64_st2_ts2_rs1 > "$OUT/regs.log" 2>&1

# 4. sanitizers (the four rs1 variants, the sanitizer-sized cases)
sanitize3 rs1 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Rs1SanitizerSized'

# 5. bench: rs1 beside pds3 and pds2 (d64), beside sp1 (the heuristic's) and
# pds2 (rs1's base) at d128
W=attention.bf16.wgmma
NAMES="ordered.br128_bc128_st2_tma1_pds3_rs1_d64 atomic.br128_bc128_st2_tma1_pds3_rs1_d64
       ordered.br128_bc128_st2_tma1_pds3_d64 atomic.br128_bc128_st2_tma1_pds3_d64
       ordered.br64_bc128_st2_tma1_pds2_d64 atomic.br64_bc128_st2_tma1_pds2_d64"
N128="ordered.br64_bc128_st2_tma1_pds2_rs1_d128 atomic.br64_bc128_st2_tma1_pds2_rs1_d128
      ordered.br64_bc128_st2_tma1_pds2_sp1_d128 atomic.br64_bc128_st2_tma1_pds2_sp1_d128
      ordered.br64_bc128_st2_tma1_pds2_d128 atomic.br64_bc128_st2_tma1_pds2_d128"
bench_both d64 4,32,32,4096,4096,64 $NAMES
bench_both d128 4,32,32,4096,4096,128 $N128
# 20 repeats, one dQ digest (the dQ# column) for ordered rs1 at 18 key blocks of
# 128 (B=2, H=16, Hkv=8, S=2304, causal)
run digest20_d64 20 "$DF" bench attention --shape 2,16,8,2304,2304,64 --causal \
  --variant $W.ordered.br128_bc128_st2_tma1_pds3_rs1_d64 --repeats 20
run digest20_d128 20 "$DF" bench attention --shape 2,16,8,2304,2304,128 --causal \
  --variant $W.ordered.br64_bc128_st2_tma1_pds2_rs1_d128 --repeats 20

{
  echo
  echo "--- tests"
  test_report layout_cpu tests_rs1 tests_pds3_sp tests_ordered tests_all_bwd
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per kv kernel)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_rs1.log "$OUT"/racecheck_rs1.log "$OUT"/synccheck_rs1.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d64" "d64 causal"
  bench_table "$W" "$OUT/bench_d64.log" "$OUT/bench_d64_causal.log" $NAMES
  printf '%-58s %14s %14s\n' variant "d128" "d128 causal"
  bench_table "$W" "$OUT/bench_d128.log" "$OUT/bench_d128_causal.log" $N128
  dg=$(awk -v n="$W.ordered.br128_bc128_st2_tma1_pds3_rs1_d64" '$1 == n { print $9 }' "$OUT/digest20_d64.log")
  echo "digest20 (2,16,8,2304 d64 causal, ordered rs1, 20 repeats): dQ# ${dg:-missing} (1 expected)"
  dg=$(awk -v n="$W.ordered.br64_bc128_st2_tma1_pds2_rs1_d128" '$1 == n { print $9 }' "$OUT/digest20_d128.log")
  echo "digest20 (2,16,8,2304 d128 causal, ordered rs1, 20 repeats): dQ# ${dg:-missing} (1 expected)"
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s11-attnrs
