#!/usr/bin/env bash
# The engine's latency per node on a chain's critical path, against ninja in the same run: an N-node chain
# whose every node writes its own output (`echo i > out`), first run, ROUNDS rounds alternating fracflow and
# ninja (Debian ninja-build). Prints seconds per round, the median milliseconds per node of each, the ratio,
# and fracflow's per-node cost beyond ninja's. With BASE=/path/to/an/older/fracflow, that binary runs in the
# same rounds too (an A/B of two builds under the same machine load).
# Usage: bench/chain_latency.sh [N] [ROUNDS]   (default 2000 nodes, 3 rounds)
set -euo pipefail
nodes=${1:-2000}
rounds=${2:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/bench/chain_project.sh"
chain_bench_setup "$nodes"
now() { date +%s.%N; }
first_run() { # label binary|ninja -> seconds of a first run in a fresh project
  local dir t0 t1
  dir=$(chain_project "$work" "$1")
  cd "$dir"
  t0=$(now)
  if [ "$2" = ninja ]; then
    ninja -j2 >/dev/null
  else
    FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks "$2" run chain --jobs 2 >/dev/null 2>&1
  fi
  t1=$(now)
  cd "$repo"
  # Kept until the end (the trap removes them): on ext4 without a journal, as on the VM this was written on,
  # creating an inode skips every inode deleted in the last minutes, so removing one round's files here would
  # slow the next round's, and more so for the tool that creates more files per node.
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}
labels=(ninja fracflow)
[ -n "${BASE:-}" ] && labels+=(base)
declare -A times
for ((r = 1; r <= rounds; r++)); do
  for label in "${labels[@]}"; do
    case $label in ninja) bin=ninja ;; fracflow) bin=$fracflow ;; base) bin=$BASE ;; esac
    times[$label]+="$(first_run "$label" "$bin") "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
printf 'chain of %s nodes, first run, %s rounds; load before: %s\n' "$nodes" "$rounds" "$(cut -d' ' -f1-3 /proc/loadavg)"
n=$(echo "${times[ninja]}" | median)
for label in "${labels[@]}"; do
  m=$(echo "${times[$label]}" | median)
  awk -v l="$label" -v s="${times[$label]}" -v m="$m" -v n="$n" -v k="$nodes" \
    'BEGIN { printf "%-9s seconds: %s  median %.3f s = %.2f ms/node; %.2fx ninja; %+.2f ms/node beyond ninja\n", l, s, m, 1000 * m / k, m / n, 1000 * (m - n) / k }'
done
