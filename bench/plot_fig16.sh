#!/usr/bin/env bash
# Re-drawing Figure 16 from stored summaries: `fracflow plot fig16` (SVG + PNG + PDF of the six panels) against
# the artifact's way, matplotlib drawing the same six panels from the same summary.csv to the same three files.
# Needs a finished fig16 run (`fracflow run fig16 --smoke` is enough); installs matplotlib with pip if missing.
# Usage: bench/plot_fig16.sh [REPEATS]   (default 5; prints the median wall time of each and the ratio)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
cargo build --locked --release -q -p fracflow-cli
fracflow=target/release/fracflow
# The newest full run, else the newest smoke run (each variant has its own `latest` link).
run=$(readlink -e results/scalability/latest || readlink -e results/scalability/latest-smoke || true)
[ -n "$run" ] && [ -f "$run/nodes/aggregate/summary.csv" ] || { echo "no fig16 run: run 'fracflow run fig16 --smoke' first" >&2; exit 2; }
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install --quiet matplotlib
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cat > "$out/fig16.py" <<'PY'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
sizes = sorted({float(r["m"]) for r in rows})
units = sorted({float(r["units"]) for r in rows})
fig, axes = plt.subplots(len(sizes), len(units), figsize=(15, 4.5 * len(sizes)), squeeze=False)
for i, m in enumerate(sizes):
    for j, k in enumerate(units):
        ax = axes[i][j]
        for series in ["fRAC", "CPU", "DPU"]:
            pts = sorted((float(r["clients"]), float(r["median_us"]), float(r["p25_us"]), float(r["p75_us"]))
                         for r in rows if r["series"] == series and float(r["m"]) == m and float(r["units"]) == k)
            if not pts:
                ax.plot([], [], label=series)
                continue
            x, y, lo, hi = zip(*pts)
            ax.plot(x, y, marker="o", label=series)
            ax.fill_between(x, lo, hi, alpha=0.2)
        ax.set_yscale("log"); ax.set_xlabel("Clients"); ax.set_ylabel("Latency (µs)")
        ax.set_title(f"{int(k)} accelerators/cores · {int(m)} B")
axes[0][0].legend()
fig.text(0.01, 0.01, "matplotlib baseline", fontsize=8)
for ext in ["svg", "png", "pdf"]:
    fig.savefig(f"{sys.argv[2]}/fig16.{ext}", dpi=144)
PY

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_of() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
ours=$(for _ in $(seq "$repeats"); do time_of "$fracflow" plot fig16 --run "$run" --out "$out/ours"; done | median)
peer=$(for _ in $(seq "$repeats"); do time_of python3 "$out/fig16.py" "$run/nodes/aggregate/summary.csv" "$out"; done | median)
printf "re-draw fig16 (SVG+PNG+PDF, %s repeats, median wall time, host load %s)\n" "$repeats" "$(cut -d' ' -f1 /proc/loadavg)"
printf "  fracflow plot fig16 (release)   %6.3f s\n" "$ours"
printf "  matplotlib %-20s %6.3f s\n" "$(python3 -c 'import matplotlib; print(matplotlib.__version__)')" "$peer"
printf "  ratio matplotlib / fracflow     %6.2fx\n" "$(echo "$peer / $ours" | bc -l)"
