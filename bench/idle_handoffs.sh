#!/usr/bin/env bash
# Where the cores sit idle during one first run of one of bench/engine_vs_peers.sh's graphs, for fracflow and
# ninja, from kernel tracepoints (perf, run as root): `perf record -a -e sched:sched_switch -e sched:sched_wakeup`
# over the run. Each idle spell of a CPU (its idle task running) is named by who left the CPU as it began and who
# ran on it when it ended ("fracflow -> fracflow-exec": an engine thread slept, and the spell ended when a
# supervisor it had woken ran there); the table gives each pair's spells, their total and mean length, and the
# idle core time a node. Also counted: wake-ups completed by an idle CPU (a wake-up sent to an idle CPU is
# finished there, by its idle task, after the CPU comes out of its halt). On a VM whose vCPUs halt without
# polling, every hand-off between processes that lands on the idle vCPU pays for its wake-up: that is where a
# fan-in's idle time goes once the engine's CPU is small.
# Projects live under TMPDIR. Usage: bench/idle_handoffs.sh [SHAPE] [NODES]   (default fanin 1000)
set -euo pipefail
shape=${1:-fanin}
nodes=${2:-1000}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/bench/peer_graphs.sh"
command -v perf >/dev/null || { echo "idle_handoffs: needs perf (Debian linux-perf)" >&2; exit 1; }
peer_graph_setup "$shape" "$nodes"
printf '%s of %s nodes, first run, --jobs 2 / -j2; TMPDIR=%s (%s); vCPU idle: %s\n' "$shape" "$count" \
  "${TMPDIR:-/tmp}" "$(stat -f -c %T "${TMPDIR:-/tmp}")" \
  "$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo '?'), halt polling $(cat \
  /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null || echo '?') ns"

# traced LABEL COMMAND...: one first run in a fresh copy under the tracepoints; prints the idle table.
traced() {
  local label=$1 dir
  shift
  dir=$work/run-$label
  cp -r "$work/graph/$([ "$label" = ninja ] && echo ninja || echo fracflow)" "$dir"
  (cd "$dir" && FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks perf record -q -a -o "$dir/perf.data" \
    -e sched:sched_switch -e sched:sched_wakeup -- "$@" >/dev/null 2>&1) || { echo "$label failed" >&2; exit 1; }
  perf script -i "$dir/perf.data" -F comm,cpu,time,event,trace 2>/dev/null | python3 -c '
import collections, re, sys
label, nodes = sys.argv[1], int(sys.argv[2])
field = lambda line, name: (re.search(r"\b" + name + r"=(\S+)", line) or [None, None])[1]
idle_since, idle_after = {}, {}
spells, spent = collections.Counter(), collections.Counter()
wakeups = from_idle = 0
for line in sys.stdin:
    head = re.match(r"\s*(\S.*?)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):", line)
    if not head:
        continue
    comm, cpu, at, event = head.group(1), int(head.group(2)), float(head.group(3)), head.group(4)
    if event == "sched_wakeup":
        wakeups += 1
        from_idle += comm.startswith("swapper")
        continue
    before, after = field(line, "prev_comm"), field(line, "next_comm")
    if after and after.startswith("swapper"):
        idle_since[cpu], idle_after[cpu] = at, before
    elif cpu in idle_since:
        pair = f"{idle_after.pop(cpu)} -> {after}"
        spells[pair] += 1
        spent[pair] += at - idle_since.pop(cpu)
total = sum(spent.values())
print(f"{label}: {total * 1000:.1f} ms of idle core time ({total * 1e6 / nodes:.0f} us a node) in {sum(spells.values())} spells; {from_idle} of {wakeups} wake-ups completed by an idle CPU")
for pair, seconds in spent.most_common(6):
    print(f"  {pair:<34} {spells[pair]:6d} spells {seconds * 1000:8.1f} ms  mean {seconds * 1e6 / spells[pair]:6.0f} us")
' "$label" "$count"
}

traced ninja ninja -j2
traced fracflow "$fracflow" run bench --jobs 2
