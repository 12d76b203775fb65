#!/usr/bin/env bash
# Session 18 on the H200 (issue 16): the kv kernel's grid tail. Calls made back to back on one warm
# machine (its idle release is 30 s):
#   STAGE=1, carry [".debs", ".deps"]: the whole build (build_there.sh; the peers call needs the C
#            library); ptxas spill warnings of the kv kernels; the kv kernel's split tests (ws2:
#            each causal key block's walk over 2 CTAs; hs2 / hs4: a kv head's query heads over 2 or
#            4 CTAs), the spt1 / ew tests and every wgmma registry case, the dQ order's CPU tests,
#            memcheck / racecheck / synccheck on the ws and hs sanitizer-sized cases; the heuristic's
#            d128 kv variant beside ws2 (and hs2, hs4 at GQA) at the causal rows, twice in
#            alternating order; ncu of the kv kernel (SM-active average against maximum: the tail;
#            L2 hit rate, DRAM bytes) unsplit and ws2.
#   then, carry [".peers/a"]: bash experiments/peers/install.sh stage
#   then s17.sh STAGE=2 (carry [".peers/b"]) with ATTN_V naming the ws2 pairing: the peers beside
#            it in one process.
# Logs in $OUT (default ./out); $OUT/report.txt last.
set -uo pipefail
source "$(dirname "$0")/lib.sh"  # OUT (made), run, sanitize3, attention_bins
W=attention.bf16.wgmma
KV=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
WS=${KV/_spt1_/_spt1_ws2_}
HS2=${KV/_spt1_/_spt1_hs2_}
HS4=${KV/_spt1_/_spt1_hs4_}
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
# The device call ends at 600 s and only a few files come back: the benches and ncu get what is
# left of 560 s (skipped when nothing is), so the report below is always written.
run_left() {
  local log=$1 t=$2 left=$((560 - SECONDS)); shift 2
  if [ "$left" -lt 10 ]; then echo "$log skipped (out of time)" | tee -a "$SUMMARY"; return 0; fi
  [ "$t" -gt "$left" ] && t=$left
  run "$log" "$t" "$@"
}
{
  grep -c "Registers are spilled" build.log
  grep -B1 "Registers are spilled" build.log | grep -o "bwd_kv[A-Za-z0-9_]*" | sort | uniq -c
} > "$OUT/spills.txt" 2>&1
gpu_line "$OUT/gpu.txt"
run tests_kv 200 "$TW" --gtest_filter='AttentionWgmmaBwd.*:AttentionWgmmaBwdGpu.Ws*:AttentionWgmmaBwdGpu.Hs*:AttentionWgmmaBwdGpu.Spt1*:AttentionWgmmaBwdGpu.Ew*:AttentionWgmmaBwdGpu.OrderedManyKeyBlocks:AttentionWgmmaBwdGpu.SanitizerSizedWindowOrdered'
run tests_gpu 120 "$B/tests/attention/test_attention_gpu" --gtest_filter='*wgmma*' --gtest_brief=1
run tests_order 30 "$B/tests/attention_wgmma/test_bwd_dq_order"
run tests_variants 30 "$B/tests/attention/test_attention_variants"
sanitize3 ws "$TW" --gtest_filter='AttentionWgmmaBwdGpu.WsSanitizerSized'
sanitize3 hs "$TW" --gtest_filter='AttentionWgmmaBwdGpu.HsSanitizerSized'
for s in "128c 4,32,32,4096,4096,128" "128g 4,32,8,4096,4096,128" "8k 1,16,16,8192,8192,128" "8kg 2,32,8,8192,8192,128"; do
  set -- $s
  vs="--variant $KV --variant $WS"
  case $1 in *g) vs="$vs --variant $HS2 --variant $HS4" ;; esac
  rv="--variant $WS --variant $KV"
  case $1 in *g) rv="--variant $HS4 --variant $HS2 $rv" ;; esac
  run_left "bench$1_a" 90 "$DF" bench attention --shape "$2" --causal $vs --repeats 3
  run_left "bench$1_b" 90 "$DF" bench attention --shape "$2" --causal $rv --repeats 3
done
for s in "128g 4,32,8,4096,4096,128" "8k 1,16,16,8192,8192,128"; do
  set -- $s
  for v in "$KV" "$WS"; do
    t=$1_$(echo "$v" | grep -o "ws2" || echo base)
    run_left "ncu$t" 90 ncu --clock-control none --metrics \
      gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum \
      -k regex:attention_bwd_kv --launch-count 1 "$DF" bench attention --shape "$2" --causal --variant "$v" --repeats 1
  done
done
{
  cat "$OUT/gpu.txt" "$OUT/spills.txt"
  test_report tests_kv tests_gpu tests_order tests_variants
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log 2>/dev/null
  for f in "$OUT"/bench*.log; do echo "=== $(basename "$f")"; grep -hE "^attention\." "$f" | cut -c1-150; done
  for f in "$OUT"/ncu*.log; do echo "=== $(basename "$f")"; grep -E "gpu__time|sm__cycles_active|lts__t_sector|dram__bytes" "$f" | tr -s ' '; done
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
