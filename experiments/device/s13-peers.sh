#!/usr/bin/env bash
# Issues 16 and 17 beside their peers, session 13: as s9-peers-measure.sh, but every
# peer script also times its peers interleaved (measure.py's time_interleaved: one call
# of each per pass, the order rotated per pass in this session's runs; measure.py shuffles
# it per pass since), and nvidia-smi logs the SM clock,
# power and the clock-event reasons every 200 ms meanwhile ($OUT/smi.csv; summary per
# script at the end), to test session 12's reading that the per-call spread is the
# GPU's clocks under sustained load. Run after experiments/peers/install.sh (stage,
# then stage install) on the same machine, with ./build. ONLY=flce or ONLY=attention.
#   FLCE: experiments/flce_host_time.py --layers (the forward's host time layer by
#     layer), then flce_peers.py at the issue's three shapes (ROUNDS rounds, then
#     --interleave 10 passes) over the three GEMMs, Liger's CuTe FLCE, detfuse's
#     default and the main_grad variant $FLCE_MG; FLCE_EXTRA adds options.
#   attention: attention_peers.py on the issue's seven rows (the five of its table,
#     d128 GQA non-causal, 2,32,8,8192,128 causal): detfuse's heuristic, FA4
#     deterministic and not, each row also interleaved.
set -u
source "$(dirname "$0")/lib.sh"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so
gpu_line "$OUT/gpu.txt"
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }
R=clocks_event_reasons.active
nvidia-smi --query-gpu=$R --format=csv > /dev/null 2>&1 || R=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$R \
  --format=csv,noheader -lms 200 > "$OUT/smi.csv" 2>&1 &
SMI=$!
stamp() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $1" >> "$OUT/phases.txt"; }
MG=${FLCE_MG:-flce.bf16.wgmmalt.owning.bm256_bn128_bk64_c12_st4_pp0_ot1_ex16_mb1024}
if want flce; then
  stamp "flce_host_time start"
  run flce_host_time 120 python3 experiments/flce_host_time.py --layers --reps 20 --json "$OUT/flce_host_time.json" \
    --peers detfuse:heuristic,detfuse-mg:$MG,liger-cute
  stamp "flce_peers start"
  # Besides the default and $MG: the other ot1 wgmmalt variants of this build (FLCE_VARIANTS
  # overrides), and the default through the custom op (--op-path), all interleaved.
  VARS=${FLCE_VARIANTS:-$(build/detfuse list 2>/dev/null | grep -o "flce\.bf16\.wgmmalt\.owning\.[a-z0-9_]*ot1[a-z0-9_]*mb1024" \
    | sort -u | grep -v "^$MG\$" | head -3 | tr "\n" " ")}
  echo "flce variants besides the default: $VARS"
  run flce_peers 480 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" \
    --budget-s ${FLCE_BUDGET:-380} --rounds ${ROUNDS:-1} --interleave ${ILV:-20} --profile --op-path --sync-free \
    --reps 5 --peers 3gemm,liger-cute,detfuse --variant $VARS --main-grad-variant $MG ${FLCE_EXTRA:-} \
    --shapes 16384,4096,128256 8192,2304,256000 4096,4096,128256
  stamp "flce end"
fi
if want attention; then
  stamp "attention_peers start"
  run attention_peers 540 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
    --rows issue ${ATTN_V:-} --impl detfuse --impl fa4-det --impl fa4 --reps 8 --warmup 3 --digest-runs 3
  stamp "attention end"
fi
kill $SMI 2>/dev/null; wait $SMI 2>/dev/null
python3 experiments/smi_summary.py "$OUT/smi.csv" "$OUT/phases.txt" > "$OUT/smi_summary.txt" 2>&1
want flce && echo "--- flce host layers" && grep -h "by layer\|host ms fwd" "$OUT/flce_host_time.log" | cut -c1-500 \
  && echo "--- flce (ms)" && grep -h "interleaved" "$OUT/flce_peers.log" | cut -c1-700 \
  && sed -n '/^ms: the interleaved/,/^JSON/p' "$OUT/flce_peers.log" | head -40
want attention && echo "--- attention (TFLOP/s)" && grep -h "interleaved" "$OUT/attention_peers.log" \
  && sed -n '/^ilv: /,$p' "$OUT/attention_peers.log" | head -40
cat "$OUT/smi_summary.txt"
cat "$SUMMARY"
