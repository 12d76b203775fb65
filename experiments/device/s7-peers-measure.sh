#!/usr/bin/env bash
# Issues 16 and 17 beside their peers, session 7, in one device call (< 9 min),
# after experiments/peers/install.sh (stage, then stage install) on the same
# machine, with ./build:
#   1. attention: experiments/attention_peers.py on the issue's five rows:
#      detfuse's heuristic, the pds2 and pds1 ordered variants, the owning one;
#      FlashAttention-4 deterministic and not, cuDNN and FA2 SDPA;
#   2. FLCE: experiments/flce_peers.py at the issue's three shapes: the three
#      cuBLAS GEMMs, detfuse (the hybrid wgmmalt owning variants, ex16, cuBLASLt;
#      and with main_grad=, the fp32 main grad of Megatron-style training),
#      Liger CuTe and Triton, QuACK, torch.compile chunked, Cut CE.
# The new variants are taken from `detfuse list` by their tokens, so this
# script names no variant that the build lacks. ONLY=attention or ONLY=flce
# runs one half (each fits a call; both together do not).
set -u
source "$(dirname "$0")/lib.sh"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
gpu_line "$OUT/gpu.txt"
W=attention.bf16.wgmma
build/detfuse list > "$OUT/list.txt" 2>&1
pick() { awk '{print $1}' "$OUT/list.txt" | grep -E "$1" | head -n "${2:-8}" | paste -sd' ' -; }
# pds2 ordered backward (d128, d64), alone (the overlapped forward) and behind
# the persistent forward (ps1, two Q buffers): FWD+BWD names (attention_peers.py).
P128=$(pick "^$W\.ordered\..*pds2_d128$" 1); P64=$(pick "^$W\.ordered\..*pds2_d64$" 1)
F128=$(pick "^$W\.fwd\..*_ov1_pp0_ps1_qs2_d128$" 1); F64=$(pick "^$W\.fwd\..*_ps1_qs2_d64$" 1)
AV="$P128 $P64"
[ -n "$F128" ] && [ -n "$P128" ] && AV="$AV $F128+$P128"
[ -n "$F64" ] && [ -n "$P64" ] && AV="$AV $F64+$P64"
FV="$(pick '^flce\.bf16\.wgmmalt\.owning\.' 3) flce.bf16.wgmma.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024 flce.bf16.cublaslt.owning.mb2000"
MG="$(pick '^flce\.bf16\.wgmmalt\.owning\.' 1) flce.bf16.cublaslt.owning.mb1024"
echo "attention variants: $AV"; echo "flce variants: $FV"; echo "main_grad variants: $MG"
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }  # ONLY=attention or ONLY=flce: one half per call
want attention && run attention_peers 300 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
  --rows 4,32,32,4096,128,0 4,32,32,4096,128,1 4,32,8,4096,128,1 4,32,32,4096,64,1 1,16,16,8192,128,1 \
  $(for v in $AV; do echo --variant $v; done) --reps 8 --warmup 3 --digest-runs 3
# Liger CuTe right after the GEMMs (the bar); Cut CE left out (not deterministic, 4x slower: last session's log).
want flce && run flce_peers 420 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" --budget-s 380 --reps 5 \
  --peers 3gemm,liger-cute,detfuse,quack,compile8 --shapes 16384,4096,128256 8192,2304,256000 4096,4096,128256 --quack-untuned --variant $FV --main-grad-variant $MG
want attention && echo "--- attention (TFLOP/s)" && sed -n '/^| B,H,Hkv/,$p' "$OUT/attention_peers.log" | head -70
want flce && echo "--- flce (ms)" && sed -n '/^| N,D,V/,/^JSON/p' "$OUT/flce_peers.log" | head -70
cat "$SUMMARY"
