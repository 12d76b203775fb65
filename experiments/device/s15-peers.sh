#!/usr/bin/env bash
# Session 15: detfuse's attention beside FlashAttention-4 deterministic, one process,
# on a warm machine right after s15-final.sh (./build there) and
#   call 1, carry [".peers/a"]: bash experiments/peers/install.sh stage
# this call carrying [".peers/b"]: the peers installed, then attention_peers.py on the
# issue's seven rows (the five of its table, d128 GQA non-causal, 2,32,8,8192,128
# causal): detfuse's heuristic (and ATTN_V="--variant NAME ..." if set) and FA4
# deterministic, 6 repeats apart and 8 passes interleaved in shuffled order, dQ / dK
# digests over 3 runs.
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
bash experiments/peers/install.sh stage install > "$OUT/peers_install.log" 2>&1 || { tail -20 "$OUT/peers_install.log"; exit 1; }
source "$(dirname "$0")/lib.sh"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so  # PYTHONPATH: lib.sh (the peers site and ./python)
gpu_line "$OUT/gpu.txt"
run attention_peers 480 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
  --rows ${ATTN_ROWS:-issue} ${ATTN_V:-} --impl detfuse --impl fa4-det --reps 6 --warmup 2 --digest-runs 3 --interleave 8
gpu_line "$OUT/gpu.txt"
tail -40 "$OUT/attention_peers.log"
