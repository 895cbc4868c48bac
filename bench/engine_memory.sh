#!/usr/bin/env bash
# Peak memory of the engine per node: a SIDE × SIDE sweep of one trivial command with an aggregator over every
# point (the sweep shape of bench/engine_vs_peers.sh), beside a one-node pipeline in the same kind of project as
# the baseline. For each, the first run, a no-op and a plan, each its own process, timed by /usr/bin/time: peak
# RSS, and KiB a node over all and above the one-node baseline. Default SIDE 548, which is 300 305 nodes; the first
# run of that takes about 5 minutes on 2 cores. The projects live in WORK (default: a new directory under /tmp).
# Usage: bench/engine_memory.sh [SIDE]
set -euo pipefail
side=${1:-548}
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -x /usr/bin/time ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time; }
cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
fracflow=${CARGO_TARGET_DIR:-$repo/target}/release/fracflow
work=${WORK:-$(mktemp -d)}
trap 'rm -rf "$work"' EXIT

# project DIR SIDE: a sweep of SIDE × SIDE points and its aggregator; SIDE 0 makes the one-node pipeline.
project() {
  mkdir -p "$1/pipelines" "$1/hw/testbeds"
  printf 'kind: emulated\n' > "$1/hw/testbeds/emulated.yaml"
  python3 - "$1" "$2" <<'PY'
import sys
d, side = sys.argv[1], int(sys.argv[2])
if side == 0:
    y = ["pipeline: bench", "nodes:", "  one:\n    kind: command\n    outputs: [o]\n    run: 'echo 1 > \"$FRACFLOW_OUT/o\"'"]
else:
    r = ", ".join(map(str, range(side)))
    y = ["pipeline: bench", f"sweep: {{a: [{r}], b: [{r}]}}", "nodes:",
         "  p:\n    kind: command\n    foreach: [a, b]\n    outputs: [o]\n    run: 'echo {a} {b} > \"$FRACFLOW_OUT/o\"'",
         "  agg:\n    kind: command\n    deps: [p]\n    outputs: [o]\n    run: 'echo done > \"$FRACFLOW_OUT/o\"'"]
open(f"{d}/pipelines/bench.yaml", "w").write("\n".join(y) + "\n")
PY
}

# peak_kb DIR ARGS...: the peak RSS in KiB of `fracflow ARGS` run in DIR; fails the bench when the run fails.
peak_kb() {
  local dir=$1
  shift
  (cd "$dir" && FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks /usr/bin/time -f '%M' -o "$work/rss" \
    "$fracflow" "$@" >/dev/null 2>"$work/stderr") || { cat "$work/stderr" >&2; exit 1; }
  tail -n 1 "$work/rss"
}

nodes=$((side * side + 1))
project "$work/one" 0
project "$work/sweep" "$side"
printf 'nodes=%s (a %s x %s sweep and its aggregator); peak RSS of each phase, one run each\n' "$nodes" "$side" "$side"
printf '%-6s %12s %12s %10s %16s\n' phase "one node MiB" "sweep MiB" "KiB/node" "above one node"
for phase in first noop plan; do
  case $phase in
    plan) args=(plan bench) ;;
    *) args=(run bench --jobs 2) ;;
  esac
  base=$(peak_kb "$work/one" "${args[@]}")
  big=$(peak_kb "$work/sweep" "${args[@]}")
  # GNU time's %M is in KiB.
  awk -v p="$phase" -v b="$base" -v s="$big" -v n="$nodes" 'BEGIN {
    printf "%-6s %12.1f %12.1f %10.2f %16.2f\n", p, b / 1024, s / 1024, s / n, (s - b) / n }'
done
