#!/usr/bin/env bash
# Issues 16 and 17 beside their peers, session 9, in one device call after
# experiments/peers/install.sh (stage, then stage install) on the same machine,
# with ./build (or dist/build.tar.xz). ONLY=flce or ONLY=attention runs one half.
#   FLCE: experiments/flce_peers.py at the issue's three shapes, ROUNDS rounds
#     (default 2) over the three cuBLAS GEMMs, Liger's CuTe FLCE, detfuse's
#     default and the main_grad variants in $FLCE_MG (default: the hybrid
#     ping-pong c2 and c22 mb1024), then one profiled step of each (--profile:
#     every kernel's GPU ms, so where Liger's time goes beside ours is on record);
#     FLCE_EXTRA adds flce_peers options (e.g. --host-hidden-ms 10).
#   attention: experiments/attention_peers.py on the issue's five rows: detfuse's
#     heuristic (eager Python path), the forward+backward pairs in $ATTN_V
#     (" --variant fwd+bwd ..."), FlashAttention-4 deterministic and not; then both
#     forward kernels under ncu at the base clock (experiments/attention_fwd_clock.py).
set -u
source "$(dirname "$0")/lib.sh"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
export DETFUSE_LIB=$PWD/build/capi/libdetfuse_c.so
gpu_line "$OUT/gpu.txt"
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }
L=flce.bf16.wgmmalt.owning.bm128_bn128_bk64
MG=${FLCE_MG:-$L\_c2_st6_pp1_ex16_mb1024 $L\_c22_st6_pp1_ex16_mb1024}
want flce && run flce_peers 400 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" \
  --budget-s ${FLCE_BUDGET:-300} --rounds ${ROUNDS:-2} --profile \
  --reps 5 --peers 3gemm,liger-cute,detfuse --variant --main-grad-variant $MG ${FLCE_EXTRA:-} \
  --shapes 16384,4096,128256 8192,2304,256000 4096,4096,128256
want attention && run attention_peers 400 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
  --rows 4,32,32,4096,128,0 4,32,32,4096,128,1 4,32,8,4096,128,1 4,32,32,4096,64,1 1,16,16,8192,128,1 \
  ${ATTN_V:-} --impl detfuse --impl fa4-det --impl fa4 --reps 8 --warmup 3 --digest-runs 3
# The two forward kernels at one locked clock (ncu --clock-control base): kernel speed per clock,
# apart from host time and the clocks each sustains under load.
want attention && run fwd_clock 240 ncu --clock-control base --nvtx --nvtx-include "regex:measure.*/" \
  --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed \
  python3 experiments/attention_fwd_clock.py 4,32,32,4096,128,0 4,32,32,4096,128,1
want flce && echo "--- flce (ms)" && sed -n '/^| N,D,V/,/^JSON/p' "$OUT/flce_peers.log" | head -60 \
  && grep -hE "kernels \(ms\)|timeline \(ms\)|host hidden" "$OUT/flce_peers.log" | cut -c1-700
want attention && echo "--- attention (TFLOP/s)" && sed -n '/^| B,H,Hkv/,$p' "$OUT/attention_peers.log" | head -40 \
  && echo "--- forward kernels at the base clock" && grep -E "measure|^  [a-zA-Z_].*\(|gpu__time|sm__cycles|inst_executed|sm__throughput" "$OUT/fwd_clock.log" | cut -c1-160 | head -40
cat "$SUMMARY"
