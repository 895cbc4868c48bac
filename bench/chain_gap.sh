#!/usr/bin/env bash
# Where a chain's per-node time goes between two commands, from kernel tracepoints (perf, run as root): an
# N-node chain (`echo i > out` per node), first run; for fracflow and ninja in alternating rounds, the median
# gap from one node's `sh` exiting to the next node's `sh` exec'ing (the engine's latency on the critical
# path; ninja's is its own); then, in one more run each, the user page faults a node costs in fracflow's spawner
# (which forks supervisors when the engine asks for one) and in its supervisors once each had its first command
# (copy-on-write copies on the critical path; counts, which the machine's load does not move).
# With BASE=/path/to/an/older/fracflow, that build runs in the same rounds.
# Projects live under TMPDIR (a tmpfs there leaves the filesystem's inode allocation out of the gap).
# Usage: bench/chain_gap.sh [N] [ROUNDS]   (default 300 nodes, 3 rounds)
set -euo pipefail
nodes=${1:-300}
rounds=${2:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/bench/chain_project.sh"
command -v perf >/dev/null || { echo "chain_gap: needs perf (Debian linux-perf)" >&2; exit 1; }
chain_bench_setup "$nodes"

# One traced first run in a fresh project: label, the binary or `ninja`, and what to trace: `gap` (scheduler
# tracepoints only) or `faults` (page faults too, which slows every fault down: never timed together). Prints the
# label and the median gap, or the faults.
traced() {
  local dir
  dir=$(chain_project "$work" "$1")
  local run=("$2" run chain --jobs 2)
  [ "$2" = ninja ] && run=(ninja -j2)
  local events=(-e sched:sched_process_exec -e sched:sched_process_exit)
  [ "$3" = faults ] && events+=(-e exceptions:page_fault_user -e syscalls:sys_exit_recvmsg)
  (cd "$dir" && perf record -q -a -o "$dir/perf.data" "${events[@]}" -- "${run[@]}" >/dev/null 2>&1)
  perf script -i "$dir/perf.data" -F comm,pid,time,event 2>/dev/null | python3 -c '
import statistics, sys, collections
label = sys.argv[1]
gaps, exited = [], None
faults = collections.Counter()
events = collections.defaultdict(list)  # fracflow-exec pid -> its events in order
for line in sys.stdin:
    comm, pid, time, event = line.split()[:4]
    time = float(time.rstrip(":"))
    if comm == "sh" and event.startswith("sched:sched_process_exit"):
        exited = time
    elif comm == "sh" and event.startswith("sched:sched_process_exec") and exited is not None:
        gaps.append((time - exited) * 1e3)
        exited = None
    elif comm == "fracflow-exec":
        events[pid].append(event)
line = f"{label:9} gap {statistics.median(gaps):.3f} ms (median of {len(gaps)})"
if sys.argv[2] == "faults":
    nodes = int(sys.argv[3])
    line = f"{label:9}"
    # The spawner is started by an exec; its supervisors are forked from it and run no exec under that name.
    spawner = next((p for p, seen in events.items() if "sched:sched_process_exec" in seen[0]), None)
    in_spawner = sum(1 for e in events.get(spawner, []) if "page_fault" in e)
    after = 0
    for pid, seen in events.items():
        if pid == spawner:
            continue
        first = next((i for i, e in enumerate(seen) if "recvmsg" in e), len(seen))
        after += sum(1 for e in seen[first:] if "page_fault" in e)
    line += f" faults per node: spawner {in_spawner / nodes:.1f}, supervisors after their first command {after / nodes:.1f}"
print(line)
' "$1" "$3" "$nodes"
}

printf 'chain of %s nodes, first run, %s rounds; TMPDIR=%s (%s); load before: %s\n' "$nodes" "$rounds" \
  "${TMPDIR:-/tmp}" "$(stat -f -c %T "${TMPDIR:-/tmp}")" "$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  traced ninja ninja gap
  traced fracflow "$fracflow" gap
  if [ -n "${BASE:-}" ]; then traced base "$BASE" gap; fi
done
traced fracflow "$fracflow" faults
if [ -n "${BASE:-}" ]; then traced base "$BASE" faults; fi
