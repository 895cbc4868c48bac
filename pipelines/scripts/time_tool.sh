#!/bin/sh
# Usage: time_tool.sh TOOL ROUNDS FILE SIZE_MIB — checksums FILE ROUNDS times with TOOL and prints one JSON
# line with the mean wall time per round (from the monotonic-ish `date +%s%N`) and the throughput.
set -eu
tool=$1 rounds=$2 file=$3 size=$4
command -v "$tool" >/dev/null || { echo "time_tool.sh: $tool is not installed" >&2; exit 2; }
start=$(date +%s%N)
i=0
while [ "$i" -lt "$rounds" ]; do
  "$tool" "$file" >/dev/null
  i=$((i + 1))
done
end=$(date +%s%N)
awk -v ns=$((end - start)) -v r="$rounds" -v s="$size" -v t="$tool" 'BEGIN {
  sec = ns / 1e9 / r
  printf "{\"size_mib\": %d, \"tool\": \"%s\", \"rounds\": %d, \"seconds\": %.6f, \"mib_per_s\": %.1f}\n", s, t, r, sec, s / sec
}'
