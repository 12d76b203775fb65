#!/usr/bin/env bash
# Peers beside detfuse in one device call (experiments/peers/README.md): run
# after `experiments/peers/install.sh stage install` on the same machine, with
# the binaries of experiments/make_dist.sh in dist/ (detfuse, libdetfuse_c.so).
#   bash experiments/device/peers.sh attention|flce ...
# Output under $OUT: attention_peers.jsonl/.log, flce_peers.json/.log, bench logs.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
if [ -f dist/bin.tar.xz ] && [ ! -d dist/bin ]; then tar -C dist -xJf dist/bin.tar.xz; fi
D=$PWD/dist/bin
cp "$D/libdetfuse_c.so" python/detfuse/libdetfuse_c.so
export PYTHONPATH=/tmp/peers-site:$PWD/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
W=attention.bf16.wgmma
for what in "$@"; do
  case $what in
    attention)
      # detfuse through Python (heuristic + the fastest deterministic single-pass form) and the command,
      # FA4 deterministic and not, cuDNN and FA2 SDPA, on the seven rows.
      timeout -k 10 420 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
        --variant $W.ordered.br64_bc128_st2_tma1_d128 ${ATTN_ARGS:-} 2>&1 | tee "$OUT/attention_peers.log" | tail -60
      for row in "4,32,32,4096,4096,128" "4,32,32,4096,4096,128 --causal" "4,32,8,4096,4096,128 --causal" \
                 "4,32,32,4096,4096,64 --causal" "1,16,16,8192,8192,128 --causal"; do
        timeout -k 10 120 "$D/detfuse" bench attention --shape $row --repeats 3 >> "$OUT/attention_bench.log" 2>&1
      done
      grep -E "TFLOP|variant" "$OUT/attention_bench.log" | tail -20 ;;
    flce)
      timeout -k 10 420 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" ${FLCE_ARGS:-} 2>&1 \
        | tee "$OUT/flce_peers.log" | tail -40 ;;
    *) echo "peers.sh: unknown part $what (attention, flce)" >&2; exit 2 ;;
  esac
done
