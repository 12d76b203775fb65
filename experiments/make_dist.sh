#!/usr/bin/env bash
# Copies the Release binaries a device call needs into dist/ (git-ignored),
# stripped of symbols to stay well under the 64 MiB the device tool carries.
# Extra binaries (paths under the build folder) may follow as arguments.
set -euo pipefail
B=${BUILD:-build}
mkdir -p dist
for f in tests/common/test_gpu_smoke tests/engines/test_engines tests/flce/test_flce_gpu \
         tests/flce/test_flce_variants experiments/flce_probe detfuse \
         tests/engines/test_engines_wgmma experiments/wgmma_probe "$@"; do
  [ -f "$B/$f" ] && cp "$B/$f" dist/ || echo "make_dist: $B/$f not built, skipped" >&2
done
strip --strip-unneeded dist/* 2>/dev/null || true
cp experiments/device_run.sh dist/
du -sh dist
