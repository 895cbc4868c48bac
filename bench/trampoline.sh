#!/usr/bin/env bash
# What starting a node's command through the trampoline costs: `fracflow-exec __exec` (the small binary) against
# `fracflow __exec` (the whole command) and running /bin/true directly, each started RUNS times in a row on this
# machine. Prints milliseconds per start and the ratios; the engine pays this once per node that runs.
# Usage: bench/trampoline.sh [RUNS]   (default 300)
set -euo pipefail
runs=${1:-300}
repo=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
bin=${CARGO_TARGET_DIR:-$repo/target}/release
# The trampoline checks that its parent is the engine it was told of: here, the shell running the loop.
per_start() { # TRAMPOLINE|- -> milliseconds per start of /bin/true (through TRAMPOLINE __exec, or directly)
  local t0 t1
  t0=$(date +%s%N)
  for ((i = 0; i < runs; i++)); do
    if [ "$1" = - ]; then /bin/true; else "$1" __exec "$BASHPID" /bin/true; fi
  done
  t1=$(date +%s%N)
  awk -v a="$t0" -v b="$t1" -v n="$runs" 'BEGIN { printf "%.3f", (b - a) / n / 1e6 }'
}
direct=$(per_start -)
small=$(per_start "$bin/fracflow-exec")
whole=$(per_start "$bin/fracflow")
printf 'ms per start (%s starts each): /bin/true %s, fracflow-exec __exec %s, fracflow __exec %s\n' "$runs" "$direct" "$small" "$whole"
awk -v s="$small" -v w="$whole" 'BEGIN { printf "fracflow __exec / fracflow-exec __exec: %.1fx\n", w / s }'
