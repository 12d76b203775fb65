#!/usr/bin/env bash
# Issues 16 and 17 beside their peers, in one device call (< 9 min), after
# experiments/peers/install.sh (stage, then stage install) on the same machine,
# with the Release build in ./build (or dist/build.tar.xz):
#   1. attention: experiments/attention_peers.py on the issue's five rows —
#      detfuse (the heuristic; the pds ordered variants; the owning ones),
#      FlashAttention-4 deterministic and not, cuDNN and FA2 SDPA — forward and
#      forward+backward TFLOP/s, dQ digests over 3 runs, peak memory;
#   2. FLCE: experiments/flce_peers.py at the issue's three shapes — the three
#      cuBLAS GEMMs, detfuse (ex16 wgmma owning and cuBLASLt owning), Liger CuTe
#      and Triton, QuACK, torch.compile chunked, Cut CE — ms, extra memory, dW
#      digests, errors.
# Output: $OUT/attention_peers.{log,jsonl}, $OUT/flce_peers.{log,json}.
set -u
source "$(dirname "$0")/lib.sh"
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
gpu_line "$OUT/gpu.txt"
W=attention.bf16.wgmma
run attention_peers 300 python3 experiments/attention_peers.py --json "$OUT/attention_peers.jsonl" \
  --rows 4,32,32,4096,128,0 4,32,32,4096,128,1 4,32,8,4096,128,1 4,32,32,4096,64,1 1,16,16,8192,128,1 \
  --variant $W.ordered.br64_bc128_st2_tma1_pds1_d128 --variant $W.ordered.br64_bc128_st2_tma1_pds1_d64 \
  --variant $W.owning.br64_bc128_st3_qbc64_qst3_d128 --reps 10 --warmup 3 --digest-runs 3
F=flce.bf16
run flce_peers 260 python3 experiments/flce_peers.py --json "$OUT/flce_peers.json" --budget-s 220 --reps 5 \
  --shapes 16384,4096,128256 8192,2304,256000 4096,4096,128256 --quack-untuned \
  --variant $F.wgmma.owning.bm128_bn256_bk64_c2_st4_pp0_ex16_mb1024 \
            $F.wgmma.owning.bm128_bn128_bk64_c2_st6_pp1_ex16_mb1024 $F.cublaslt.owning.mb2000
echo "--- attention (TFLOP/s)"; sed -n '/^| B,H,Hkv/,$p' "$OUT/attention_peers.log" | head -60
echo "--- flce (ms)"; sed -n '/^| N,D,V/,/^JSON/p' "$OUT/flce_peers.log" | head -60
cat "$SUMMARY"
