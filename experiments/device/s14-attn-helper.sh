#!/usr/bin/env bash
# Session 14 (helper s14-attn), issue 16: `ew1` / `ew2`, the d64 pds3 kv kernel's
# elementwise code and step end as FlashAttention-4's sm90 backward has them
# (kernels/attention/wgmma/README.md "ew1, ew2"; BwdKvEwConfig in
# attention_wgmma_bwd.h). ew1: the exp loop without a branch per element (the
# mask a pass of its own on the blocks that need it) and D read four chunks ahead
# of the dS^T stores (the base reloads it after every store and waits for each
# load); ew2: ew1 and dQ issued before dK, the dQ part handed to the writer warp
# while dK runs. Both give the base's bits (the same fp32 operations in the same
# order). Registered: ordered ..pds3_ew{1,2}_spt1_d64 (spt1's dQ order) and atomic
# ..pds3_ew{1,2}_d64; ew1 also on the d128 heuristic's sp1: ordered
# ..pds2_sp1_ew1_spt1_d128, atomic ..pds2_sp1_ew1_d128.
#
# Run from the repository root with a Release build of this branch in ./build
# (DETFUSE_WGMMA=ON). Logs under /tmp/s14-attn, tarred into $OUT/s14-attn.tar.gz
# (OUT made absolute; default ./out), the report also as $OUT/s14-attn-report.txt.
# About 2.5 minutes expected (timeouts bound a hang: an ordered deadlock shows
# as exit 124). Stages (each runs whatever the one before returned; exit codes in
# summary.txt):
#   1. the registry test (51 backward variants, the ew names, the base's
#      workspace and shared memory), AttentionWgmmaBwdGpu.Ew* (float64 reference
#      on every backward case, 18 key blocks, 33 query blocks per key block,
#      spt1's shift cases; sanitizer-sized; 20 repeats one digest; dQ, dK, dV
#      bitwise the base's: ordered pds3 spt1 in the causal, shift and kept
#      orders, sp1 spt1's at d128, the atomic bases' dK, dV) and Spt1* (the
#      bases, unchanged); the pds3 and ordered tests (23 ordered variants);
#   2. the kv objects' registers and spills (cuobjdump, where present; 0 STL);
#   3. compute-sanitizer memcheck, racecheck, synccheck on EwSanitizerSized
#      (the six ew variants: causal GQA, shift, softcap + window);
#   4. `detfuse bench attention` B=4 H=32 S=4096, 3 repeats: d64 causal and not
#      (ew1, ew2, the base pds3 spt1 = the heuristic, the atomic three), d64
#      causal again in the reverse order (order effects); d128 causal and not
#      (sp1 ew1 spt1 beside the heuristic sp1 spt1, atomic sp1 ew1 beside atomic
#      sp1); 20 repeats of ordered ew1 / ew2 d64 and sp1 ew1 d128 at 18 key
#      blocks (dQ# 1 expected).
# Look for: PASSED (no FAILED), "ERROR SUMMARY: 0 errors" three times, the
# tables last (prediction in the README "ew1, ew2": d64 causal fwd+bwd ordered
# ew1 ~340, ew2 ~345 against pds3 spt1's ~306; d128 causal sp1 ew1 ~415 against ~402).
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
export OUT
source "$(dirname "$0")/lib.sh"
logs_in_tmp s14-attn
gpu_line "$OUT/gpu.txt"
attention_bins

# 1. tests
run tests_ew 120 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Ew*:AttentionWgmmaBwdGpu.Spt1*'
run tests_pds3 90 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Pds3*:AttentionWgmmaBwdGpu.OrderedManyKeyBlocks:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered'

# 2. registers and spills (the ew batch holds the four ew kernels; the pds3
# base's batch its rs1 neighbours too)
OBJ=$B/kernels/attention/wgmma/CMakeFiles/detfuse_attention_wgmma.dir
obj_regs "$OBJ" bwd_kv_d64_br128_st2_ots3_ew bwd_kv_d64_br128_st2_ots3 bwd_kv_d128_br64_st2_ots2_sp1 > "$OUT/regs.log" 2>&1

# 3. sanitizers (the six ew variants, three sanitizer-sized cases)
sanitize3 ew "$TW" --gtest_filter='AttentionWgmmaBwdGpu.EwSanitizerSized'

