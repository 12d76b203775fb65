#!/usr/bin/env bash
# Packs the Release binaries the experiments/device/*.sh scripts run into
# dist/build.tar.xz (git-ignored), stripped, under their build-folder paths, so
# that on the GPU machine `tar -xJf dist/build.tar.xz` recreates ./build/... as
# the scripts expect (a device call carries at most 64 MiB in all; the build
# folder itself is gigabytes of objects). More paths under build/ may follow.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for f in ${PACK_ONLY:-detfuse capi/libdetfuse_c.so tests/common/test_gpu_smoke tests/engines/test_engines \
         tests/engines/test_engines_wgmma tests/flce/test_flce_gpu tests/flce/test_flce_variants \
         tests/attention/test_attention_gpu tests/attention/test_attention_variants \
         tests/attention_wgmma/test_attention_wgmma tests/study/test_study_spread_gpu tests/capi/test_capi_gpu \
         tests/tuner_gpu/test_tuner_gpu tests/tuner_gpu/test_tuner_supervised_gpu tests/common/test_common \
         experiments/gemm_f32_probe} "$@"; do
  if [ -f "$B/$f" ]; then
    mkdir -p "$stage/build/$(dirname "$f")" && cp "$B/$f" "$stage/build/$f"
  else
    echo "pack.sh: $B/$f not built, left out" >&2
  fi
done
find "$stage" -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
mkdir -p dist
# One large dictionary: every binary links the same kernels, so the second and
# later copies of their fatbins compress to almost nothing.
# PACK_XZ: other xz options (e.g. -0 on a busy machine: faster, larger).
tar -C "$stage" -cf - build | xz ${PACK_XZ:--T1 --lzma2=preset=2,dict=256MiB} > dist/build.tar.xz
du -sh dist/build.tar.xz
