#!/usr/bin/env bash
# Packs the Release binaries a device call needs into dist/ (git-ignored):
# stripped, then compressed into dist/bin.tar.xz (the device tool carries at
# most 64 MiB; the binaries are about 100 MB uncompressed). device_run.sh
# unpacks it on the device. Extra binaries (paths under the build folder) may
# follow as arguments.
set -euo pipefail
B=${BUILD:-build}
rm -rf dist && mkdir -p dist/bin
# DIST_ONLY="path ..." packs just those (the carry limit is 64 MiB in all).
for f in ${DIST_ONLY:-tests/common/test_gpu_smoke tests/engines/test_engines tests/flce/test_flce_gpu \
         tests/flce/test_flce_variants experiments/flce_probe detfuse \
         tests/engines/test_engines_wgmma experiments/wgmma_probe \
         tests/tuner_gpu/test_tuner_gpu tests/tuner_gpu/test_tuner_supervised_gpu \
         tests/attention/test_attention_gpu tests/attention/test_attention_variants \
         tests/attention_wgmma/test_attention_wgmma experiments/attention_wgmma_probe \
         tests/study/test_study_spread_gpu tests/capi/test_capi_gpu capi/libdetfuse_c.so} "$@"; do
  if [ -f "$B/$f" ]; then cp "$B/$f" dist/bin/; else echo "make_dist: $B/$f not built, skipped" >&2; fi
done
strip --strip-unneeded dist/bin/* 2>/dev/null || true
tar -C dist -cf - bin | xz -6 -T2 > dist/bin.tar.xz
rm -rf dist/bin
cp experiments/device_run.sh dist/
du -sh dist
