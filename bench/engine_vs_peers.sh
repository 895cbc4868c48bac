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
. "$repo/bench/peer_graphs.sh"
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

printf 'nodes=%s; seconds on this machine (first run: one; no-op and plan: median of %s); ratios are to ninja in the same run\n' "$nodes" "$repeats"
printf '%-8s %-6s %9s %9s %7s %10s %7s\n' shape phase ninja fracflow ratio snakemake ratio
for shape in "${shapes[@]}"; do
  dir=$work/$shape
  mkdir -p "$dir/fracflow/pipelines" "$dir/fracflow/hw/testbeds" "$dir/ninja" "$dir/snakemake"
  printf 'kind: emulated\n' > "$dir/fracflow/hw/testbeds/emulated.yaml"
  count=$(generate "$shape" "$nodes" "$dir")
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
