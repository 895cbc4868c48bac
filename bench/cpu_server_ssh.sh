#!/usr/bin/env bash
# What starting the CPU baseline server over ssh costs per point, against the in-process server, in one run:
# `fracflow run cpu --smoke --rerun 'cpu*'` (4 CPU points of Fig. 16) on the emulated profile (server in the
# engine) and on the same profile plus a `server:` section reaching 127.0.0.1 through a throwaway sshd (a real
# OpenSSH server started here with generated keys, killed by pid at the end). Both measure the same points for
# the same seconds, so the difference in wall time is the ssh path: the leftover check, the launch, waiting for
# TCP, and the stop.
#
#   bench/cpu_server_ssh.sh [REPEATS]      (default 3; needs openssh-server: apt-get install openssh-server)
set -euo pipefail
repeats=${1:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
sshd_pid=
cleanup() {
  [ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null && wait "$sshd_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x /usr/sbin/sshd ] || { echo "needs /usr/sbin/sshd: apt-get install openssh-server" >&2; exit 2; }
# The dev build: the client, server and emulator crates are optimised in it (Cargo.toml), and what is compared
# here is process and ssh start-up, not fracflow's own compute.
cargo build --quiet -p fracflow-cli --manifest-path "$repo/Cargo.toml"
fracflow=${CARGO_TARGET_DIR:-$repo/target}/debug/fracflow

# The project: this repository's figure pipelines and accelerators, and a private cache.
project=$work/project
mkdir -p "$project/hw/testbeds"
cp -r "$repo/pipelines" "$project/"
cp -r "$repo/hw/accelerators" "$repo/hw/shell.yaml" "$project/hw/"
cp "$repo/hw/testbeds/emulated.yaml" "$project/hw/testbeds/"

# The sshd.
mkdir -p "$work/sshd" /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$work/sshd/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/sshd/client_key"
cp "$work/sshd/client_key.pub" "$work/sshd/authorized_keys"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
server_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$work/sshd/config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $work/sshd/host_key
AuthorizedKeysFile $work/sshd/authorized_keys
PidFile $work/sshd/pid
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
EOF
/usr/sbin/sshd -D -e -f "$work/sshd/config" 2>"$work/sshd/log" &
sshd_pid=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done

{
  cat "$repo/hw/testbeds/emulated.yaml"
  cat <<EOF
server:
  host: $(id -un)@127.0.0.1
  addr: 127.0.0.1
  port: $server_port
  sudo: ""
  fracflow: $fracflow
  ssh_options: [-p, "$port", -i, $work/sshd/client_key, -o, StrictHostKeyChecking=no, -o, UserKnownHostsFile=/dev/null, -o, LogLevel=ERROR]
EOF
} > "$project/hw/testbeds/ssh-server.yaml"

run() { # run TESTBED -> wall seconds of one full re-measurement of the 4 points
  local start end
  start=$(date +%s.%N)
  (cd "$project" && FRACFLOW_ROOT=$project FRACFLOW_LOCK_DIR=$work/locks \
    "$fracflow" run cpu --smoke --testbed "$1" --rerun 'cpu*' >"$work/last.log" 2>&1) ||
    { cat "$work/last.log" >&2; exit 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
# Warm-up: the build chain and the first measurement (not timed).
run emulated >/dev/null
run ssh-server >/dev/null
local_times=(); ssh_times=()
for _ in $(seq "$repeats"); do
  local_times+=("$(run emulated)")
  ssh_times+=("$(run ssh-server)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
l=$(median "${local_times[@]}")
s=$(median "${ssh_times[@]}")
# The run's node views are links into the cache: follow them.
# Last ran: the smoke variant on the ssh-server testbed, whose runs `latest-smoke-ssh-server` names.
points=$(find -L "$project/results/scalability_cpu/latest-smoke-ssh-server/nodes" -name summary.json | wc -l)
echo "fracflow run cpu --smoke --rerun 'cpu*' ($points points), median of $repeats, load $(cut -d' ' -f1 /proc/loadavg)"
echo "  in-process server : ${l} s   (${local_times[*]})"
echo "  server over ssh   : ${s} s   (${ssh_times[*]})"
awk -v l="$l" -v s="$s" -v p="$points" 'BEGIN { printf "  ratio ssh/local   : %.3f; ssh cost per point: %.0f ms\n", s / l, (s - l) / p * 1000 }'
