#!/usr/bin/env bash
# Session 12, issue 16: FlashAttention-3's order of the ordered dQ adds
# (`spt1`, kernels/attention/wgmma/bwd_dq_order.h; README "spt1") on the
# H200: causal, query blocks ascending from the diagonal with the key block
# on the diagonal adding first (the grid's last key block first); non-causal
# without a window, each key block starting on its own query block (shift);
# otherwise today's order. A run-time flag of the same kv kernels (pds3 d64,
# sp1 d128, pds2 d64 / d128). Run from the repo root with a Release build in
# ./build (DETFUSE_WGMMA=ON); logs under /tmp/s12-attnorder, tarred into
# $OUT/s12-attnorder.tar.gz at the end (the report also as
# $OUT/s12-attnorder-report.txt); about 2 minutes expected (the timeouts add
# up to under 8). Stages (each runs whatever the one before returned; exit
# codes in summary.txt):
#   1. the order's CPU test (turns against brute force, the lock-step
#      simulation: no key block waits in the new orders), the registry test
#      (45 backward variants, the spt1 names, the base's workspace) and
#      AttentionWgmmaBwdGpu.Spt1* (float64 reference on every backward case,
#      18 key blocks, shift with shared starts, 33 / 65 query blocks per key
#      block; 20 repeats with one digest; dK, dV bitwise the base's, dQ the
#      base's where today's order is kept, sp1 spt1's dQ pds2 spt1's; dQ
#      differs from the base's in the causal and shift orders);
#   2. the ordered tests over all 20 ordered variants, the pds2 / pds3 / sp
#      tests (their order unchanged: the same kernels with the flag 0) and
#      the full backward walk;
#   3. the kv objects' registers and spills (cuobjdump, where present; 0 STL);
#   4. compute-sanitizer memcheck, racecheck, synccheck on Spt1SanitizerSized
#      (pds3 spt1 d64 and sp1 spt1 d128: causal, shift, window);
#   5. `detfuse bench attention` B=4 H=32 S=4096, causal and not, 3 repeats:
#      each spt1 variant beside its base ordered variant and the atomic one;
#      20 repeats of the heuristic's two spt1 variants at 18 key blocks (dQ# 1).
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, a hang
# (exit 124: a deadlock of the new order), the tables last (prediction in the
# README "spt1": pds3 spt1 d64 ~300 causal / ~350 non-causal against 262.5 /
# 331.1; sp1 spt1 d128 ~390 / ~452 against 369.4 / 446.6).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
logs_in_tmp s12-attnorder
gpu_line "$OUT/gpu.txt"
attention_bins

# 1. tests
run order_cpu 10 "$B/tests/attention_wgmma/test_bwd_dq_order"
run tests_spt1 90 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Spt1*'
# 2. ordered (20 variants), the unchanged-order pds2 / pds3 / sp tests, every
# backward variant on every case
run tests_ordered 60 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.OrderedManyKeyBlocks:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered'
run tests_pds 60 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Pds2*:AttentionWgmmaBwdGpu.Pds3*:AttentionWgmmaBwdGpu.Sp*'
run tests_all_bwd 80 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.MatchesFloat64ReferenceAndRepeats'

# 3. registers and spills of the kv kernels that carry the flag (the batches
# list their neighbours too: the atomic ones, unchanged code)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" bwd_kv_d64_br128_st2_ots3 bwd_kv_d128_br64_st2_ots2_sp1 bwd_kv_d64_br64_st2_ots2 \
  bwd_kv_d128_br64_st2_ots2 > "$OUT/regs.log" 2>&1

# 4. sanitizers (pds3 spt1 d64 and sp1 spt1 d128, three sanitizer-sized cases)
run memcheck_spt1 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Spt1SanitizerSized'
run racecheck_spt1 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Spt1SanitizerSized'
run synccheck_spt1 40 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Spt1SanitizerSized'

# 5. bench: each spt1 variant beside its base and the atomic kernel
W=attention.bf16.wgmma
NAMES="ordered.br128_bc128_st2_tma1_pds3_spt1_d64 ordered.br128_bc128_st2_tma1_pds3_d64
       atomic.br128_bc128_st2_tma1_pds3_d64
       ordered.br64_bc128_st2_tma1_pds2_spt1_d64 ordered.br64_bc128_st2_tma1_pds2_d64
       atomic.br64_bc128_st2_tma1_pds2_d64"
N128="ordered.br64_bc128_st2_tma1_pds2_sp1_spt1_d128 ordered.br64_bc128_st2_tma1_pds2_sp1_d128
      atomic.br64_bc128_st2_tma1_pds2_sp1_d128
      ordered.br64_bc128_st2_tma1_pds2_spt1_d128 ordered.br64_bc128_st2_tma1_pds2_d128
      atomic.br64_bc128_st2_tma1_pds2_d128"
bench_both d64 4,32,32,4096,4096,64 $NAMES
bench_both d128 4,32,32,4096,4096,128 $N128
# 20 repeats, one dQ digest (the dQ# column) at 18 key blocks of 128 (B=2,
# H=16, Hkv=8, S=2304), causal (the causal order) and not (shift)
D64=$W.ordered.br128_bc128_st2_tma1_pds3_spt1_d64
D128=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_spt1_d128
run digest20_d64 20 "$DF" bench attention --shape 2,16,8,2304,2304,64 --causal --variant $D64 --repeats 20
run digest20_d64_nc 20 "$DF" bench attention --shape 2,16,8,2304,2304,64 --variant $D64 --repeats 20
run digest20_d128 20 "$DF" bench attention --shape 2,16,8,2304,2304,128 --causal --variant $D128 --repeats 20
run digest20_d128_nc 20 "$DF" bench attention --shape 2,16,8,2304,2304,128 --variant $D128 --repeats 20

{
  echo
  echo "--- tests"
  test_report order_cpu tests_spt1 tests_ordered tests_pds tests_all_bwd
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per kv kernel)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_spt1.log "$OUT"/racecheck_spt1.log "$OUT"/synccheck_spt1.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d64" "d64 causal"
  bench_table "$W" "$OUT/bench_d64.log" "$OUT/bench_d64_causal.log" $NAMES
  printf '%-58s %14s %14s\n' variant "d128" "d128 causal"
  bench_table "$W" "$OUT/bench_d128.log" "$OUT/bench_d128_causal.log" $N128
  for t in d64:$D64 d64_nc:$D64 d128:$D128 d128_nc:$D128; do
    dg=$(awk -v n="${t#*:}" '$1 == n { print $9 }' "$OUT/digest20_${t%%:*}.log")
    echo "digest20 ${t%%:*} (2,16,8,2304, ${t#*:}, 20 repeats): dQ# ${dg:-missing} (1 expected)"
  done
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s12-attnorder
