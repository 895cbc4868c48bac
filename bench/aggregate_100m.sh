#!/usr/bin/env bash
# Aggregation of 100 M synthetic per-request latencies (28 client threads per point, one samples.parquet and its
# samples.by-thread sidecar per point, both written by the client's own writer), in every configuration a figure
# pipeline uses, against polars doing the same work over the same Parquet files, in one run. Per mode three
# readers: ours through the sidecars, ours through the Parquet files alone (the same directories without the
# sidecars: what a point written before the sidecar existed costs), and polars. Each runs in its own process under
# GNU time; the table shows rows, seconds of aggregation (start-up excluded), M rows/s, peak RSS, the
# throughput relative to polars in the same mode, and the process's CPU seconds (user + system, start-up
# included: on a shared machine the wall time moves with the other load, the CPU time much less). Each reader
# runs REPEATS times (default 3): the table shows the run of median seconds and the largest peak RSS.
# Goal (issue 14): >= 150 M rows/s, >= 4x polars and < 1 GiB peak RSS in every mode.
# Usage: bench/aggregate_100m.sh [POINTS [ROWS_PER_POINT [DATA_DIR]]]   (default 32 × 3 125 000 = 100 M rows)
#        MODES="trace fig16" runs only those modes (default: all five).
# The data (about 3.4 GB: 0.8 GB of Parquet, 2.6 GB of sidecars with their keyed latency columns) is generated
# once into DATA_DIR (default $TMPDIR/fracflow-aggbench-v4-POINTSxROWS) and kept.
set -euo pipefail
points=${1:-32}
repeats=${REPEATS:-3}
rows_per_point=${2:-3125000}
repo=$(cd "$(dirname "$0")/.." && pwd)
data=${3:-${TMPDIR:-/tmp}/fracflow-aggbench-v4-${points}x${rows_per_point}}

exe=$(cargo build --release --locked -q -p fracflow-aggregate --bench aggbench --message-format=json \
        --manifest-path "$repo/Cargo.toml" |
      python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "aggbench" and m.get("executable"):
        print(m["executable"])')
[ -x "$exe" ] || { echo "aggbench was not built" >&2; exit 1; }

if [ ! -f "$data/.complete" ]; then
  rm -rf "$data" && mkdir -p "$data"
  "$exe" generate "$data" "$points" "$rows_per_point" > "$data/generate.txt"
  # The same points without their sidecars: aggregation reads the Parquet files.
  for dir in "$data"/point_*; do
    mkdir -p "$data/parquet-only/${dir##*/}"
    ln -s "$dir/samples.parquet" "$data/parquet-only/${dir##*/}/samples.parquet"
  done
  touch "$data/.complete"
fi
cat "$data/generate.txt"
# Read every file once so that each mode starts from the page cache, not from disk.
cat "$data"/point_*/samples.* > /dev/null

echo "host: $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "runs per reader: $repeats (the run of median seconds is shown)"
results=$(mktemp)
trap 'rm -f "$results" "$results".*' EXIT
read -r -a modes <<< "${MODES:-skip all warmup fig16 trace}"
for mode in "${modes[@]}"; do
  for reader in by-thread parquet polars; do
    case $reader in
      by-thread) args=(ours-$mode "$data") ;;
      parquet) args=(ours-$mode "$data/parquet-only") ;;
      polars) args=(polars-$mode "$data") ;;
    esac
    : > "$results.runs"
    for ((run = 0; run < repeats; run++)); do
      /usr/bin/time -v "$exe" "${args[@]}" > "$results.out" 2> "$results.time" ||
        { cat "$results.time" >&2; exit 1; }
      rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$results.time")
      cpu=$(awk -F': ' '/(User|System) time \(seconds\)/ { sum += $2 } END { print sum }' "$results.time")
      read -r _ rows seconds < "$results.out"
      echo "$rows $seconds $rss_kb $cpu" >> "$results.runs"
    done
    # The run of median seconds (its CPU time with it), and the largest peak RSS of all runs.
    max_rss=$(awk '$3 > m { m = $3 } END { print m }' "$results.runs")
    sort -k2,2g "$results.runs" | awk -v n="$repeats" -v mode="$mode" -v reader="$reader" -v rss="$max_rss" \
      'NR == int((n + 1) / 2) { print mode, reader, $1, $2, rss, $4 }' >> "$results"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

awk '
  { mode[NR] = $1; reader[NR] = $2; rows[NR] = $3; secs[NR] = $4; rss[NR] = $5; cpu[NR] = $6
    if ($2 == "polars") base[$1] = $4 }
  END {
    printf "%-7s %-10s %12s %9s %10s %14s %10s %9s\n", "mode", "reader", "rows", "seconds", "M rows/s", "peak RSS MiB",
      "x polars", "CPU s"
    for (i = 1; i <= NR; i++)
      printf "%-7s %-10s %12d %9.3f %10.1f %14.1f %10.2f %9.2f\n", mode[i], reader[i], rows[i], secs[i],
        rows[i] / secs[i] / 1e6, rss[i] / 1024, base[mode[i]] / secs[i], cpu[i]
  }' "$results"
