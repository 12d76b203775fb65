#!/usr/bin/env bash
# On the GPU machine, in device calls made back to back (the machine stays warm
# about 30 s between calls, and /tmp with it), after experiments/peers/fetch.sh here:
#   call 1, carry [".peers/a"]:            bash experiments/peers/install.sh stage
#   call 2, carry [".peers/b"]:            bash experiments/peers/install.sh stage
#   call 3, carry ["dist", ".peers/c"]:    bash experiments/peers/install.sh stage install && ...
# (a call carries at most 64 MiB with the working tree; with the tree at 21 MiB,
# .peers/b and dist/ no longer fit one call, session 28)
# Steps:
#   stage    copy whichever part of .peers this call carried to /tmp/peers-stage
#            (a third part, .peers/c, when part b was split to fit a call; it can
#            travel with dist/)
#   install  join and unpack the .tar.xz parts, check each unpacked file against
#            its wheel's RECORD and that RECORD against the sha256 pinned in
#            wheels.txt; pip-install the other wheels (already checked by
#            fetch.sh) with --no-deps into $PEERS_SITE; print each peer's import
#   check    only the import check
# PEERS_SITE defaults to /tmp/peers/site-packages. Its path must contain
# "/site-packages/": QuACK fingerprints its epilogues and treats functions of
# installed libraries (CuTe DSL's) as opaque only when their file is under such
# a folder; elsewhere `import quack.linear_cross_entropy` fails with "epilogue
# fn depends on <ContextVar _LOC_TRANSFORMS>". The scripts that use the peers
# (experiments/*_peers.py, experiments/peers/smoke.py) put $PEERS_SITE and the
# CuTe DSL's dsl_packages folder first on sys.path themselves (peers_site.py);
# for anything else:
#   export PYTHONPATH=$PEERS_SITE:$PEERS_SITE/nvidia_cutlass_dsl/dsl_packages
set -euo pipefail
cd "$(dirname "$0")/../.."
SITE=${PEERS_SITE:-/tmp/peers/site-packages}
STAGE=${PEERS_STAGE:-/tmp/peers-stage}
PY=${PYTHON:-python3}
case "$SITE" in */site-packages) ;; *) echo "install.sh: PEERS_SITE=$SITE must end in /site-packages (see above)" >&2; exit 2 ;; esac
check() {
  PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages "$PY" - <<'PYEOF'
import importlib, importlib.metadata as md, time, traceback
mods = [("CuTe DSL", "cutlass.cute", "nvidia-cutlass-dsl-libs-core"),
        ("FlashAttention-4", "flash_attn.cute", "flash-attn-4"),
        ("QuACK", "quack.linear_cross_entropy", "quack-kernels"),
        ("Liger CuTe FLCE", "liger_kernel.ops.cutedsl.ops.fused_linear_cross_entropy_sm90", "liger-kernel"),
        ("Liger Triton FLCE", "liger_kernel.transformers", "liger-kernel"),
        ("Cut Cross-Entropy", "cut_cross_entropy", "cut-cross-entropy")]
bad = 0
for what, mod, dist in mods:
    t = time.time()
    try:
        m = importlib.import_module(mod)
        print(f"import ok   {what:18} {dist} {md.version(dist):12} {time.time() - t:5.1f} s  {m.__file__}")
    except Exception as e:
        bad += 1
        print(f"import FAIL {what:18} {type(e).__name__}: {str(e).splitlines()[0][:200]}")
raise SystemExit(1 if bad else 0)
PYEOF
}
for step in "$@"; do
  case "$step" in
    stage)
      mkdir -p "$STAGE"
      for part in .peers/a .peers/b .peers/c; do [ -d "$part" ] && cp "$part"/* "$STAGE"/; done
      ls -l "$STAGE" ;;
    install)
      grep -v '^#' experiments/peers/wheels.txt | awk 'NF == 3' | while read -r spec sha record; do
        name=$(echo "${spec%%==*}" | tr - _) version=${spec##*==}
        parts="$STAGE/$name.tar.xz.parts"
        [ -f "$parts" ] || { echo "install.sh: $parts missing: stage part a on this machine first" >&2; exit 1; }
        while read -r p; do
          [ -f "$STAGE/$p" ] || { echo "install.sh: $STAGE/$p missing: stage both parts (a, b) on this machine first" >&2; exit 1; }
        done < "$parts"
        rm -rf "$STAGE/$name" && mkdir -p "$STAGE/$name"
        (cd "$STAGE" && cat $(cat "$parts")) | xz -d | tar -x -C "$STAGE/$name"
        "$PY" experiments/peers/check_record.py "$STAGE/$name" "$name-$version.dist-info/RECORD" "$record" install.sh
      done
      rm -rf "$SITE" && mkdir -p "$SITE"
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$STAGE"/*.whl
      grep -v '^#' experiments/peers/wheels.txt | awk 'NF == 3 {print $1}' | while read -r spec; do
        cp -a "$STAGE/$(echo "${spec%%==*}" | tr - _)"/. "$SITE"/
      done
      check ;;
    check) check ;;
    *) echo "usage: install.sh stage|install|check ..." >&2; exit 2 ;;
  esac
done
