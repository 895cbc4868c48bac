#!/usr/bin/env bash
# The system calls a first run makes per node, by who makes them, for fracflow and ninja on one of
# bench/engine_vs_peers.sh's graphs: every process and thread of one first run each under `strace -f`, each
# call counted for the engine (its scheduler and threads; ninja itself), the spawner and its supervisors (with
# the vfork child of each until it execs the command, as ninja's posix_spawn child counts as ninja), and the
# commands (`sh`, the same in both). Counts, not times: the machine's load barely moves them, so a change to the
# engine's work per node shows here when a wall-clock A/B is lost in the noise. With BASE=/path/to/an/older/fracflow
# that build is counted too.
# Projects live under TMPDIR. Usage: bench/syscalls_per_node.sh [SHAPE] [NODES]   (default fanin 1000)
set -euo pipefail
shape=${1:-fanin}
nodes=${2:-1000}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/bench/peer_graphs.sh"
command -v strace >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace; }
peer_graph_setup "$shape" "$nodes"

# traced LABEL COMMAND...: one first run under strace -f in a fresh copy of the label's project.
traced() {
  local label=$1 dir
  dir=$work/$label
  shift
  cp -r "$work/graph/$([ "$label" = ninja ] && echo ninja || echo fracflow)" "$dir"
  (cd "$dir" && FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks strace -f -qq -o "$work/$label.trace" "$@" \
    >/dev/null 2>&1) || { echo "$label failed" >&2; exit 1; }
}
traced ninja ninja -j2
traced fracflow "$fracflow" run bench --jobs 2
labels=(ninja fracflow)
if [ -n "${BASE:-}" ]; then
  traced base "$BASE" run bench --jobs 2
  labels+=(base)
fi

printf '%s of %s nodes, first run, --jobs 2 / -j2; system calls per node; TMPDIR=%s (%s)\n' "$shape" "$count" \
  "${TMPDIR:-/tmp}" "$(stat -f -c %T "${TMPDIR:-/tmp}")"
for label in "${labels[@]}"; do
  python3 - "$work/$label.trace" "$count" "$label" <<'PY'
import collections, re, sys
trace, nodes, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
call = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()")
result = re.compile(r"= (\d+)")
before, after = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
program = {}       # tid -> what it exec'd
parent = {}        # tid -> (parent tid, whether it is a thread)
pending = {}       # tid -> whether its unfinished clone makes a thread
root = None
for line in open(trace, errors="replace"):
    m = call.match(line)
    if not m:
        continue
    tid, resumed, name = int(m.group(1)), m.group(2), m.group(3)
    root = tid if root is None else root
    if name:
        (after if tid in program else before)[tid][name] += 1
    if (resumed or name) in ("clone", "clone3", "fork", "vfork"):
        if name and "<unfinished" in line:
            pending[tid] = "CLONE_THREAD" in line
            continue
        thread = "CLONE_THREAD" in line if name else pending.pop(tid, False)
        r = result.search(line.rsplit(")", 1)[-1])
        if r:
            parent[int(r.group(1))] = (tid, thread)
    if name == "execve" and "= -1" not in line and '"' in line:
        program[tid] = line.split('"')[1] + (" __spawner" if "__spawner" in line else "")

def exec_role(path):
    if path.endswith("__spawner") or path.endswith("fracflow-exec"):
        return "spawner"
    if path.endswith("/sh") or path.endswith("/dash"):
        return "commands"
    return "engine"

def role_before_exec(tid):
    # A thread works for its process; a new process is its parent's until it execs (a vfork child until its
    # exec counts as its parent, as ninja's posix_spawn child counts as ninja), but a fork of the spawner is a
    # supervisor.
    if tid == root or tid not in parent:
        return "engine"
    up, thread = parent[tid]
    role = current_role(up)
    return "supervisors" if role == "spawner" and not thread else role

def current_role(tid):
    return exec_role(program[tid]) if tid in program and tid != root else role_before_exec(tid)

counts = collections.defaultdict(collections.Counter)
for tid in set(before) | set(after):
    counts[role_before_exec(tid)].update(before[tid])
    counts[current_role(tid)].update(after[tid])
print(f"{label}:")
for who in ("engine", "spawner", "supervisors", "commands"):
    if who not in counts:
        continue
    total = sum(counts[who].values())
    top = ", ".join(f"{n} {c / nodes:.1f}" for n, c in counts[who].most_common(8))
    print(f"  {who:12} {total / nodes:6.1f} a node   ({top})")
PY
done
