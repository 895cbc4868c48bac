#!/usr/bin/env bash
# CPU time and context switches per node of one first run, for fracflow and ninja on one of
# bench/engine_vs_peers.sh's graphs, under `perf stat` (every process the tool starts is counted: the engine,
# its spawner and supervisors, and the commands, which are the same `sh` for both). On a machine whose cores the
# commands keep busy, every CPU-second the engine spends is taken from them, so this is the engine's cost even
# where a wall-clock A/B is lost in the noise; each context switch costs the kernel a wake-up, a switch and,
# across cores, an interrupt. With BASE=/path/to/an/older/fracflow that build is measured in the same rounds.
# Projects live under TMPDIR. Usage: bench/cpu_per_node.sh [SHAPE] [NODES] [ROUNDS]   (default fanin 3000 5)
set -euo pipefail
shape=${1:-fanin}
nodes=${2:-3000}
rounds=${3:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/bench/peer_graphs.sh"
command -v perf >/dev/null || { echo "perf is needed (Debian: linux-perf)" >&2; exit 1; }
peer_graph_setup "$shape" "$nodes"

# counted ROUND LABEL COMMAND...: one first run under `perf stat` in a fresh copy; prints `cpu-ms switches`.
counted() {
  local label=$2 dir
  dir=$work/round-$1-$label
  shift 2
  cp -r "$work/graph/$([ "$label" = ninja ] && echo ninja || echo fracflow)" "$dir"
  (cd "$dir" && FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks perf stat -x, -e task-clock,context-switches \
    -o "$work/stat" "$@" >/dev/null 2>&1) || { echo "$label failed" >&2; exit 1; }
  awk -F, '$3 == "task-clock" { ms = $1 } $3 == "context-switches" { cs = $1 } END { printf "%.1f %d", ms, cs }' \
    "$work/stat"
}

declare -A cpus switches
printf '%s of %s nodes, first run, %s rounds, --jobs 2 / -j2; TMPDIR=%s (%s)\n' "$shape" "$count" "$rounds" \
  "${TMPDIR:-/tmp}" "$(stat -f -c %T "${TMPDIR:-/tmp}")"
record() { cpus[$1]+="${2% *} "; switches[$1]+="${2#* } "; }
peer_rounds "$rounds" counted record
for label in "${peer_labels[@]}"; do
  cpu=$(median %.1f ${cpus[$label]})
  cs=$(median %.1f ${switches[$label]})
  printf '%-9s CPU ms: %s median %s (%s µs a node); context switches: %s median %s (%s a node)\n' "$label" \
    "${cpus[$label]}" "$cpu" "$(awk -v c="$cpu" -v n="$count" 'BEGIN { printf "%.0f", c * 1000 / n }')" \
    "${switches[$label]}" "$cs" "$(awk -v c="$cs" -v n="$count" 'BEGIN { printf "%.1f", c / n }')"
done
