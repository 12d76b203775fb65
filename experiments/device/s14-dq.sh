#!/usr/bin/env bash
# Session 14 (helper s14-dq), issue 16: `wq1`, the per-warpgroup dQ hand-off
# (kernels/attention/wgmma/README.md "wq1"; BwdKvWqConfig in
# attention_wgmma_bwd.h). The one fp32 dQ tile of pds3 / sp1 as two contiguous
# halves, each consumer warpgroup handing its own half to the writer warp behind
# its own full / empty barriers (128 + 32 threads, BwdBarrier::kDqWg*), the
# writer adding half 0 then half 1 by two bulk adds (ordered: both behind the key
# block's one semaphore turn). ew2 / ew1 hand the whole tile over behind
# barriers of all 256 consumers and the writer (288): a second rendezvous of the
# warpgroups per step. Same bits as the ew variant (required). Registered:
# ordered ..pds3_ew2_wq1_spt1_d64, atomic ..pds3_ew2_wq1_d64, ordered
# ..pds2_sp1_ew1_wq1_spt1_d128, atomic ..pds2_sp1_ew1_wq1_d128.
#
# Run from the repository root with a Release build of this branch in ./build
# (DETFUSE_WGMMA=ON). Logs under /tmp/s14-dq, tarred into $OUT/s14-dq.tar.gz
# (OUT made absolute; default ./out), the report also as $OUT/s14-dq-report.txt.
# About 1.5 minutes expected (s14-attn-helper.sh's stages took 80 s) (timeouts bound a hang: an ordered deadlock shows as
# exit 124). Stages (each runs whatever the one before returned; exit codes in
# summary.txt):
#   1. the registry test (55 backward variants, the wq names, the ew variant's
#      workspace and shared memory), AttentionWgmmaBwdGpu.Ew* (now the ten ew and
#      wq variants: float64 reference on every backward case, 18 key blocks,
#      spt1's shift cases; sanitizer-sized; 20 repeats one digest; dQ, dK, dV of
#      each wq1 variant bitwise its ew variant's, ordered; dK, dV atomic);
#   2. the kv objects' registers and spills (cuobjdump, where present; 0 STL);
#   3. compute-sanitizer memcheck, racecheck, synccheck on EwSanitizerSized;
#   4. `detfuse bench attention` B=4 H=32 S=4096, 3 repeats: d64 causal and not
#      (ordered and atomic ew2 wq1 beside ew2), then both again in the reverse
#      order; d128 causal and not (sp1 ew1 wq1 beside sp1 ew1, ordered and
#      atomic), both again reversed (order effects); 20 repeats of the two ordered wq1 variants at 18 key blocks (dQ#
#      1 expected).
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, the
# tables last (prediction in the README "wq1": d64 causal ordered ew2 wq1 ~+3%
# on ew2's ~352, d128 causal sp1 ew1 wq1 ~+2% on ew1's ~436).
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
export OUT
source "$(dirname "$0")/lib.sh"
logs_in_tmp s14-dq
gpu_line "$OUT/gpu.txt"
attention_bins

# 1. tests
run tests_wq 120 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Ew*'
run tests_layout 30 "$B/tests/attention_wgmma/test_attention_wgmma_pds_layout" --gtest_filter='AttentionWgmmaPds.*'

# 2. registers and spills (the wq batch: the four wq1 kernels; the ew batch)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" bwd_kv_d64_br128_st2_ots3_ew2_wq1 bwd_kv_d64_br128_st2_ots3_ew > "$OUT/regs.log" 2>&1

# 3. sanitizers (the ten ew / wq variants, three sanitizer-sized cases)
sanitize3 wq "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'

# 4. bench
W=attention.bf16.wgmma
NAMES="ordered.br128_bc128_st2_tma1_pds3_ew2_wq1_spt1_d64 ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
       atomic.br128_bc128_st2_tma1_pds3_ew2_wq1_d64 atomic.br128_bc128_st2_tma1_pds3_ew2_d64"
REV=$(echo $NAMES | tr ' ' '\n' | tac | tr '\n' ' ')
N128="ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_wq1_spt1_d128 ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
      atomic.br64_bc128_st2_tma1_pds2_sp1_ew1_wq1_d128 atomic.br64_bc128_st2_tma1_pds2_sp1_ew1_d128"
REV128=$(echo $N128 | tr ' ' '\n' | tac | tr '\n' ' ')
bench_both d64 4,32,32,4096,4096,64 $NAMES
bench_both d64_rev 4,32,32,4096,4096,64 $REV
bench_both d128 4,32,32,4096,4096,128 $N128
bench_both d128_rev 4,32,32,4096,4096,128 $REV128
# 20 repeats, one dQ digest (dQ#) at 18 key blocks of 128 (B=2, H=16, Hkv=8,
# S=2304), causal (spt1's causal order) and not (shift)
E1=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_wq1_spt1_d64
E3=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_wq1_spt1_d128
run digest20_causal 30 "$DF" bench attention --shape 2,16,8,2304,2304,64 --causal --variant $E1 --repeats 20
run digest20_nc 30 "$DF" bench attention --shape 2,16,8,2304,2304,64 --variant $E1 --repeats 20
run digest20_causal_d128 30 "$DF" bench attention --shape 2,16,8,2304,2304,128 --causal --variant $E3 --repeats 20
run digest20_nc_d128 30 "$DF" bench attention --shape 2,16,8,2304,2304,128 --variant $E3 --repeats 20

{
  echo
  echo "--- tests"
  test_report tests_wq tests_layout
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per kv kernel)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_wq.log "$OUT"/racecheck_wq.log "$OUT"/synccheck_wq.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d64" "d64 causal"
  bench_table "$W" "$OUT/bench_d64.log" "$OUT/bench_d64_causal.log" $NAMES
  printf '%-58s %14s %14s\n' "variant (reverse order)" "d64" "d64 causal"
  bench_table "$W" "$OUT/bench_d64_rev.log" "$OUT/bench_d64_rev_causal.log" $REV
  printf '%-58s %14s %14s\n' variant "d128" "d128 causal"
  bench_table "$W" "$OUT/bench_d128.log" "$OUT/bench_d128_causal.log" $N128
  printf '%-58s %14s %14s\n' "variant (reverse order)" "d128" "d128 causal"
  bench_table "$W" "$OUT/bench_d128_rev.log" "$OUT/bench_d128_rev_causal.log" $REV128
  echo "--- forward / backward split (fwd ms, fwd+bwd ms) of the d64 causal and d128 runs"
  awk '$1 ~ /^attention/ { print $1, $2, $4 }' "$OUT/bench_d64_causal.log" "$OUT/bench_d128.log"
  for t in causal:$E1 nc:$E1 causal_d128:$E3 nc_d128:$E3; do
    n=${t#*:}
    dg=$(awk -v n="$n" '$1 == n { print $9 }' "$OUT/digest20_${t%%:*}.log")
    echo "digest20 ${t%%:*} (2,16,8,2304, 20 repeats) ${n#$W.}: dQ# ${dg:-missing} (1 expected)"
  done
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s14-dq
