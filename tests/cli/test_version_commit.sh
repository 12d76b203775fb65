#!/usr/bin/env bash
# The commit `detfuse --version` reports (and the store records with every
# measurement) is the source tree's at build time: `git rev-parse HEAD`, with
# "-dirty" when tracked files differ. Skips (77) outside a git checkout.
# usage: test_version_commit.sh DETFUSE SOURCE_DIR
set -u
detfuse=$1 src=$2
commit=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null) || { echo "not a git checkout: skipped"; exit 77; }
[ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ] && commit="$commit-dirty"
got=$("$detfuse" --version | awk '{print $3}')
if [ "$got" != "$commit" ]; then
  echo "detfuse --version reports commit '$got', the source tree is at '$commit' (rebuild after editing?)"
  exit 1
fi
echo "ok: $got"
