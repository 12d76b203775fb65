#!/usr/bin/env bash
# CTest study_plot: a synthetic contention study in a fresh store (the real
# schema, written by study_synth_store), then plot.py on it; checks the report's
# sections and a crossover and cost the synthetic data imply. Exit 77 (skipped)
# when matplotlib is missing, saying so.
set -euo pipefail
synth=$1 plot=$2 dir=$3
# The interpreter CMake found, else Debian's (where python3-matplotlib installs).
py=""
for c in "${PYTHON:-python3}" python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import matplotlib' 2>/dev/null; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: matplotlib is not installed for ${PYTHON:-python3} nor /usr/bin/python3 (Debian: apt-get install python3-matplotlib; cmake/install-deps.sh does it)"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir"
"$synth" "$dir/synth.db"
"$py" "$plot" --db "$dir/synth.db" --out "$dir/out"
for f in REPORT.md time_vs_N.png cost_of_determinism.png memory.png atomic_noise.png invariance_classes.png; do
  [ -s "$dir/out/$f" ] || { echo "FAIL: $f missing or empty"; exit 1; }
done
report="$dir/out/REPORT.md"
need() { grep -qF -- "$1" "$report" || { echo "FAIL: REPORT.md lacks: $1"; exit 1; }; }
need "# Contention study: contention-flce"
need "regenerate: \`python3 experiments/contention/plot.py --db $dir/synth.db"
need "device: NVIDIA H200"
# The synthetic times (tests/study/synth.h) put partials ahead of owning up to
# N=1024 and behind from N=2048; atomic is fastest everywhere, 0.9 of the work
# time at N=512 against partials' 1.05: cost of determinism 1.167 there.
need "crossover \`partials\` -> \`owning\` between N=1024"
need "\`atomic\` beats \`owning\` at every N measured"
need "| 512,4096,32768 | \`flce.bf16.mma.atomic.bm128_bn128_mb1024_sk4\`"
grep -q "| 512,4096,32768 | .* | 1.167 |" "$report" || { echo "FAIL: cost of determinism at N=512 is not 1.167"; exit 1; }
# Invariance: the synthetic owning variants agree per chunk budget.
need "## Config-invariance classes per shape"
echo "OK: plot.py wrote the report and five figures"
