#!/usr/bin/env bash
# Peers beside detfuse in one device call (experiments/peers/README.md): run
# after `experiments/peers/install.sh stage install` on the same machine, with
# the Release build in ./build (experiments/device/pack.sh carries it).
#   bash experiments/device/peers.sh attention
# Output under $OUT: attention_peers.jsonl/.log, attention_bench.log.
set -u
source "$(dirname "$0")/lib.sh"
D=$PWD/build
cp "$D/capi/libdetfuse_c.so" python/detfuse/libdetfuse_c.so
export PYTHONPATH=/tmp/peers-site:/tmp/peers-site/nvidia_cutlass_dsl/dsl_packages:$PWD/python${PYTHONPATH:+:$PYTHONPATH}
W=attention.bf16.wgmma
for what in "$@"; do
  case $what in
    attention)
      # detfuse through Python (heuristic + the fastest deterministic single-pass form) and the command,
      # FA4 deterministic and not, cuDNN and FA2 SDPA, on the issue's seven rows.
      timeout -k 10 420 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
        --variant $W.ordered.br64_bc128_st2_tma1_d128 ${ATTN_ARGS:-} 2>&1 | tee "$OUT/attention_peers.log" | tail -60
      # The command on the same rows (same device call): the heuristic's owning variant and ordered tma1.
      for row in "4,32,32,4096,4096,128" "4,32,32,4096,4096,128 --causal" "4,32,8,4096,4096,128 --causal" \
                 "4,32,32,4096,4096,64 --causal" "1,16,16,8192,8192,128 --causal"; do
        case $row in
          *,64*) vs="--variant $W.owning.br64_bc128_st2_qbc128_qst2_d64 --variant $W.ordered.br64_bc128_st2_tma1_d64" ;;
          *) vs="--variant $W.owning.br64_bc128_st2_qbc64_qst2_d128 --variant $W.ordered.br64_bc128_st2_tma1_d128" ;;
        esac
        timeout -k 10 120 "$D/detfuse" bench attention --shape $row $vs --repeats 3 >> "$OUT/attention_bench.log" 2>&1
      done
      grep -E "TFLOP|variant" "$OUT/attention_bench.log" | tail -20 ;;
    *) echo "peers.sh: unknown part $what (attention; FLCE: experiments/device/flcefast.sh --peers-only)" >&2; exit 2 ;;
  esac
done
