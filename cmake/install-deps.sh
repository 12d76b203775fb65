#!/usr/bin/env bash
# Installs what detfuse needs to build and test, with apt where it can, and
# says clearly what is missing where it cannot. The CUDA toolkit (13, with CUB
# and Thrust) is not installed here: it comes from NVIDIA's installer.
set -euo pipefail

pkgs=(cmake make g++ libboost-program-options-dev libsqlite3-dev libxxhash-dev libgtest-dev nlohmann-json3-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "detfuse: installing missing packages: ${missing[*]}" >&2
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "detfuse: apt-get not found; install these yourself: ${missing[*]}" >&2
    exit 1
  fi
fi

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && { echo "detfuse: nvcc is not on PATH; found $d/nvcc (the Makefile uses it)" >&2; exit 0; }
  done
  echo "detfuse: the CUDA toolkit (nvcc 12+, 13 recommended) is missing; install it from NVIDIA and put nvcc on PATH" >&2
  exit 1
fi
