#!/bin/sh
# Gathers every dependency's timing.json (FRACFLOW_DEP_* directories) into one CSV with its provenance.
set -eu
host=$(cat /proc/sys/kernel/hostname 2>/dev/null || hostname)
echo "size_mib,tool,rounds,seconds,mib_per_s,host,source"
env | sed -n 's/^FRACFLOW_DEP_[A-Z0-9_]*=//p' | sort | while read -r dir; do
  sed -n 's/.*"size_mib": \([0-9]*\), "tool": "\([^"]*\)", "rounds": \([0-9]*\), "seconds": \([0-9.]*\), "mib_per_s": \([0-9.]*\).*/\1,\2,\3,\4,\5/p' \
    "$dir/timing.json" | sed "s/\$/,$host,measured on this host (no device)/"
done
