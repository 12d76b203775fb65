#!/usr/bin/env bash
# Do the peers import and run on the H200? One short device call (< 2 min once
# installed): the import check of experiments/peers/install.sh, then
# experiments/peers/smoke.py (FlashAttention-4 deterministic and not, Liger CuTe
# and Triton FLCE, QuACK, Cut CE: one small shape each, errors against float32,
# same gradient bits over 3 calls). Needs the peers installed on this machine,
# in the same call or an earlier call on the same (warm) machine:
#   call 1, carry [".peers/a"]:  bash experiments/peers/install.sh stage
#   call 2, carry [".peers/b"]:  bash experiments/peers/install.sh stage install && bash experiments/device/s6-peers.sh
# (.peers from `bash experiments/peers/fetch.sh` here). Needs no detfuse build.
# Output: $OUT/peers_smoke.log and $OUT/peers_smoke.json; the table is printed last.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
SITE=${PEERS_SITE:-/tmp/peers/site-packages}
if [ ! -d "$SITE" ]; then
  echo "s6-peers.sh: $SITE missing: run experiments/peers/install.sh stage install on this machine first" >&2
  exit 1
fi
python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PYTHONUNBUFFERED=1 timeout -k 10 150 python3 experiments/peers/smoke.py --json "$OUT/peers_smoke.json" \
  > "$OUT/peers_smoke.log" 2>&1
rc=$?
grep -vE '^\|' "$OUT/peers_smoke.log" | grep -E '^(#|[a-z0-9-]+: )' || true
echo "=== smoke.py exit $rc (0: every peer ran and matched float32; 1: see the table; 124: cut at 150 s)"
grep -E '^\|' "$OUT/peers_smoke.log" || tail -30 "$OUT/peers_smoke.log"
