#!/usr/bin/env bash
# Aggregation of 100 M synthetic per-request latencies stored in Parquet (28 client threads per point, one
# samples.parquet per point, the measure node's schema): fracflow-aggregate's samples path against a plain polars
# lazy scan_parquet + group_by().quantile() baseline, in one run. Each mode runs in its own process under GNU
# time; the table shows rows, seconds of aggregation (start-up excluded), M rows/s and peak RSS.
# Goal (issue): >= 100 M rows/s and < 1 GiB RSS for our path.
# Usage: bench/aggregate_100m.sh [POINTS [ROWS_PER_POINT [DATA_DIR]]]   (default 32 × 3 125 000 = 100 M rows)
# The data (about 1.3 GB) is generated once into DATA_DIR (default $TMPDIR/fracflow-aggbench-POINTSxROWS) and kept.
set -euo pipefail
points=${1:-32}
rows_per_point=${2:-3125000}
repo=$(cd "$(dirname "$0")/.." && pwd)
data=${3:-${TMPDIR:-/tmp}/fracflow-aggbench-${points}x${rows_per_point}}

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
  "$exe" generate "$data" "$points" "$rows_per_point"
  touch "$data/.complete"
fi
# Read every file once so that each mode starts from the page cache, not from disk.
cat "$data"/*/samples.parquet > /dev/null

echo "host: $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
results=$(mktemp)
trap 'rm -f "$results" "$results".*' EXIT
for mode in ours ours-warmup ours-all polars; do
  /usr/bin/time -v "$exe" "$mode" "$data" > "$results.out" 2> "$results.time"
  rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$results.time")
  read -r name rows seconds < "$results.out"
  echo "$name $rows $seconds $rss_kb" >> "$results"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

awk '
  { mode[NR] = $1; rows[NR] = $2; secs[NR] = $3; rss[NR] = $4; if ($1 == "polars") base = NR; if ($1 == "ours") ours = NR }
  END {
    printf "%-12s %12s %9s %10s %14s\n", "mode", "rows", "seconds", "M rows/s", "peak RSS MiB"
    for (i = 1; i <= NR; i++)
      printf "%-12s %12d %9.3f %10.1f %14.1f\n", mode[i], rows[i], secs[i], rows[i] / secs[i] / 1e6, rss[i] / 1024
    if (base && ours)
      printf "ours/polars: %.2fx the throughput, %.2fx the peak RSS\n", secs[base] / secs[ours], rss[ours] / rss[base]
  }' "$results"
