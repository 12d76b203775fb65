#!/usr/bin/env bash
# Machine-code identity of a refactor: compiles CUDA batch translation units
# (cmake/cuda_batches.cmake) of two source trees to PTX and cubin, without
# -lineinfo (line info moves with the code), and reports per batch whether the
# PTX and the SASS are identical.
#
#   experiments/ptx_identity.sh [-o DIR] BASE-REV [TARGET-REV|.] [BATCH...]
#
#   BASE-REV    a commit (git archive'd into DIR/src-<commit>), e.g. main
#   TARGET-REV  a commit, or "." (default): this working tree as it is
#   BATCH       batch names of ./build (a configured build dir of this tree),
#               e.g. attention_wgmma_fwd_0; default: every attention_wgmma_fwd_*
#               (pass attention_wgmma_bwd_3 ... for the backward). Both trees
#               are compiled with this build's batch files and commands, so
#               the batch must hold the same configurations in both.
#   -o DIR      work/output folder (default /tmp/ptx_identity)
#
# Identical means: equal after the names of unnamed-namespace globals
# (_INTERNAL_..., _GLOBAL__N_...) are made equal (norm below; they carry cicc's
# process id, so no two compilations agree on them); "cubin bytes" reports the
# raw comparison (the symbol tables hold those names).
# Differences: diff DIR/out-<base commit>/<batch>.sass.norm DIR/out-worktree/...
#
# The nvcc command is the one ninja runs for the batch object (ninja -t
# commands), with -lineinfo and the dependency-file flags dropped, the tree's
# include root replaced, and `-c SRC -o OBJ` replaced by `-cubin -keep` (the
# kept .ptx is the PTX the cubin came from). A batch compiled once for a
# commit is reused (DIR/out-<commit>/<batch>.ptx); delete DIR to redo. SASS
# is compared as nvdisasm (or cuobjdump -sass) prints it. Under each batch:
# the target's kernels' registers and spill bytes (ptxas -v on its PTX).
# Compiles one batch at a time (2-core machines). Exit 0: all identical.
# First use: session 11, the forward in role files (kernels/attention/wgmma/
# README.md "Structure").
set -uo pipefail
out=/tmp/ptx_identity
if [ "${1:-}" = "-o" ]; then out=$2; shift 2; fi
[ $# -ge 1 ] || { sed -n 2,30p "$0"; exit 2; }
base=$1; shift
target=.
if [ $# -ge 1 ] && { [ "$1" = . ] || git rev-parse -q --verify "$1^{commit}" >/dev/null; }; then target=$1; shift; fi
root=$(git rev-parse --show-toplevel) || exit 2
build=$root/build
[ -f "$build/build.ninja" ] || { echo "no configured $build (cmake -S . -B build -G Ninja)"; exit 2; }
batches=("$@")
if [ ${#batches[@]} -eq 0 ]; then
  for f in "$build"/kernels/attention/wgmma/attention_wgmma_fwd_*.cu; do batches+=("$(basename "$f" .cu)"); done
fi
mkdir -p "$out"

# key REV: the name of REV's outputs (its commit, or "worktree" for ".").
key() { if [ "$1" = . ]; then echo worktree; else git rev-parse "$1^{commit}"; fi; }

# tree REV: a source tree for REV, $out/src-<commit> (this working tree for ".").
tree() {
  local k; k=$(key "$1") || return 1
  if [ "$k" = worktree ]; then echo "$root"; return; fi
  local d=$out/src-$k
  if [ ! -f "$d/.complete" ]; then
    rm -rf "$d"; mkdir -p "$d"
    git archive "$k" | tar -x -C "$d" || return 1
    touch "$d/.complete"
  fi
  ln -sfn "$root/.deps" "$d/.deps"
  echo "$d"
}

# compile KEY TREE BATCH: $out/out-KEY/BATCH.{ptx,cubin,sass} (a commit's kept once made).
compile() {
  local k=$1 t=$2 b=$3 dir=$out/out-$1
  mkdir -p "$dir"
  if [ "$k" != worktree ] && [ -s "$dir/$b.sass" ]; then return 0; fi
  local src obj cmd
  src=$(find "$build" -name "$b.cu" -not -path '*/CMakeFiles/*' | head -1)
  [ -n "$src" ] || { echo "no batch source $b.cu under $build"; return 1; }
  obj=$(ninja -C "$build" -t targets all | grep -o "^[^:]*/$b\.cu\.o" | head -1)
  cmd=$(ninja -C "$build" -t commands "$obj" | tail -1)
  # The batch file only #includes sources by their path from the tree root.
  cp "$src" "$dir/$b.cu"
  cmd=${cmd//-I$root /-I$t }
  rm -rf "$dir/keep-$b"; mkdir -p "$dir/keep-$b"
  cmd=$(echo "$cmd" | sed -E -e 's/ -lineinfo//' -e 's/ -MD -MT [^ ]+ -MF [^ ]+//' \
                             -e "s# -c [^ ]+ -o [^ ]+# -cubin -keep -keep-dir $dir/keep-$b -c $dir/$b.cu -o $dir/$b.cubin#")
  echo "$cmd" > "$dir/$b.cmd"
  (cd "$build" && eval "$cmd") > "$dir/$b.log" 2>&1 || { echo "compile failed: $dir/$b.log"; return 1; }
  mv "$dir/keep-$b/$b.ptx" "$dir/$b.ptx" && rm -rf "$dir/keep-$b"
  # Registers and spills: ptxas -v on the PTX apart (-Xptxas=-v in the
  # command would write "-v" into the cubin's recorded ptxas options).
  "$(dirname "${cmd%% *}")/ptxas" -arch=sm_90a -O3 -v "$dir/$b.ptx" -o /dev/null > "$dir/$b.ptxas" 2>&1
  $disasm "$dir/$b.cubin" > "$dir/$b.sass" || { echo "$disasm failed on $dir/$b.cubin"; return 1; }
}

# The SASS of a cubin: $NVDISASM, nvdisasm, cuobjdump -sass, or the nvdisasm
# wheel (nvidia-cuda-nvdisasm) unpacked under /tmp/flcerow-nvdis.
disasm=${NVDISASM:-}
[ -n "$disasm" ] || disasm=$(command -v nvdisasm || true)
[ -n "$disasm" ] || { command -v cuobjdump >/dev/null && disasm="cuobjdump -sass"; }
[ -n "$disasm" ] || disasm=$(ls /tmp/flcerow-nvdis/nvidia/*/bin/nvdisasm 2>/dev/null | head -1)
[ -n "$disasm" ] || { echo "no nvdisasm / cuobjdump (set NVDISASM)"; exit 2; }

# norm: the text with the names of the unnamed-namespace globals (cuda::std's
# customisation-point objects, cute::_ ...) made equal: the front end names
# them _INTERNAL_<hash>_<n>_<file>_<hash>_<pid of cicc> (and _GLOBAL__N__...
# alike), so they differ between any two compilations of the same source. In
# a mangled name the identifier's length comes before it; the digits before
# one may also end the previous identifier (std::__4), so the length is the
# shortest digit suffix that spans exactly <hash>_<n>_<file>_<hash>_<digits>.
norm() {
  python3 -c '
import re, sys
head = re.compile(r"(\d+)((?:_INTERNAL|_GLOBAL__N_)_[0-9a-f]{8}_(\d+)_)")
def fix(line):
    out, pos = [], 0
    for m in head.finditer(line):
        if m.start() < pos:
            continue
        run, start, n = m.group(1), m.start(2), int(m.group(3))
        for k in range(1, len(run) + 1):
            L = int(run[-k:])
            ident = line[start:start + L]
            if len(ident) == L and re.fullmatch(r"(?:_INTERNAL|_GLOBAL__N_)_[0-9a-f]{8}_\d+_.{%d}_[0-9a-f]{8}_\d+" % n, ident):
                out.append(line[pos:m.start() + len(run) - k] + "5_ANON")
                pos = start + L
                break
    return "".join(out) + line[pos:]
for line in sys.stdin:
    sys.stdout.write(fix(line))
'
}

kb=$(key "$base") && kt=$(key "$target") || exit 2
tb=$(tree "$base") && tt=$(tree "$target") || exit 2
ob=$out/out-$kb ot=$out/out-$kt
echo "base $base ($kb), target $target ($kt)"
rc=0
for b in "${batches[@]}"; do
  compile "$kb" "$tb" "$b" || { rc=1; continue; }
  compile "$kt" "$tt" "$b" || { rc=1; continue; }
  ptx=identical sass=identical cubin=identical
  for f in ptx sass; do norm < "$ob/$b.$f" > "$ob/$b.$f.norm"; norm < "$ot/$b.$f" > "$ot/$b.$f.norm"; done
  cmp -s "$ob/$b.ptx.norm" "$ot/$b.ptx.norm" || { ptx=DIFFERENT; rc=1; }
  cmp -s "$ob/$b.sass.norm" "$ot/$b.sass.norm" || { sass=DIFFERENT; rc=1; }
  cmp -s "$ob/$b.cubin" "$ot/$b.cubin" || cubin=different
  n=$(grep -c '\.entry ' "$ot/$b.ptx")
  echo "$b: $n kernels, PTX $ptx ($(wc -l < "$ot/$b.ptx") lines), SASS $sass ($(grep -c '^ */\*[0-9a-f]*\*/' "$ot/$b.sass") instructions), cubin bytes $cubin"
  # ptxas -v of the target: registers and spill stores + loads per kernel.
  awk '/Compiling entry function/ { fn = $(NF - 2) } /bytes spill stores/ { sp = $5 + $9 }
       /Used [0-9]+ registers/ { for (i = 1; i < NF; ++i) if ($(i + 1) == "registers,") r = $i;
                                 printf "    %s: %s registers, %s spill bytes\n", fn, r, sp }' "$ot/$b.ptxas"
done
exit $rc
