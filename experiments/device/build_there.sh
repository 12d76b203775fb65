#!/usr/bin/env bash
# Builds detfuse on the GPU machine itself (16 cores: a full Release build in a
# few minutes) when building here and carrying the binaries is slower. The
# machine has nvcc, CMake and ninja but not the C++ dependencies: they travel
# as the Debian packages cmake/install-deps.sh names (headers and static
# libraries only), unpacked into a private prefix, never into /.
#   here:   bash experiments/device/build_there.sh fetch     # .debs/ (about 12 MB, git-ignored)
#   device: carry [".debs", ".deps"]; DETFUSE_COMMIT=<commit> bash experiments/device/build_there.sh build
# TARGETS="detfuse test_attention_wgmma ..." builds only those targets (and what they
# need): a shorter cold start when a call runs a few binaries. DETFUSE_CUDA_BATCH
# (default 4 here, 8 in CI): 16 cores want more, smaller units.
# The build lands in ./build, as the other device scripts expect; on a warm
# machine it stays there for the next calls.
set -euo pipefail
cd "$(dirname "$0")/../.."
PKGS="libboost-program-options1.74-dev libboost1.74-dev libboost-program-options1.74.0 libsqlite3-dev
      libxxhash-dev libgtest-dev nlohmann-json3-dev"
case ${1:-} in
  fetch)
    mkdir -p .debs && (cd .debs && apt-get download $PKGS)
    grep -qx '/.debs/' .git/info/exclude 2>/dev/null || echo /.debs/ >> .git/info/exclude
    du -sh .debs ;;
  build)
    SYS=/tmp/detfuse-sysroot
    mkdir -p "$SYS"
    for f in .debs/*.deb; do dpkg -x "$f" "$SYS"; done
    export PATH=$PATH:/usr/local/cuda/bin
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$SYS/usr" -DDETFUSE_CUDA_BATCH=${DETFUSE_CUDA_BATCH:-4} \
      -DBoost_NO_SYSTEM_PATHS=ON -DBoost_ROOT="$SYS/usr" -DBoost_DIR="$SYS/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0" \
      > build-configure.log 2>&1 || { tail -40 build-configure.log; exit 1; }
    start=$SECONDS
    tg=""; for t in ${TARGETS:-}; do tg="$tg --target $t"; done
    cmake --build build -j "$(nproc)" $tg -- -k 0 > build.log 2>&1 || { grep -E "error|Error" build.log | head -30; tail -20 build.log; exit 1; }
    echo "build_there: built in $((SECONDS - start)) s"; ls -la build/detfuse 2>/dev/null || ls -la build/cli/detfuse ;;
  *) echo "usage: build_there.sh fetch|build" >&2; exit 2 ;;
esac
