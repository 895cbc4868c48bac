#!/bin/sh
# Lays the aggregate's summary.csv out as the driver page's table (docs/tools.md §3.8): one row per tool
# and size, one column per direction, each cell `THROUGHPUT Mb/s (KPPS Kpps)`, `-` where nothing was measured
# (the seed's TCP loopback cells), and a mark on a cell whose point the watchdog reset. Markdown on stdout.
#
#   sh pipelines/sume/seed_table.sh summary.csv
set -u
[ -r "${1:-}" ] || {
	echo "seed_table.sh: no summary.csv to read ('${1:-}')" >&2
	exit 1
}
awk -F, '
function clean(s) { gsub(/^"|"$/, "", s); return s }
function num(s) { s = clean(s); return s == "" ? "" : s + 0 }
function order(t) { return t ~ /^iperf/ ? 1 : t == "netperf" ? 2 : 3 }
NR == 1 {
	for (i = 1; i <= NF; i++) col[clean($i)] = i
	split("direction tool size throughput_mbps kpps watchdog_resets n source", need, " ")
	for (k in need) if (!(need[k] in col)) { print "seed_table.sh: summary.csv has no column " need[k] > "/dev/stderr"; bad = 1; exit 1 }
	next
}
{
	d = clean($col["direction"]); t = clean($col["tool"]); s = num($col["size"])
	key = t " " s
	if (!(key in seen)) { seen[key] = 1; rows[++nrows] = key; tool[key] = t; size[key] = s }
	cell = sprintf("%.4g Mb/s (%.4g Kpps)", num($col["throughput_mbps"]), num($col["kpps"]))
	if (num($col["n"]) > 1) cell = cell sprintf(", n=%d", num($col["n"]))
	if (num($col["watchdog_resets"]) > 0) cell = cell " **watchdog reset**"
	value[key, d] = cell
	src = clean($col["source"])
	if (!(src in sources)) { sources[src] = 1; srclist = srclist (srclist == "" ? "" : ", ") src }
}
END {
	if (bad) exit 1
	print "# NetFPGA SUME: TX only / RX only / loopback"
	print ""
	print "Numbers from: " srclist " (the `source` column of summary.csv; the run report names the testbed)."
	print ""
	print "| test | TX only | RX only | loopback |"
	print "|---|---|---|---|"
	# Rows in the order of the seed table: the TCP tools first, then the packet generator; sizes ascending.
	for (r = 1; r <= nrows; r++) rank[rows[r]] = order(tool[rows[r]]) * 1e9 + size[rows[r]]
	for (r = 2; r <= nrows; r++) {
		k = rows[r]
		for (q = r - 1; q >= 1 && rank[rows[q]] > rank[k]; q--) rows[q + 1] = rows[q]
		rows[q + 1] = k
	}
	for (r = 1; r <= nrows; r++) {
		k = rows[r]
		line = "| " tool[k] " - " size[k] " B"
		split("tx-only rx-only loopback", dirs, " ")
		for (j = 1; j <= 3; j++) line = line " | " ((k, dirs[j]) in value ? value[k, dirs[j]] : "-")
		print line " |"
	}
}' "$1"
