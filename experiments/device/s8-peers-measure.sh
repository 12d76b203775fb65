#!/usr/bin/env bash
# Issues 16 and 17 beside their peers, session 8, in one device call, after
# experiments/peers/install.sh (stage, then stage install) on the same machine,
# with ./build. ONLY=flce or ONLY=attention runs one half.
#   FLCE: experiments/flce_peers.py at the issue's three shapes, 3 rounds over
#     all peers in turn (clock drift falls on all alike): the three cuBLAS GEMMs,
#     Liger's CuTe FLCE, detfuse's default (the heuristic: the hybrid wgmmalt
#     ping-pong mb1024 on an H200, bf16 gradients) and, with main_grad=, the
#     hybrid variants at mb1024 and mb1920 (2x1 and, where built, 2x2 clusters).
#   attention: experiments/attention_peers.py on rows 1, 2 and 4 (the forward
#     bar is on rows 1-2; row 4, d64 causal, is the worst backward row):
#     detfuse's heuristic, the new forward (rd1/ot1) and d64 backward variants,
#     FlashAttention-4 deterministic and not.
set -u
source "$(dirname "$0")/lib.sh"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
gpu_line "$OUT/gpu.txt"
build/detfuse list > "$OUT/list.txt" 2>&1
pick() { awk '{print $1}' "$OUT/list.txt" | grep -E "$1" | head -n "${2:-8}" | paste -sd' ' -; }
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }
MG="$(pick '^flce\.bf16\.wgmmalt\.owning\..*pp1.*_ex16_mb(1024|1920)$' 4)"
echo "main_grad variants: $MG"
want flce && run flce_peers 560 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" --budget-s ${FLCE_BUDGET:-520} --rounds ${ROUNDS:-3} ${FLCE_EXTRA:-} \
  --reps 5 --peers 3gemm,liger-cute,detfuse --variant --main-grad-variant $MG \
  --shapes 16384,4096,128256 8192,2304,256000 4096,4096,128256
W=attention.bf16.wgmma
F128=$(pick "^$W\.fwd\..*bc160.*rd1_ot1_d128$" 1); F128b=$(pick "^$W\.fwd\.br128_bc128_st2_ov1_pp0_ps1_rd1_ot1_d128$" 1)
B64=$(pick "^$W\.ordered\..*pds3.*_d64$" 1); F64=$(pick "^$W\.fwd\..*ps1_rd1_ot1_d64$" 1)
P128=$(pick "^$W\.ordered\..*pds2_d128$" 1)
AV=""
for f in $F128 $F128b; do [ -n "$P128" ] && AV="$AV --variant $f+$P128"; done
[ -n "$B64" ] && AV="$AV --variant $B64"
[ -n "$B64" ] && [ -n "$F64" ] && AV="$AV --variant $F64+$B64"
echo "attention variants: $AV"
want attention && run attention_peers 400 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
  --rows 4,32,32,4096,128,0 4,32,32,4096,128,1 4,32,32,4096,64,1 $AV --impl detfuse --impl fa4-det --impl fa4 \
  --reps 8 --warmup 3 --digest-runs 3
want flce && echo "--- flce (ms)" && sed -n '/^| N,D,V/,/^JSON/p' "$OUT/flce_peers.log" | head -60
want attention && echo "--- attention (TFLOP/s)" && sed -n '/^| B,H,Hkv/,$p' "$OUT/attention_peers.log" | head -40
cat "$SUMMARY"