# 4. bench
W=attention.bf16.wgmma
NAMES="ordered.br128_bc128_st2_tma1_pds3_ew1_spt1_d64 ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
       ordered.br128_bc128_st2_tma1_pds3_spt1_d64
       atomic.br128_bc128_st2_tma1_pds3_ew1_d64 atomic.br128_bc128_st2_tma1_pds3_ew2_d64
       atomic.br128_bc128_st2_tma1_pds3_d64"
REV=$(echo $NAMES | tr ' ' '\n' | tac | tr '\n' ' ')
N128="ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128 ordered.br64_bc128_st2_tma1_pds2_sp1_spt1_d128
      atomic.br64_bc128_st2_tma1_pds2_sp1_ew1_d128 atomic.br64_bc128_st2_tma1_pds2_sp1_d128"
bench_both d64 4,32,32,4096,4096,64 $NAMES
vs=""
for n in $REV; do vs="$vs --variant $W.$n"; done
run bench_d64_causal_rev 40 "$DF" bench attention --shape 4,32,32,4096,4096,64 --causal $vs --repeats 3
bench_both d128 4,32,32,4096,4096,128 $N128
# 20 repeats, one dQ digest (dQ#) at 18 key blocks of 128 (B=2, H=16, Hkv=8,
# S=2304), causal (spt1's causal order) and not (shift)
E1=$W.ordered.br128_bc128_st2_tma1_pds3_ew1_spt1_d64
E2=$W.ordered.br128_bc128_st2_tma1_pds3_ew2_spt1_d64
E3=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
run digest20_causal 30 "$DF" bench attention --shape 2,16,8,2304,2304,64 --causal --variant $E1 --variant $E2 --repeats 20
run digest20_nc 30 "$DF" bench attention --shape 2,16,8,2304,2304,64 --variant $E1 --variant $E2 --repeats 20
run digest20_causal_d128 30 "$DF" bench attention --shape 2,16,8,2304,2304,128 --causal --variant $E3 --repeats 20
run digest20_nc_d128 30 "$DF" bench attention --shape 2,16,8,2304,2304,128 --variant $E3 --repeats 20

{
  echo
  echo "--- tests"
  test_report tests_ew tests_pds3
  echo "--- registers (cuobjdump: STL count; REG / STACK / SHARED per kv kernel)"
  cat "$OUT/regs.log"
  echo "--- sanitizers"
  grep -hE "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck_ew.log "$OUT"/racecheck_ew.log "$OUT"/synccheck_ew.log
  echo "--- bench logs (errors)"
  grep -hiE "rror|invalid|resources" "$OUT"/bench*.log "$OUT"/digest20*.log | head -10
  echo "--- summary (fwd+bwd TFLOP/s, B=4 H=32 S=4096, 3 repeats; dQ#: distinct dQ digests)"
  printf '%-58s %14s %14s\n' variant "d64" "d64 causal"
  bench_table "$W" "$OUT/bench_d64.log" "$OUT/bench_d64_causal.log" $NAMES
  printf '%-58s %14s %14s\n' "variant (reverse order)" "-" "d64 causal"
  bench_table "$W" /dev/null "$OUT/bench_d64_causal_rev.log" $REV
  printf '%-58s %14s %14s\n' variant "d128" "d128 causal"
  bench_table "$W" "$OUT/bench_d128.log" "$OUT/bench_d128_causal.log" $N128
  echo "--- forward / backward split (fwd ms, fwd+bwd ms) of the d64 causal run"
  awk '$1 ~ /^attention/ { print $1, $2, $4 }' "$OUT/bench_d64_causal.log"
  for t in causal:$E1 causal:$E2 nc:$E1 nc:$E2 causal_d128:$E3 nc_d128:$E3; do
    n=${t#*:}
    dg=$(awk -v n="$n" '$1 == n { print $9 }' "$OUT/digest20_${t%%:*}.log")
    echo "digest20 ${t%%:*} (2,16,8,2304, 20 repeats) ${n#$W.}: dQ# ${dg:-missing} (1 expected)"
  done
  echo "--- runs"
  cat "$SUMMARY"
} | tee "$OUT/report.txt"
pack_logs s14-attn
