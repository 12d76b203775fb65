#!/usr/bin/env bash
# CTest study_plot: synthetic contention studies (FLCE and attention) in a fresh
# store (the real schema, written by study_synth_store), then plot.py on it;
# checks the report's sections and crossovers and costs the synthetic data
# imply; then stores holding only one family, and --study chosen by hand. Exit
# 77 (skipped) when matplotlib is missing, saying so.
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
figures() {
  for f in REPORT.md time_vs_N.png cost_of_determinism.png memory.png atomic_noise.png invariance_classes.png \
           time_vs_adders.png noise_vs_adders.png bits_vs_sms.png; do
    [ -s "$1/$f" ] || { echo "FAIL: $1/$f missing or empty"; exit 1; }
  done
}
figures "$dir/out"
report="$dir/out/REPORT.md"
need() { grep -qF -- "$1" "$report" || { echo "FAIL: $report lacks: $1"; exit 1; }; }
lacks() { ! grep -qF -- "$1" "$report" || { echo "FAIL: $report has: $1"; exit 1; }; }
# Both families by default: the newest study of each.
need "# Contention study: contention-flce, contention-attention"
need "regenerate: \`python3 experiments/contention/plot.py --db $dir/synth.db --study contention-flce --study contention-attention"
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

# The adders axis (tests/study/synth.h: atomic time grows 1% per 2 adders away
# from 4; repeats differ only with more than one adder per chunk) at the fixed
# point N=8192 (one chunk of 64 row blocks at mb1024): sk1 -> 1, sk4 -> 4,
# sk16 -> 16, sk0 -> 64 adders.
need "## Time and noise against adders"
need "| \`flce.bf16.mma.atomic.bm128_bn128_mb1024_sk0\` | 8192,4096,32768 | 64 |"
need "| \`flce.bf16.mma.atomic.bm128_bn128_mb1024_sk1\` | 8192,4096,32768 | 1 |"
need "   - Answer: confirmed: every atomic series takes 5% or more longer per FLOP at its most adders."
need "atomic dW bits: identical over the repeats at 1; differing at 4,16,64 (adders)."
# The SM-count axis: 16 SMs against 132 at the fixed point. Synthetic atomic
# dW bits change with the SM count when more than one adder adds (4 of the 5
# atomic variants; sk1 keeps them); owning (6) and partials (6) never change.
need "## Bits against SM count"
need "Repeat-0 dW digests on each SM count against the whole GPU's (132 SMs), per strategy (SM counts measured: 16, 132):"
need "| \`atomic\` | 5 | 1 | 4 |"
need "| \`owning\` | 6 | 6 | 0 |"
need "| \`partials\` | 6 | 6 | 0 |"
need "Strategies whose every variant gave identical dW bits at every SM count: \`owning\`, \`partials\`."
need "   - Answer: confirmed for atomics: their bits depend on the SM count (and on the run)."
# Attention's synthetic dQ bits do not depend on the SM count (repeat 0 of
# atomic included): the claim is refuted there, and said so.
need "## Attention: bits against SM count"
need "   - Answer: refuted on this GPU: the atomic bits did not change with the SM count."

# Attention (tests/study/synth.h, SynthAttentionMeasurer): at bc=128, atomic
# (500 TFLOP/s / (1 + 0.02 Sk/128)) is ahead of owning (420) up to Sk=1024 and
# behind from Sk=2048; ordered (470 / (1 + 0.01 Sk/128)) is the fastest
# deterministic variant at Sk=512: 462.96 / 451.92 = 1.024 there.
need "## Attention: time per strategy against contention (Sq = Sk at B*S about 16384, H=32, d=128)"
need "crossover \`atomic\` -> \`owning\` between Sk=1024 (atomic/owning = 0.97) and Sk=2048 (1.11)"
need "crossover \`atomic\` -> \`ordered\` between Sk=512"
need "\`owning\` beats \`partials\` at every Sk measured (512 to 32768)"
need "| 512 | 32 | 1.039 ms (463 TFLOP/s, \`wgmma\`, 4 key blocks per dQ tile) |"
need "Causal (a query block receives"
need "GQA (non-causal, Sq = Sk = 4096"
need "## Attention: cost of determinism"
grep -q "^| 32,32,32,512,512,128 | \`attention.bf16.wgmma.atomic.br64_bc128_st2_d128\` 1.039 ms | \`attention.bf16.wgmma.ordered.br64_bc128_st2_d128\` .* | 1.024 |" "$report" ||
  { echo "FAIL: attention cost of determinism at Sk=512 is not 1.024 (ordered over atomic)"; exit 1; }
grep -q "^| 1,32,32,32768,32768,128 | \`attention.bf16.wgmma.owning.br64_bc128_st2_qbc64_qst2_d128\` .* | 1.000 |" "$report" ||
  { echo "FAIL: attention cost of determinism at Sk=32768 is not 1.000 (owning fastest)"; exit 1; }
need "## Attention: memory against the partials workspace bound"
need "| \`attention.bf16.wgmma.partials.br64_bc128_st2_d128_mb256\` | 260 |"
need "## Attention: atomic noise against Sk, beside the error against float64"
need "| 4,32,32,4096,4096,128,causal | \`attention.bf16.wgmma.atomic.br64_bc128_st2_d128\` | 32 | 5 / 5 |"
# Deterministic: owning x2 (one class), partials x2 (one), ordered: 3 classes.
need "## Attention: config-invariance classes per shape"
need "| 32,32,32,512,512,128 | 5 | 3 | 2 |"
cp "$report" "$dir/both.md"

# One family only: the other's sections are absent, the figures still drawn.
"$synth" "$dir/flce.db" flce
"$py" "$plot" --db "$dir/flce.db" --out "$dir/flce"
figures "$dir/flce"
report="$dir/flce/REPORT.md"
need "# Contention study: contention-flce"
need "- study axes: \`{\"kind\":\"contention\",\"family\":\"flce\""
lacks "## Attention"
need "crossover \`partials\` -> \`owning\` between N=1024"
"$synth" "$dir/attention.db" attention
"$py" "$plot" --db "$dir/attention.db" --out "$dir/attention"
figures "$dir/attention"
report="$dir/attention/REPORT.md"
need "# Contention study: contention-attention"
lacks "## Time per strategy against contention (N"
need "crossover \`atomic\` -> \`owning\` between Sk=1024"

# --study by hand, one of them, then both: the same report as the default.
"$py" "$plot" --db "$dir/synth.db" --study contention-attention --out "$dir/one"
report="$dir/one/REPORT.md"
lacks "contention-flce"
need "## Attention: cost of determinism"
"$py" "$plot" --db "$dir/synth.db" --study contention-flce --study contention-attention --out "$dir/out"
cmp -s "$dir/out/REPORT.md" "$dir/both.md" || { echo "FAIL: --study flce --study attention differs from the default"; exit 1; }
if "$py" "$plot" --db "$dir/synth.db" --study nosuch --out "$dir/x" 2>"$dir/err"; then
  echo "FAIL: an unknown --study did not fail"; exit 1
fi
grep -qF "no study named nosuch" "$dir/err" || { echo "FAIL: unknown --study: $(cat "$dir/err")"; exit 1; }
echo "OK: plot.py wrote the reports and five figures (FLCE and attention, each alone, and both)"
