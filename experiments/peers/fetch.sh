#!/usr/bin/env bash
# Here (a machine with PyPI): downloads the pinned peer wheels of wheels.txt
# for the GPU machine (CPython 3.12, x86-64), checks each sha256, and lays them
# out in .peers/ (git-ignored) for two device calls, since one call carries at
# most 64 MiB and the CuTe DSL runtime wheel alone is 92 MB:
#   .peers/a/  the first 48 MB of the nvidia-cutlass-dsl-libs-cu13 wheel and every other wheel (55 MiB)
#   .peers/b/  the rest of that wheel (42 MiB), leaving room in its call for the binaries
# experiments/peers/install.sh puts them together on the device.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^#' experiments/peers/wheels.txt | while read -r spec sha; do
  [ -n "$spec" ] || continue
  python3 -m pip download --quiet --no-deps --only-binary=:all: --pre --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$tmp" "$spec"
done
grep -v '^#' experiments/peers/wheels.txt | while read -r spec sha; do
  [ -n "$spec" ] || continue
  name=$(echo "${spec%%==*}" | tr - _)
  f=$(ls "$tmp"/"$name"-"${spec##*==}"-*.whl)
  echo "$sha  $f" | sha256sum --check --quiet - || { echo "fetch.sh: $f does not match its pinned sha256" >&2; exit 1; }
done
rm -rf .peers && mkdir -p .peers/a .peers/b
big=$(ls "$tmp"/nvidia_cutlass_dsl_libs_cu13-*.whl)
split -b 48000000 -d "$big" .peers/cu13part.
mv .peers/cu13part.00 .peers/a/ && mv .peers/cu13part.01 .peers/b/
basename "$big" > .peers/b/cu13.name
rm "$big" && mv "$tmp"/*.whl .peers/a/
grep -qx '/.peers/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.peers/' >> .git/info/exclude; }
du -sh .peers/a .peers/b
