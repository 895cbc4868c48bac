#!/usr/bin/env bash
# fracflow against ninja (Debian ninja-build) and Snakemake (PyPI, in a venv this script makes) on the same
# generated graphs, in one run: first run, no-op and plan (`ninja -n`, `snakemake -n`) for a chain, a fan-in, a
# layered diamond (each node on two of the previous layer) and a sweep (one node over a √N × √N sweep and an
# aggregator). Every node writes its own distinct output, as real nodes do. Prints seconds and the ratio to
# ninja. Snakemake runs only up to SNAKEMAKE_MAX nodes (default 1000): above that it does not finish within
# this bench's time, and the output says it was left out. A first run is timed once; no-op and plan, which
# take milliseconds on a machine whose noise is milliseconds too, are the median of REPEATS runs (default 5).
# Usage: bench/engine_vs_peers.sh [NODES] [SHAPES...]   (default 10000, all shapes)
set -euo pipefail
nodes=${1:-10000}
shift || true
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(chain fanin diamond sweep)
snakemake_max=${SNAKEMAKE_MAX:-1000}
repeats=${REPEATS:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
command -v ninja >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ninja-build; }
venv=${SNAKEMAKE_VENV:-$repo/target/bench-venv}
if [ ! -x "$venv/bin/snakemake" ]; then
  python3 -m venv "$venv" && "$venv/bin/pip" install --quiet snakemake || echo "snakemake: could not be installed; left out"
fi
cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
fracflow=${CARGO_TARGET_DIR:-$repo/target}/release/fracflow
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
# Seconds the command took, or `failed` when it exited non-zero (Snakemake's recursion fails deep chains).
timed() {
  local t0 t1
  t0=$(now)
  if "$@" >/dev/null 2>&1; then
    t1=$(now); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
  else
    printf failed
  fi
}
# The median of `timed` over $repeats runs of the command; `failed` if any run failed.
median_of() {
  local runs=() t
  for ((i = 0; i < repeats; i++)); do
    t=$(timed "$@")
    [ "$t" = failed ] && { printf failed; return; }
    runs+=("$t")
  done
  printf '%s\n' "${runs[@]}" | sort -g | awk '{ a[NR] = $1 } END { printf "%.3f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b + 0 == b) printf "%.1fx", b / a; else printf "-" }'; }

generate() { # shape dir
  python3 - "$1" "$nodes" "$2" <<'PY'
import math, sys
shape, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# deps[i]: the nodes node i reads; the last node is the target.
if shape == "chain":
    deps = [[i - 1] if i else [] for i in range(n)]
elif shape == "fanin":
    deps = [[] for _ in range(n - 1)] + [list(range(n - 1))]
elif shape == "diamond":
    width = max(2, int(math.sqrt(n)))
    deps = []
    for i in range(n):
        layer, pos = divmod(i, width)
        deps.append([] if layer == 0 else sorted({(layer - 1) * width + pos, (layer - 1) * width + (pos + 1) % width}))
    deps[-1] = sorted(set(deps[-1]) | set(range(max(0, n - 1 - width), n - 1)))
else:  # sweep: n-1 points and one aggregator
    deps = [[] for _ in range(n - 1)] + [list(range(n - 1))]
y = ["pipeline: bench", "nodes:"]
if shape == "sweep":
    side = int(math.sqrt(n - 1))
    points = side * side
    y = ["pipeline: bench", f"sweep: {{a: [{', '.join(map(str, range(side)))}], b: [{', '.join(map(str, range(side)))}]}}", "nodes:",
         "  p:\n    kind: command\n    foreach: [a, b]\n    outputs: [o]\n    run: 'echo {a} {b} > \"$FRACFLOW_OUT/o\"'",
         "  agg:\n    kind: command\n    deps: [p]\n    outputs: [o]\n    run: 'echo done > \"$FRACFLOW_OUT/o\"'"]
    deps = [[] for _ in range(points)] + [list(range(points))]
    n = points + 1
else:
    for i in range(n):
        y.append(f"  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} > \"$FRACFLOW_OUT/o\"'")
        if deps[i]:
            y.append("    deps: [" + ", ".join(f"n{j}" for j in deps[i]) + "]")
open(f"{d}/fracflow/pipelines/bench.yaml", "w").write("\n".join(y) + "\n")
nj = ["rule t", "  command = echo $id > $out", ""]
for i in range(n):
    nj.append(f"build o/{i}: t" + (" | " + " ".join(f"o/{j}" for j in deps[i]) if deps[i] else "") + f"\n  id = {i}")
open(f"{d}/ninja/build.ninja", "w").write("\n".join(nj) + "\n")
sm = [f"DEPS = {deps!r}", f"rule all:\n    input: 'o/{n - 1}'",
      "rule node:\n    input: lambda w: [f'o/{j}' for j in DEPS[int(w.i)]]\n    output: 'o/{i}'\n    shell: 'echo {wildcards.i} > {output}'"]
open(f"{d}/snakemake/Snakefile", "w").write("\n".join(sm) + "\n")
print(n)
PY
}

printf 'nodes=%s; seconds on this machine (first run: one; no-op and plan: median of %s); ratios are to ninja in the same run\n' "$nodes" "$repeats"
printf '%-8s %-6s %9s %9s %7s %10s %7s\n' shape phase ninja fracflow ratio snakemake ratio
for shape in "${shapes[@]}"; do
  dir=$work/$shape
  mkdir -p "$dir/fracflow/pipelines" "$dir/fracflow/hw/testbeds" "$dir/ninja" "$dir/snakemake"
  printf 'kind: emulated\n' > "$dir/fracflow/hw/testbeds/emulated.yaml"
  count=$(generate "$shape" "$dir")
  export FRACFLOW_ROOT=$dir/fracflow FRACFLOW_LOCK_DIR=$dir/fracflow/locks
  declare -A n f s
  cd "$dir/ninja"
  n[first]=$(timed ninja -j2); n[noop]=$(median_of ninja -j2); n[plan]=$(median_of ninja -n -j2)
  cd "$dir/fracflow"
  f[first]=$(timed "$fracflow" run bench --jobs 2); f[noop]=$(median_of "$fracflow" run bench --jobs 2)
  f[plan]=$(median_of "$fracflow" plan bench)
  if [ "$count" -le "$snakemake_max" ] && [ -x "$venv/bin/snakemake" ]; then
    cd "$dir/snakemake"
    s[first]=$(timed "$venv/bin/snakemake" -c2 -q); s[noop]=$(median_of "$venv/bin/snakemake" -c2 -q)
    s[plan]=$(median_of "$venv/bin/snakemake" -n -c2 -q)
  else
    s[first]=-; s[noop]=-; s[plan]=-
  fi
  for phase in first noop plan; do
    printf '%-8s %-6s %9s %9s %7s %10s %7s\n' "$shape" "$phase" "${n[$phase]}" "${f[$phase]}" "$(ratio "${n[$phase]}" "${f[$phase]}")" \
      "${s[$phase]}" "$(ratio "${n[$phase]}" "${s[$phase]}")"
  done
  cd "$repo"
done
[ "$nodes" -le "$snakemake_max" ] || echo "snakemake: left out above $snakemake_max nodes (set SNAKEMAKE_MAX to try; it takes minutes per phase there)"
