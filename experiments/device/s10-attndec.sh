#!/usr/bin/env bash
# Session 10, issue 16: the d128 attention kv kernel with decoupled consumer
# warpgroups (`dc1`: sp1 where each warpgroup forms dQ over its own 64 keys
# from its own dS^T rows, one fp32 dQ tile per warpgroup, two bulk adds per
# query block; ordered: the semaphore counts two adds per key block;
# kernels/attention/wgmma/README.md "dc1") on the H200. Run from the repo root
# with a Release build in ./build (DETFUSE_WGMMA=ON); logs under
# /tmp/s10-attndec, tarred into $OUT/s10-attndec.tar.gz at the end (the
# report also as $OUT/s10-attndec-report.txt); about 2 minutes expected (the
# timeouts add up to 7 1/2). Stages (each runs whatever the one before
# returned; exit codes in summary.txt):
#   1. the pds layout test (CPU: dc1's 226 KB storage, its dQ split by keys)
#      and the GPU tests: the registry test (37 backward variants, the dc1
#      names, sp1's workspace, refused with 8 KB less shared memory),
#      AttentionWgmmaBwdGpu.Dc1* (float64 reference on every backward case,
#      18 key blocks, softcap + window, 65 query blocks per key block; 20
#      repeats with one digest; dK / dV bitwise equal to sp1's), and the
#      refactored Sp* / Pds2* / Pds3* tests (the shared case helpers);
#   2. the ordered tests over all 14 ordered variants (many key blocks, the
#      window case the semaphore counts from n_lo), and the full backward walk;
#   3. the kv objects' registers and spills (cuobjdump, where present; 0 STL);
#   4. compute-sanitizer memcheck, racecheck, synccheck on Dc1SanitizerSized;
#   5. `detfuse bench attention` B=4 H=32 S=4096 d=128, causal and not, 3
#      repeats: dc1 ordered / atomic beside sp1 and pds2; 20 repeats of the
#      ordered dc1 variant at 18 key blocks (dQ# must be 1).
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, a hang
# (exit 124: a barrier or semaphore count the decoupled walk got wrong), the
# table last (prediction in the README: ordered dc1 ~465 / ~390 against sp1
# 451.0 / 377.4).
set -uo pipefail
B=${BUILD:-build}
FINAL_OUT=${OUT:-out}
mkdir -p "$FINAL_OUT"
OUT=/tmp/s10-attndec
rm -rf "$OUT"
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

TW=$B/tests/attention_wgmma/test_attention_wgmma
DF=$B/detfuse
[ -x "$DF" ] || DF=$B/cli/detfuse

# 1. tests
run layout_cpu 10 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_dc1 60 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Dc1*'
run tests_sp_pds 60 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Sp*:AttentionWgmmaBwdGpu.Pds2*:AttentionWgmmaBwdGpu.Pds3*'
# 2. ordered (14 variants) and every backward variant on every case
run tests_ordered 45 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.OrderedManyKeyBlocks:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered'
run tests_all_bwd 80 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.MatchesFloat64ReferenceAndRepeats'

# 3. registers and spills of the d128 kv kernels (sp1, dc1: both configurations in one object)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" bwd_kv_d128_br64_st2_ots2_sp1 bwd_kv_d128_br64_st2_ats2_sp1 bwd_kv_d128_br64_st2_ts2_sp1_dc1 \
  > "$OUT/regs.log" 2>&1

# 4. sanitizers (the two dc1 variants, the sanitizer-sized cases)
sanitize3 dc1 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Dc1SanitizerSized'

# 5. bench: dc1 beside sp1 and pds2 (d128)
W=attention.bf16.wgmma
NAMES="ordered.br64_bc128_st2_tma1_pds2_sp1_dc1_d128 atomic.br64_bc128_st2_tma1_pds2_sp1_dc1_d128
       ordered.br64_bc128_st2_tma1_pds2_sp1_d128 atomic.br64_bc128_st2_tma1_pds2_sp1_d128
       ordered.br64_bc128_st2_tma1_pds2_d128 atomic.br64_bc128_st2_tma1_pds2_d128"
V128=""
for n in $NAMES; do V128="$V128 --variant $W.$n"; done
run bench_d128 30 "$DF" bench attention --shape 4,32,32,4096,4096,128 $V128 --repeats 3
run bench_d128_causal 30 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $V128 --repeats 3
# 20 repeats, one dQ digest (the dQ# column) for ordered dc1 at 18 key blocks of
# 128 (B=2, H=16, Hkv=8, S=2304, causal)
run digest20_d128 20 "$DF" bench attention --shape 2,16,8,2304,2304,128 --causal \
  --variant $W.ordered.br64_bc128_st2_tma1_pds2_sp1_dc1_d128 --repeats 20

{
  echo
  echo "--- tests"
  test_report layout_cpu tests_dc1 tests_sp_pds tests_ordered tests_all_bwd
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per kv kernel)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_dc1.log "$OUT"/racecheck_dc1.log "$OUT"/synccheck_dc1.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096 d=128, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d128" "d128 causal"
  bench_table "$W" "$OUT/bench_d128.log" "$OUT/bench_d128_causal.log" $NAMES
  dg=$(awk -v n="$W.ordered.br64_bc128_st2_tma1_pds2_sp1_dc1_d128" '$1 == n { print $9 }' "$OUT/digest20_d128.log")
  echo "digest20 (2,16,8,2304 d128 causal, ordered dc1, 20 repeats): dQ# ${dg:-missing} (1 expected)"
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
cp "$OUT/report.txt" "$FINAL_OUT/s10-attndec-report.txt"
tar -czf "$FINAL_OUT/s10-attndec.tar.gz" -C /tmp s10-attndec
