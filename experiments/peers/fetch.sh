#!/usr/bin/env bash
# Here (a machine with PyPI): downloads the pinned peer wheels of wheels.txt for
# the GPU machine (CPython 3.12, x86-64), checks each sha256, and lays them out
# in .peers/ (git-ignored) for two device calls, since one call carries at most
# 64 MiB with the working tree (21 MiB of tracked files in December 2026):
#   .peers/a/  every wheel but the unpacked one(s), and the first part of
#              <name>.tar.xz (about 40 MiB in all)
#   .peers/b/  the next PART_B_MIB (default 40) of that .tar.xz (about 36 MiB at -6)
#   .peers/c/  the rest, if any (-0 makes one of ~13 MiB, session 38): it travels with
#              the binaries (dist/build.tar.xz, ~15 MiB) in the third call
# A wheel with a third field in wheels.txt (the CuTe DSL cu13 compiler) travels
# as its files in a .tar.xz, after its RECORD is checked against that field.
# experiments/peers/install.sh puts everything together on the device.
# PART_A_MIB (default 40) sets the size of .peers/a; PEERS_XZ (default -6) the
# xz preset: -6 makes 66 MB from the 92 MB wheel in 6-8 CPU minutes (25 minutes
# on a loaded 2-core machine), -0 makes 80 MB in half a minute.
set -euo pipefail
cd "$(dirname "$0")/../.."
part_a=$(( ${PART_A_MIB:-40} * 1048576 ))
part_b=$(( ${PART_B_MIB:-40} * 1048576 ))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
specs=$(grep -v '^#' experiments/peers/wheels.txt | awk 'NF')
echo "$specs" | while read -r spec sha record; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: --pre --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$tmp" "$spec"
done
rm -rf .peers && mkdir -p .peers/a .peers/b .peers/c "$tmp/unpack"
echo "$specs" | while read -r spec sha record; do
  name=$(echo "${spec%%==*}" | tr - _) version=${spec##*==}
  f=$(ls "$tmp"/"$name"-"$version"-*.whl)
  echo "$sha  $f" | sha256sum --check --quiet - || { echo "fetch.sh: $f does not match its pinned sha256" >&2; exit 1; }
  if [ -z "$record" ]; then mv "$f" .peers/a/; continue; fi
  d="$tmp/unpack/$name"
  mkdir -p "$d" && unzip -q "$f" -d "$d"
  echo "$record  $d/$name-$version.dist-info/RECORD" | sha256sum --check --quiet - ||
    { echo "fetch.sh: the RECORD of $f does not match its pinned sha256" >&2; exit 1; }
  echo "fetch.sh: recompressing $(basename "$f") with xz ${PEERS_XZ:--6} (see above for how long)" >&2
  tar -C "$d" -cf - . | xz "${PEERS_XZ:--6}" -T0 > "$tmp/$name.tar.xz"
  rm -rf "$d" "$f"
done
# Fill part a up to PART_A_MIB with the head of the (one) .tar.xz; the rest goes to b.
small=$(du -cb .peers/a | tail -1 | cut -f1)
for t in "$tmp"/*.tar.xz; do
  n=$(basename "$t")
  head -c $(( part_a - small )) "$t" > ".peers/a/$n.part0"
  tail -c +$(( part_a - small + 1 )) "$t" | head -c "$part_b" > ".peers/b/$n.part1"
  tail -c +$(( part_a - small + part_b + 1 )) "$t" > ".peers/c/$n.part2"
  for f in ".peers/b/$n.part1" ".peers/c/$n.part2"; do [ -s "$f" ] || rm "$f"; done
  parts=$(cd .peers && ls a/"$n".part[0-9]* b/"$n".part[0-9]* c/"$n".part[0-9]* 2>/dev/null | xargs -n1 basename)
  echo "$parts" > ".peers/a/$n.parts"
done
du -sh --apparent-size .peers/a .peers/b .peers/c
