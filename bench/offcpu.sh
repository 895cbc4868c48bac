#!/usr/bin/env bash
# Where the engine's threads wait during a chain's first run, from kernel tracepoints (perf, run as root): an
# N-node chain (`echo i > out` per node, as bench/chain_latency.sh makes it) runs once under
# `perf record -a -g -e sched:sched_switch`; every time one of fracflow's threads or processes leaves the CPU
# blocked (state D: a disk or a buffer it waits for), the time until it runs again is added to its row, named by
# the thread (`main` is the engine's scheduler thread), the system call it was in and what the kernel waited for
# (a discard of freed blocks, a syncfs, an fsync, a directory block under writeback, a vfork child's exec). The
# table shows each row's count, total milliseconds and microseconds per node. Waits of the committer run beside
# a chain's critical path; waits of `main` and of the node threads are on it.
# Projects live under TMPDIR (the filesystem under test: on a tmpfs nothing waits for a disk).
# Usage: bench/offcpu.sh [N] [BINARY]   (default 3 000 nodes; BINARY: a fracflow build to measure instead)
set -euo pipefail
nodes=${1:-3000}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/bench/chain_project.sh"
command -v perf >/dev/null || { echo "offcpu: needs perf (Debian linux-perf)" >&2; exit 1; }
chain_bench_setup "$nodes"
[ -n "${2:-}" ] && fracflow=$2
dir=$(chain_project "$work" fracflow)
printf 'chain of %s nodes, first run; TMPDIR=%s (%s, mounted %s); load before: %s\n' "$nodes" "${TMPDIR:-/tmp}" \
  "$(stat -f -c %T "${TMPDIR:-/tmp}")" "$(findmnt -n -o OPTIONS --target "${TMPDIR:-/tmp}" 2>/dev/null || echo '?')" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$dir" && FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks \
  perf record -q -a -g -o "$dir/perf.data" -e sched:sched_switch -- "$fracflow" run chain --jobs 2 >/dev/null 2>&1)
perf script -i "$dir/perf.data" -F comm,pid,tid,time,event,trace,ip,sym 2>/dev/null | python3 -c '
import collections, re, sys
nodes = int(sys.argv[1])
engine_pid = None
blocked = {}  # tid -> (time it left the CPU, row)
total, count = collections.Counter(), collections.Counter()
def kind(frames):
    for marker, name in (("blkdev_issue_discard", "discard of freed blocks"), ("sync_filesystem", "syncfs"),
                         ("do_fsync", "fsync"), ("__ext4_find_entry", "directory block under I/O"),
                         ("kernel_clone", "vfork child until its exec")):
        if marker in frames:
            return name
    return "other"
for sample in sys.stdin.read().split("\n\n"):
    lines = sample.strip().split("\n")
    if not lines or "sched_switch" not in lines[0]:
        continue
    head = lines[0]
    fields = head.split()
    comm, pid_tid, at = fields[0], fields[1], float(fields[2].rstrip(":"))
    pid, tid = pid_tid.split("/")
    woken = re.search(r"next_pid=(\d+)", head)
    if woken and woken.group(1) in blocked:
        left, row = blocked.pop(woken.group(1))
        total[row] += at - left
        count[row] += 1
    if not comm.startswith("fracflow") or "prev_state=D" not in head:
        continue
    if comm == "fracflow" and engine_pid is None:
        engine_pid = pid
    frames = [line.split()[1].split("+")[0] for line in lines[1:] if len(line.split()) > 1]
    call = next((f for f in frames if f.startswith(("__x64_sys_", "__do_sys_"))), "?")
    call = re.sub(r"^__(x64|do)_sys_", "", call)
    thread = "main" if tid == pid and comm == "fracflow" else f"{comm} thread" if comm == "fracflow" else comm
    blocked[tid] = (at, (thread, tid, call, kind(frames)))
print("%-22s %7s %-10s %-27s %6s %9s %8s" % ("thread", "tid", "call", "waiting for", "count", "total ms", "us/node"))
for row, seconds in sorted(total.items(), key=lambda item: -item[1])[:15]:
    thread, tid, call, what = row
    print(f"{thread:22} {tid:>7} {call:10} {what:27} {count[row]:6} {seconds * 1e3:9.1f} {seconds * 1e6 / nodes:8.1f}")
' "$nodes"
