#!/usr/bin/env bash
# Session 15 (helper s15-pb1), issue 16: `pb1` at d64 (kernels/attention/wgmma/
# README.md "pb1"; BwdKvPbConfig in attention_wgmma_bwd.h): ew2 pds3 with P^T
# rounded to bf16 into dV's wgmma A fragment right after the exp (the fp32 S^T
# registers die there), dV += P^T dO issued at once from registers (no P^T
# store, no fence, no barrier before it), dS^T = P_bf16 (dP^T - D) from the
# same bf16 values, stored for dQ (SS) and kept as dK's A fragment (RS); the
# step's end as ew2. Other bits than ew2 (dS^T from the rounded P): float64
# reference only, no bitwise comparison with the base. Registered: ordered
# ..pds3_ew2_pb1_spt1_d64, atomic ..pds3_ew2_pb1_d64.
#
# Run from the repository root with a Release build of this branch in ./build
# (DETFUSE_WGMMA=ON). Logs under /tmp/s15-pb1, tarred into $OUT/s15-pb1.tar.gz
# (OUT made absolute; default ./out), the report also as $OUT/s15-pb1-report.txt.
# About 1.5 minutes expected (s14-dq.sh's stages: 10 s tests, 15 s sanitizers,
# ~25 s bench) (timeouts bound a hang: an ordered deadlock shows as exit 124).
# Stages (each runs whatever the one before returned; exit codes in summary.txt):
#   1. the registry test (57 backward variants, the pb1 names, ew2's workspace
#      and shared memory), AttentionWgmmaBwdGpu.Ew* (now the twelve ew / wq /
#      pb variants: float64 reference on every backward case, 18 key blocks,
#      spt1's shift cases; sanitizer-sized; 20 repeats one digest; ew / wq
#      bitwise their bases, pb1 left out of that comparison); the pds layout
#      tests (CPU; Pb1IsEw2StorageWithRegisterFragments among them);
#   2. the kv objects' registers and spills (cuobjdump, where present; 0 STL);
#   3. compute-sanitizer memcheck, racecheck, synccheck on EwSanitizerSized;
#   4. `detfuse bench attention` B=4 H=32 S=4096 d64, 3 repeats, causal and not
#      (ordered and atomic pb1 beside ordered ew2 spt1, the heuristic's), then
#      the reverse order; 20 repeats of ordered pb1 at 18 key blocks, causal and
#      not (dQ# 1 expected).
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, the
# tables last (prediction in the README "pb1": ordered pb1 ~378 causal / ~420
# non-causal against ew2's 365.1 / 408.8).
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
export OUT
source "$(dirname "$0")/lib.sh"
logs_in_tmp s15-pb1
gpu_line "$OUT/gpu.txt"
attention_bins

# 1. tests
run tests_pb 150 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Ew*'
run tests_layout 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout" --gtest_filter='AttentionWgmmaPds.*'

# 2. registers and spills (the ew batch: ew1 / ew2 d64, ew1 sp1 d128, pb1)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" bwd_kv_d64_br128_st2_ts3_ew2_pb1 > "$OUT/regs.log" 2>&1

# 3. sanitizers (the twelve ew / wq / pb variants, three sanitizer-sized cases)
sanitize3 pb "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'

# 4. bench
W=attention.bf16.wgmma
NAMES="ordered.br128_bc128_st2_tma1_pds3_ew2_pb1_spt1_d64 ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
       atomic.br128_bc128_st2_tma1_pds3_ew2_pb1_d64"
REV=$(echo $NAMES | tr ' ' '\n' | tac | tr '\n' ' ')
bench_both d64 4,32,32,4096,4096,64 $NAMES
bench_both d64_rev 4,32,32,4096,4096,64 $REV
# 20 repeats, one dQ digest (dQ#) at 18 key blocks of 128 (B=2, H=16, Hkv=8,
# S=2304), causal (spt1's causal order) and not (shift)
E1=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb1_spt1_d64
run digest20_causal 30 "$DF" bench attention --shape 2,16,8,2304,2304,64 --causal --variant $E1 --repeats 20
run digest20_nc 30 "$DF" bench attention --shape 2,16,8,2304,2304,64 --variant $E1 --repeats 20

{
  echo
  echo "--- tests"
  test_report tests_pb tests_layout
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per kv kernel)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_pb.log "$OUT"/racecheck_pb.log "$OUT"/synccheck_pb.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d64" "d64 causal"
  bench_table "$W" "$OUT/bench_d64.log" "$OUT/bench_d64_causal.log" $NAMES
  printf '%-58s %14s %14s\n' "variant (reverse order)" "d64" "d64 causal"
  bench_table "$W" "$OUT/bench_d64_rev.log" "$OUT/bench_d64_rev_causal.log" $REV
  echo "--- forward / backward split (fwd ms, fwd+bwd ms) of the d64 runs"
  awk '$1 ~ /^attention/ { print $1, $2, $4 }' "$OUT/bench_d64.log" "$OUT/bench_d64_causal.log"
  for t in causal nc; do
    dg=$(awk -v n="$E1" '$1 == n { print $9 }' "$OUT/digest20_$t.log")
    echo "digest20 $t (2,16,8,2304, 20 repeats) ${E1#$W.}: dQ# ${dg:-missing} (1 expected)"
  done
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s15-pb1
