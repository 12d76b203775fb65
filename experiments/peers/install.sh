#!/usr/bin/env bash
# On the GPU machine, in device calls made back to back (the machine stays warm
# about 30 s between calls, and /tmp with it):
#   call 1 (carry .peers/a):  bash experiments/peers/install.sh stage
#   call 2 (carry .peers/b):  bash experiments/peers/install.sh stage install
# then, in that call and later ones on the same machine:
#   export PYTHONPATH=/tmp/peers-site:/tmp/peers-site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
# (the CuTe DSL's `cutlass` package is added to sys.path by a .pth file, which
# Python reads only in a site directory, not in a --target folder)
set -euo pipefail
cd "$(dirname "$0")/../.."
for step in "$@"; do
  case "$step" in
    stage)  # copy whichever part this call carried
      mkdir -p /tmp/peers-stage
      for part in .peers/a .peers/b; do [ -d "$part" ] && cp "$part"/* /tmp/peers-stage/; done
      ls /tmp/peers-stage ;;
    install)
      for f in cu13part.00 cu13part.01 cu13.name; do
        [ -f "/tmp/peers-stage/$f" ] || { echo "install.sh: /tmp/peers-stage/$f missing: stage both parts (a, b) on this machine first" >&2; exit 1; }
      done
      name=$(cat /tmp/peers-stage/cu13.name)
      cat /tmp/peers-stage/cu13part.00 /tmp/peers-stage/cu13part.01 > "/tmp/peers-stage/$name"
      sha=$(grep '^nvidia-cutlass-dsl-libs-cu13==' experiments/peers/wheels.txt | cut -d' ' -f2)
      echo "$sha  /tmp/peers-stage/$name" | sha256sum --check --quiet -
      rm /tmp/peers-stage/cu13part.*
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/peers-site \
        /tmp/peers-stage/*.whl
      PYTHONPATH=/tmp/peers-site:/tmp/peers-site/nvidia_cutlass_dsl/dsl_packages python3 -c "import flash_attn.cute, liger_kernel, cut_cross_entropy, quack; print('peers installed')" ;;
    *) echo "usage: install.sh stage|install ..." >&2; exit 2 ;;
  esac
done
