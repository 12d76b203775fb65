#!/usr/bin/env bash
# Session 16: detfuse's attention beside FlashAttention-4 deterministic in one process (as
# s15-peers.sh), on a warm machine after experiments/device/s16.sh (./build there):
#   call 1, carry [".peers/a"]: bash experiments/peers/install.sh stage
#   call 2, carry [".peers/b"]: this script. The issue's seven rows, detfuse's heuristic
#   (and ATTN_V, default: the d64 forward br192 with pb1's backward) beside FA4 deterministic,
#   6 repeats apart, 8 passes interleaved in shuffled order, dQ / dK digests over 3 runs; then
#   (NCU=1, default) every kernel of one FA4 deterministic fwd+bwd and of detfuse's at
#   4,32,32,4096,128 causal under ncu (durations: where FA4's backward time goes against ours).
set -uo pipefail
export OUT=$(cd "${OUT:-out}" 2>/dev/null && pwd || (mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd))
bash experiments/peers/install.sh stage install > "$OUT/peers_install.log" 2>&1 || { tail -20 "$OUT/peers_install.log"; exit 1; }
source "$(dirname "$0")/lib.sh"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so  # PYTHONPATH: lib.sh (the peers site and ./python)
W=attention.bf16.wgmma
ATTN_V=${ATTN_V:---variant $W.fwd.br192_bc128_st3_ov1_pp0_ps1_rd1_d64+$W.ordered.br128_bc128_st2_tma1_pds3_ew2_pb1_spt1_d64}
gpu_line "$OUT/gpu.txt"
run attention_peers 400 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
  --rows ${ATTN_ROWS:-issue} $ATTN_V --impl detfuse --impl fa4-det --reps 6 --warmup 2 --digest-runs 3 --interleave 8
gpu_line "$OUT/gpu.txt"
if [ "${NCU:-1}" = 1 ]; then
  for impl in fa4-det detfuse; do
    run "ncu_$impl" 90 ncu --clock-control none --section SpeedOfLight --launch-count 40 python3 \
      experiments/attention_peers.py --rows 4,32,32,4096,128,1 --impl "$impl" --reps 1 --warmup 0 --digest-runs 1 \
      --interleave 0
    grep -E "^  [a-zA-Z_].*\(|Duration" "$OUT/ncu_$impl.log" | paste - - | awk '{print $NF, $0}' | cut -c1-160 \
      > "$OUT/ncu_${impl}_durations.txt"
  done
fi
tail -40 "$OUT/attention_peers.log"
for impl in fa4-det detfuse; do echo "=== $impl"; cat "$OUT/ncu_${impl}_durations.txt" 2>/dev/null | head -40; done
