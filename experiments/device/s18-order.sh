#!/usr/bin/env bash
# Session 18 on the H200 (issue 16): two launch orders, each an experiment switched by an
# environment variable read at every launch (the bits do not depend on either):
#   DETFUSE_FWD_SNAKE=1  the persistent causal forward's tiles in one group over every head, the CTAs
#                        taking the rounds alternately forward and back (fwd_snake_slot); 2: the same
#                        over the L2 groups. (Round robin gives CTA 0 the longest tile of every round:
#                        a model puts the slowest CTA 30% above the mean at 1,16,16,8192 causal.)
#   DETFUSE_KV_LPT=1     the causal kv grid's key blocks launched first to last (longest walk first).
# One cold call, carry [".debs", ".deps"]: the whole build; the new tests (PersistentSnakeOrder,
# KvLptOrderSameBits, the tile-order CPU tests), the persistent and spt1 tests under both, sanitizers
# under both; the forward variant and the kv variants at the causal rows, each switch off / on
# twice in alternating order; ncu SM-active average / maximum of the 8k row's forward and kv kernel
# with the switch off and on. Then (warm) peers/install.sh stage (carry [".peers/a"]) and s17.sh
# STAGE=2 (carry [".peers/b"]) with the switches exported as the A/B says.
set -uo pipefail
source "$(dirname "$0")/lib.sh"  # OUT (made), run, sanitize3, attention_bins
W=attention.bf16.wgmma
F128=$W.fwd.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128
F64=$W.fwd.br128_bc128_st3_ov1_pp0_ps1_rd1_ot1_d64
KV=$W.ordered.br64_bc128_st2_tma1_pds2_sp1_ew1_spt1_d128
HS2=${KV/_spt1_/_spt1_hs2_}
DETFUSE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) bash "$(dirname "$0")/build_there.sh" build 2>&1 | tail -2
attention_bins
run_left() {  # the call ends at 600 s: the benches and ncu get what is left of 540 s
  local log=$1 t=$2 left=$((540 - SECONDS)); shift 2
  if [ "$left" -lt 10 ]; then echo "$log skipped (out of time)" | tee -a "$SUMMARY"; return 0; fi
  [ "$t" -gt "$left" ] && t=$left
  run "$log" "$t" "$@"
}
gpu_line "$OUT/gpu.txt"
run tests_new 150 "$TW" --gtest_filter='AttentionWgmmaGpu.PersistentSnakeOrder:AttentionWgmmaBwdGpu.KvLptOrderSameBits:AttentionWgmmaGpu.Persistent*:AttentionWgmmaBwd.*'
run tests_lpt 120 env DETFUSE_KV_LPT=1 "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Spt1*:AttentionWgmmaBwdGpu.Hs*:AttentionWgmmaBwdGpu.Ws*:AttentionWgmmaBwdGpu.OrderedManyKeyBlocks'
run tests_cpu 30 bash -c "$B/tests/attention_wgmma/test_fwd_tile_order && $B/tests/attention_wgmma/test_bwd_dq_order"
export DETFUSE_FWD_SNAKE=1 DETFUSE_KV_LPT=1
sanitize3 snake "$TW" --gtest_filter='AttentionWgmmaGpu.PersistentSanitizerSized'
sanitize3 lpt "$TW" --gtest_filter='AttentionWgmmaBwdGpu.Spt1SanitizerSized:AttentionWgmmaBwdGpu.WsSanitizerSized'
unset DETFUSE_FWD_SNAKE DETFUSE_KV_LPT
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,lts__t_sector_hit_rate.pct,dram__bytes_read.sum
for ab in 0 1; do
  run_left "ncufwd8k_s$ab" 60 env DETFUSE_FWD_SNAKE=$ab ncu --clock-control none --metrics $M -k regex:attention_fwd_wgmma \
    --launch-count 1 "$DF" bench attention --shape 1,16,16,8192,8192,128 --causal --variant "$F128" --repeats 1
  run_left "ncukv8k_l$ab" 60 env DETFUSE_KV_LPT=$ab ncu --clock-control none --metrics $M -k regex:attention_bwd_kv \
    --launch-count 1 "$DF" bench attention --shape 1,16,16,8192,8192,128 --causal --variant "$KV" --repeats 1
done
for s in "8k 1,16,16,8192,8192,128" "128c 4,32,32,4096,4096,128" "128g 4,32,8,4096,4096,128" "8kg 2,32,8,8192,8192,128" \
         "64c 4,32,32,4096,4096,64"; do
  set -- $s
  f=$F128; [ "$1" = 64c ] && f=$F64
  abs="0 1 1 0"; [ "$1" = 8k ] && abs="0 1 2 2 1 0"
  for ab in $abs; do
    run_left "fwd$1_s$ab" 40 env DETFUSE_FWD_SNAKE=$ab "$DF" bench attention --shape "$2" --causal --variant "$f" --repeats 3
  done
  case $1 in 64c|128g) continue ;; esac
  v=$KV; case $1 in *g) v=$HS2 ;; esac
  for ab in 0 1 1 0; do
    run_left "kv$1_l$ab" 40 env DETFUSE_KV_LPT=$ab "$DF" bench attention --shape "$2" --causal --variant "$v" --repeats 3
  done
done
{
  cat "$OUT/gpu.txt"
  test_report tests_new tests_lpt tests_cpu
  grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log 2>/dev/null
  for f in "$OUT"/fwd*.log "$OUT"/kv*.log; do
    echo "$(basename "$f" .log) $(grep -hE "^attention\." "$f" | tr -s ' ' | cut -d' ' -f2-9)"
  done
  for f in "$OUT"/ncu*.log; do echo "=== $(basename "$f")"; grep -E "gpu__time|sm__cycles_active|lts__t_sector|dram__bytes" "$f" | tr -s ' '; done
  cat "$SUMMARY"
} > "$OUT/report.txt"
cat "$OUT/report.txt"
