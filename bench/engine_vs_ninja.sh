#!/usr/bin/env bash
# Engine overhead against ninja on the same 10 000-node graphs (a chain and a fan-in), in one run:
# first run, no-op re-run and plan/dry-run times, and their ratios. Every command is a trivial `sh -c` for
# both tools, so the difference is engine overhead. Usage: bench/engine_vs_ninja.sh [NODES]
set -euo pipefail
nodes=${1:-10000}
repo=$(cd "$(dirname "$0")/.." && pwd)
command -v ninja >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ninja-build; }
cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
fracflow=${CARGO_TARGET_DIR:-$repo/target}/release/fracflow
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

generate() { # shape dir
  local shape=$1 dir=$2
  mkdir -p "$dir/pipelines" "$dir/hw/testbeds"
  printf 'kind: emulated\n' > "$dir/hw/testbeds/emulated.yaml"
  python3 - "$shape" "$nodes" "$dir" <<'PY'
import sys
shape, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
y = ["pipeline: bench", "nodes:"]
nj = ["rule t", "  command = : > $out", ""]
for i in range(n):
    if shape == "chain":
        deps = [f"n{i-1}"] if i > 0 else []
    else:
        deps = [f"n{j}" for j in range(n - 1)] if i == n - 1 else []
    y.append(f"  n{i}:\n    kind: command\n    outputs: [o]\n    run: ': > \"$FRACFLOW_OUT/o\"'")
    if deps:
        y.append("    deps: [" + ", ".join(deps) + "]")
    nj.append(f"build n{i}: t" + (" | " + " ".join(deps) if deps else ""))
open(f"{d}/pipelines/bench.yaml", "w").write("\n".join(y) + "\n")
open(f"{d}/build.ninja", "w").write("\n".join(nj) + "\n")
PY
}

printf '%-8s %-10s %10s %10s %8s\n' shape phase ninja_s fracflow_s ratio
for shape in chain fanin; do
  dir=$work/$shape
  generate "$shape" "$dir"
  cd "$dir"
  export FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks
  t0=$(now); ninja -j2 >/dev/null; t1=$(now); n_first=$(elapsed "$t0" "$t1")
  t0=$(now); ninja -j2 >/dev/null; t1=$(now); n_noop=$(elapsed "$t0" "$t1")
  t0=$(now); ninja -n -j2 >/dev/null; t1=$(now); n_plan=$(elapsed "$t0" "$t1")
  t0=$(now); "$fracflow" run bench --jobs 2 >/dev/null 2>&1; t1=$(now); f_first=$(elapsed "$t0" "$t1")
  t0=$(now); "$fracflow" run bench --jobs 2 >/dev/null 2>&1; t1=$(now); f_noop=$(elapsed "$t0" "$t1")
  t0=$(now); "$fracflow" plan bench >/dev/null 2>&1; t1=$(now); f_plan=$(elapsed "$t0" "$t1")
  for row in "first $n_first $f_first" "noop $n_noop $f_noop" "plan $n_plan $f_plan"; do
    set -- $row
    printf '%-8s %-10s %10s %10s %8s\n' "$shape" "$1" "$2" "$3" "$(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.1fx", (a > 0 ? b / a : 0) }')"
  done
  awk -v f="$f_first" -v n="$n_first" -v c="$nodes" -v s="$shape" \
    'BEGIN { printf "%-8s first-run overhead beyond ninja: %.3f ms/node\n", s, (f - n) * 1000 / c }'
  cd "$repo"
done
