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

labels=(ninja fracflow)
[ -n "${BASE:-}" ] && labels+=(base)
declare -A walls idles
printf '%s of %s nodes, first run, %s rounds; TMPDIR=%s (%s); load before: %s\n' "$shape" "$count" "$rounds" \
  "${TMPDIR:-/tmp}" "$(stat -f -c %T "${TMPDIR:-/tmp}")" "$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  # The order turns each round: a run's place in the round moves its time (the writeback of the run before it,
  # on a disk), and a fixed order once made a build look 8-12 % faster in 10 of 10 pairs.
  order=("${labels[@]:$(((r - 1) % ${#labels[@]}))}" "${labels[@]:0:$(((r - 1) % ${#labels[@]}))}")
  for label in "${order[@]}"; do
    case $label in
      ninja) result=$(first_run "$r" ninja ninja -j2) ;;
      fracflow) result=$(first_run "$r" fracflow "$fracflow" run bench --jobs 2) ;;
      base) result=$(first_run "$r" base "$BASE" run bench --jobs 2) ;;
    esac
    walls[$label]+="${result% *} "
    idles[$label]+="${result#* } "
  done
done
median() { printf '%s\n' $1 | sort -g | awk '{ a[NR] = $1 } END { printf "%.3f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ninja_median=$(median "${walls[ninja]}")
for label in "${labels[@]}"; do
  m=$(median "${walls[$label]}")
  printf '%-9s seconds: %s  median %s s (%sx ninja); idle core-seconds: %s median %s\n' "$label" "${walls[$label]}" "$m" \
    "$(awk -v a="$ninja_median" -v b="$m" 'BEGIN { printf "%.2f", b / a }')" "${idles[$label]}" "$(median "${idles[$label]}")"
done
