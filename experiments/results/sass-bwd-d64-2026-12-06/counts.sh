#!/usr/bin/env bash
# Reproduces counts.txt from the listings (README.md "Commands" makes them). Address ranges belong to these
# exact builds: FA=FA4 4.0.0b36 deterministic d64 causal backward (DSL cubin), O=our ordered pb5 kv kernel,
# P6=our ordered pb6 kv kernel (both extracted from their TU's listing by extract_fn.py).
set -u
H=$(cd "$(dirname "$0")" && pwd)
FA=${FA:-/tmp/fa4_sass/out/fa4_bwd_d64_det.sass}
O=${O:-/tmp/bwdsass/ours_kv.sass}
P6=${P6:-/tmp/bwdsass/ours_pb6.sass}
m() { python3 "$H/mix.py" "$@"; }
echo "### whole step paths (fast path: every mbarrier try succeeds first time, no softcap)"
m $FA "FA4 step (one loop; its causal mask runs in every step)" 2c10-5930 -x 2c50-2c60 2e80-2e90
m $O "pb5 unmasked step" 1cd0-2130 3560-3640 48f0-4a00 8800-aa50
m $O "pb5 masked (diagonal) step" 1cd0-2130 3560-48e0 48f0-4a00 8800-aa50
m $P6 "pb6 unmasked step" 1d10-2170 35a0-3680 4930-50a0 8a40-a650
echo "### the step cut at its waits and barriers"
echo "-- FA4"; python3 "$H/segments.py" $FA 2c10-5930 -x 2c50-2c60 2e80-2e90
echo "-- pb5"; python3 "$H/segments.py" $O 1cd0-2130 3560-3640 48f0-4a00 8800-aa50
echo "-- pb6"; python3 "$H/segments.py" $P6 1d10-2170 35a0-3680 4930-50a0 8a40-a650
echo "### phases"
m $FA "FA4 loop top -> S wait" 2c10-3250 -x 2c50-2c60 2e80-2e90
m $O "pb5 loop top -> S wait" 1cd0-2120
m $FA "FA4 S ready -> dP wait" 3260-41d0
m $O "pb5 S ready -> dP wait" 2130-2130 3560-3640 48f0-49e0
m $P6 "pb6 S ready -> dP wait" 2170-2170 35a0-3680 4930-5030
m $FA "FA4 dP wait -> last dV HGMMA" 41e0-54a0
m $O "pb5 dP wait -> last dV HGMMA" 49f0-4a00 8800-a400
m $P6 "pb6 dP wait -> last dV HGMMA" 5040-50a0 8a40-a000
m $FA "FA4 dS barrier .. step end" 54b0-5930
m $O "pb5 dS barrier .. step end" a410-aa50
m $FA "FA4 dQ hand-off (empty barrier .. full arrive)" 5840-58f0
m $O "pb5 dQ hand-off (empty barrier .. full arrive)" a8a0-a9e0
echo "### masking"
m $O "pb5 mask block (diagonal step only)" 3650-48e0
m $O "pb5 need_mask test (every step)" 3560-3640
m $O "pb5 softcap blocks (skipped without softcap)" 2140-3550 4a10-87f0
echo "### outside the step loop"
m $FA "FA4 kernel head, all threads (to BAR.SYNC 0)" 0000-0490
m $O "pb5 kernel head, all threads (to BAR.SYNC 0; thread 0's walk set-up included)" 0000-1370
m $FA "FA4 consumer prologue (setmaxnreg .. loop)" 1da0-2c00
m $O "pb5 consumer prologue (setmaxnreg .. loop; CS2R zeroing of dV, dK)" 1380-1cc0
m $FA "FA4 consumer epilogue (dK scale, 8 STSM, 2 TMA stores)" 5940-6250
m $O "pb5 consumer epilogue (dK scale, 32 STG.E)" aa70-b490
m $FA "FA4 producer (warp 0) tile head + first Q/dO/LSE/dPsum" 04b0-0f70
m $FA "FA4 producer per-step loop (Q, dO TMA + LSE, dPsum bulk copies)" 0f80-12e0
m $O "pb5 producer + LSE/D thread (static, both loops)" bea0-cd90
m $O "pb5 LSE/D thread (64) per-step loop" c170-c4c0
m $O "pb5 Q/dO producer (thread 0) per-step loop" c8f0-cd20
m $FA "FA4 dQ writer (warp 1) head" 1310-1910
m $FA "FA4 dQ writer per-step loop" 1920-1d90
m $O "pb5 dQ writer set-up" b4a0-b750
m $O "pb5 dQ writer per-step loop (lane 0's path)" b760-be30
echo "### grid tail (model)"
python3 "$H/tail.py"
