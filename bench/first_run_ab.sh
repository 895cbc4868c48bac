#!/usr/bin/env bash
# First runs of one generated graph (the shapes of bench/engine_vs_peers.sh: chain, fanin, diamond, sweep) by
# ninja and fracflow, in rounds whose order turns, each in a fresh copy of its project: wall seconds, and how
# long the machine's cores sat idle during the run (from /proc/stat: time no command, engine thread or kernel
# work had a core). With BASE=/path/to/an/older/fracflow, that build runs in the same rounds (an A/B of two builds under the
# same load). Prints every round and the median of each, with the ratio to ninja.
# Projects live under TMPDIR: a tmpfs there (`TMPDIR=/dev/shm`) leaves the filesystem's inode allocation out.
# Usage: bench/first_run_ab.sh [SHAPE] [NODES] [ROUNDS]   (default fanin 3000 5)
set -euo pipefail
shape=${1:-fanin}
nodes=${2:-3000}
rounds=${3:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/bench/peer_graphs.sh"
peer_graph_setup "$shape" "$nodes"

# Idle core-seconds so far, all cores (the idle and iowait columns of /proc/stat, in clock ticks).
idle_ticks() { awk '/^cpu / { print $5 + $6 }' /proc/stat; }
ticks=$(getconf CLK_TCK)
# One first run: round, label, then the command; prints `wall idle` in seconds, or fails the bench when it fails.
# Every copy is kept until the bench ends: on an ext4 without a journal, creating files soon after thousands were
# deleted costs a scan of the deleted inodes, which would charge one round's removal to the next (README).
first_run() {
  local label=$2 dir t0 t1 i0 i1
  dir=$work/round-$1-$label
  shift 2
  cp -r "$work/graph/$([ "$label" = ninja ] && echo ninja || echo fracflow)" "$dir"
  i0=$(idle_ticks); t0=$(date +%s.%N)
  (cd "$dir" && FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks "$@" >/dev/null 2>&1) || { echo "$label failed" >&2; exit 1; }
  t1=$(date +%s.%N); i1=$(idle_ticks)
  awk -v a="$t0" -v b="$t1" -v i="$((i1 - i0))" -v hz="$ticks" 'BEGIN { printf "%.3f %.2f", b - a, i / hz }'
}

declare -A walls idles
printf '%s of %s nodes, first run, %s rounds; TMPDIR=%s (%s); load before: %s\n' "$shape" "$count" "$rounds" \
  "${TMPDIR:-/tmp}" "$(stat -f -c %T "${TMPDIR:-/tmp}")" "$(cut -d' ' -f1-3 /proc/loadavg)"
record() { walls[$1]+="${2% *} "; idles[$1]+="${2#* } "; }
peer_rounds "$rounds" first_run record
ninja_median=$(median %.3f ${walls[ninja]})
for label in "${peer_labels[@]}"; do
  m=$(median %.3f ${walls[$label]})
  printf '%-9s seconds: %s  median %s s (%sx ninja); idle core-seconds: %s median %s\n' "$label" "${walls[$label]}" "$m" \
    "$(awk -v a="$ninja_median" -v b="$m" 'BEGIN { printf "%.2f", b / a }')" "${idles[$label]}" "$(median %.3f ${idles[$label]})"
done
