#!/usr/bin/env bash
# The sp1 / sp2 attention backward (issue 16, d=128: pds2 with dQ issued
# before dK and dK left in flight into the next query block, FlashAttention-3's
# order; sp2: block m's dQ part handed to the writer warp in block m + 1, once
# S^T (m + 1) is issued; kernels/attention/wgmma/README.md "sp1, sp2") on the
# H200: run from the repo root with a Release build in ./build
# (DETFUSE_WGMMA=ON); logs under $OUT; about 2 minutes (the timeouts add up
# to 3 min 9 s). Stages:
#   1. the pds layout test (CPU: sp has pds2's storage byte for byte) and
#      the sp variants' GPU tests (AttentionWgmmaBwdGpu.Sp*: float64
#      reference on every backward case, at 18 key blocks, softcap + window,
#      65 query blocks per key block, 20 repeats at 18 key blocks, the
#      sanitizer-sized cases, and SpBitwiseEqualsPds2: ordered sp gives
#      pds2's bits for dQ, dK, dV, atomic sp1 its dK, dV) plus the registry
#      test (names, workspace sizes, can_run: 35 backward variants);
#   2. the kv kernels' registers and spills (cuobjdump, where present: 0 STL
#      in the sp objects expected);
#   3. compute-sanitizer memcheck, racecheck, synccheck on the sanitizer-sized
#      sp cases (the three sp variants);
#   4. `detfuse bench attention` at B=4, H=32, S=4096, d=128, causal and not,
#      sp1, sp2 beside pds2 (3 repeats), and 20 repeats of the ordered sp2 variant
#      at 18 key blocks (the dQ# column: distinct dQ digests).
# Look for: PASSED lines (no FAILED), "ERROR SUMMARY: 0 errors" three times,
# "STL 0" for the sp objects, a launch error or a hang (timeout exit 124:
# a pipeline release the new schedules got wrong), the table last (fwd+bwd
# TFLOP/s of sp1, sp2 against pds2: 437 / 347 ordered in session 8;
# predictions in the README; dQ# = 1 for every ordered row, 1 in digest20).
set -u
B=${BUILD:-build}
source "$(dirname "$0")/lib.sh"
gpu_line "$OUT/gpu.txt"

TW=$B/tests/attention_wgmma/test_attention_wgmma
DF=$B/detfuse
[ -x "$DF" ] || DF=$B/cli/detfuse

# 1. tests
run layout_cpu 5 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout"
run tests_sp 75 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Sp*'

# 2. registers and spills of the d128 kv kernels (pds2, sp1, sp2)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
{
  for o in bwd_kv_d128_br64_st2_ots2 bwd_kv_d128_br64_st2_ots2_sp1 bwd_kv_d128_br64_st2_ats2_sp1 \
           bwd_kv_d128_br64_st2_ots2_sp2; do
    f=$OBJ/$o.cu.o
    if [ -f "$f" ] && command -v cuobjdump > /dev/null; then
      echo "$o STL $(cuobjdump -sass "$f" | grep -c STL) $(cuobjdump -res-usage "$f" | grep -o 'REG:[0-9]* STACK:[0-9]*' | head -1)"
    else
      echo "$o: no object or no cuobjdump"
    fi
  done
} > "$OUT/regs.log" 2>&1

# 3. sanitizers
F='AttentionWgmmaBwdGpu.SpSanitizerSized'
run memcheck_sp 15 compute-sanitizer --tool memcheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run racecheck_sp 20 compute-sanitizer --tool racecheck --error-exitcode 9 "$TW" --gtest_filter="$F"
run synccheck_sp 15 compute-sanitizer --tool synccheck --error-exitcode 9 "$TW" --gtest_filter="$F"

# 4. bench, sp1 and sp2 beside pds2 (d128)
W=attention.bf16.wgmma
V128="--variant $W.ordered.br64_bc128_st2_tma1_pds2_sp2_d128
      --variant $W.ordered.br64_bc128_st2_tma1_pds2_sp1_d128 --variant $W.atomic.br64_bc128_st2_tma1_pds2_sp1_d128
      --variant $W.ordered.br64_bc128_st2_tma1_pds2_d128 --variant $W.atomic.br64_bc128_st2_tma1_pds2_d128"
run bench_d128 22 "$DF" bench attention --shape 4,32,32,4096,4096,128 $V128 --repeats 3
run bench_d128_causal 22 "$DF" bench attention --shape 4,32,32,4096,4096,128 --causal $V128 --repeats 3
# 20 repeats, one dQ digest (the dQ# column) for the ordered sp2 variant at
# 18 key blocks of 128 (B=2, H=16, Hkv=8, S=2304, causal)
run digest20_d128 15 "$DF" bench attention --shape 2,16,8,2304,2304,128 --causal \
  --variant $W.ordered.br64_bc128_st2_tma1_pds2_sp2_d128 --repeats 20

{
  echo
  echo "--- tests"
  test_report layout_cpu tests_sp
  echo "--- registers (cuobjdump: STL count, REG and STACK of the first kernel listed)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_sp.log "$OUT"/racecheck_sp.log "$OUT"/synccheck_sp.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096 d=128, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d128" "d128 causal"
  for v in ordered.br64_bc128_st2_tma1_pds2_sp2_d128 \
           ordered.br64_bc128_st2_tma1_pds2_sp1_d128 atomic.br64_bc128_st2_tma1_pds2_sp1_d128 \
           ordered.br64_bc128_st2_tma1_pds2_d128 atomic.br64_bc128_st2_tma1_pds2_d128; do
    a=$(awk -v n="$W.$v" '$1 == n { print $6 " (" $9 ")" }' "$OUT/bench_d128.log")
    c=$(awk -v n="$W.$v" '$1 == n { print $6 " (" $9 ")" }' "$OUT/bench_d128_causal.log")
    printf '%-58s %14s %14s\n' "$v" "${a:-missing}" "${c:-missing}"
  done
  dg=$(awk -v n="$W.ordered.br64_bc128_st2_tma1_pds2_sp2_d128" '$1 == n { print $9 }' "$OUT/digest20_d128.log")
  echo "digest20 (2,16,8,2304 d128 causal, ordered sp2, 20 repeats): dQ# ${dg:-missing} (1 expected)"
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
