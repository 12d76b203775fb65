#!/usr/bin/env bash
# Copies the Release binaries a device call needs into dist/ (git-ignored),
# stripped of symbols to stay well under the 64 MiB the device tool carries.
set -euo pipefail
B=${1:-build}
mkdir -p dist
for f in tests/common/test_gpu_smoke tests/engines/test_engines tests/flce/test_flce_gpu \
         tests/flce/test_flce_variants experiments/flce_probe detfuse; do
  cp "$B/$f" dist/
done
strip --strip-unneeded dist/* 2>/dev/null || true
cp experiments/device_run.sh dist/
du -sh dist
