#!/usr/bin/env bash
# On the GPU machine, in two device calls made back to back (the machine stays
# warm about 30 s between calls, and /tmp with it):
#   call 1 (carry .peers/a):  bash experiments/peers/install.sh stage
#   call 2 (carry .peers/b):  bash experiments/peers/install.sh install
# then in that call and later ones on the same machine:
#   export PYTHONPATH=/tmp/peers-site${PYTHONPATH:+:$PYTHONPATH}
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  stage)
    mkdir -p /tmp/peers-stage && cp .peers/a/cu13part.* /tmp/peers-stage/ && ls -la /tmp/peers-stage ;;
  install)
    [ -f /tmp/peers-stage/cu13part.00 ] || { echo "install.sh: part 1 missing: run 'stage' in the previous call on this machine" >&2; exit 1; }
    name=$(cat .peers/b/cu13.name)
    cat /tmp/peers-stage/cu13part.00 .peers/b/cu13part.01 > "/tmp/peers-stage/$name"
    sha=$(grep '^nvidia-cutlass-dsl-libs-cu13==' experiments/peers/wheels.txt | cut -d' ' -f2)
    echo "$sha  /tmp/peers-stage/$name" | sha256sum --check --quiet -
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/peers-site \
      "/tmp/peers-stage/$name" .peers/b/*.whl
    PYTHONPATH=/tmp/peers-site python3 -c "import flash_attn.cute, liger_kernel, cut_cross_entropy; print('peers installed')" ;;
  *) echo "usage: install.sh stage|install" >&2; exit 2 ;;
esac
