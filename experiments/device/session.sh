#!/usr/bin/env bash
# One device call over several stages, from the repo root on the GPU machine,
# with dist/build.tar.xz from experiments/device/pack.sh carried:
#   bash experiments/device/session.sh STAGE ...
# Stages: any script NAME.sh beside this one (attnfeat, flcefast, contention, frontdoor,
# pyhf, a branch's own script: each under 4 minutes), peers-attention, flcefast-peers (after
# experiments/peers/install.sh on the same machine), gpu-tests (the other GPU
# suites, filtered). Every stage writes its logs under /tmp/o/STAGE; the call
# returns them as one archive, $OUT/logs-STAGES.tgz (the device tool returns at
# most 8 files), and prints each stage's summary.
set -u
source "$(dirname "$0")/lib.sh"
[ -d /tmp/peers-site ] && export PYTHONPATH=/tmp/peers-site:/tmp/peers-site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
cp build/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
git log --oneline -1 2>/dev/null || true
stage() {  # stage NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  local start=$SECONDS
  mkdir -p "/tmp/o/$name"
  echo "===== $name: $*"
  OUT=/tmp/o/$name timeout -s INT -k 15 "$t" "$@" > "/tmp/o/$name/stdout.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-25}" "/tmp/o/$name/stdout.log"
  echo "===== $name: exit $rc after $((SECONDS - start)) s"
}
for s in "$@"; do
  case $s in
    attnfeat|flcefast|contention|pyhf|frontdoor) stage "$s" 330 bash "experiments/device/$s.sh" ;;
    flcefast-peers) stage "$s" 300 bash experiments/device/flcefast.sh --peers-only ;;
    peers-attention) stage "$s" 420 bash experiments/device/peers.sh attention ;;
    gpu-tests)
      stage "$s" 300 bash -c '
        set -u; r() { echo "=== $*"; timeout -s INT -k 10 "$@"; echo "=== exit $?"; }
        r 30 build/tests/common/test_gpu_smoke
        r 120 build/tests/engines/test_engines
        r 120 build/tests/engines/test_engines_wgmma
        r 60 build/tests/capi/test_capi_gpu
        r 120 build/tests/tuner_gpu/test_tuner_gpu
        r 60 build/tests/tuner_gpu/test_tuner_supervised_gpu
        r 150 build/tests/flce/test_flce_gpu --gtest_filter="*mma_owning*mb1024*:*wgmma_owning_bm128_bn256*mb1024*:*atomic*sk4*:*partials*sk4*:*_sk0*:FlceBadInput*"
      ' ;;
    *)
      if [ -f "experiments/device/$s.sh" ]; then stage "$s" 330 bash "experiments/device/$s.sh"
      else echo "session.sh: unknown stage $s"; fi ;;
  esac
done
tar -C /tmp/o -czf "$OUT/logs-$(echo "$*" | tr ' ' '_').tgz" . && ls -la "$OUT"
