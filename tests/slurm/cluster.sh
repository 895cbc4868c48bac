#!/usr/bin/env bash
# Single-node Slurm test cluster on localhost, without systemd, for fracflow's Slurm executor tests.
#
#   cluster.sh install      install slurm-wlm + munge with apt-get, only if a binary is missing
#   cluster.sh start DIR    munged + slurmctld + slurmd, everything (key, socket, conf, state, logs) under DIR;
#                           waits (bounded) until the node is idle; writes DIR/env and DIR/pids
#   cluster.sh stop DIR     cancels the cluster's jobs (scancel via DIR's slurm.conf), then stops exactly the pids in
#                           DIR/pids (SIGTERM, SIGKILL after 20 s); idempotent
#   cluster.sh status DIR   exit 0 if every pid in DIR/pids is alive, prints sinfo
#
# Clients: `. DIR/env` (exports SLURM_CONF) and use sbatch/squeue/scontrol/scancel as usual.
# Must run as root (SlurmUser=root, munged runs as root with its own key). No cgroups, no accounting:
# sacct does not work on this cluster (see FACTS.md); finished jobs stay in scontrol for MinJobAge.
#
# DIR/pids: one 'NAME PID' line per daemon (munged, slurmctld, slurmd); entries are only trusted while
# /proc/PID/comm still equals NAME. start refuses while any listed daemon is alive. Starting again on the same DIR
# keeps StateSaveLocation (job ids continue). The daemons share the caller's process group: a terminal Ctrl-C
# stops them too (stop is then a no-op). One node with the machine's real CPUs: 2 single-CPU jobs run at a time here.
#
# Environment knobs: SLURM_TEST_PORT (first port tried, default 26817; slurmctld=P, slurmd=P+1),
# SLURM_TEST_MIN_JOB_AGE (default 60), SLURM_TEST_START_TIMEOUT (default 30 s).
set -euo pipefail

PROG=$(basename "$0")
START_TIMEOUT=${SLURM_TEST_START_TIMEOUT:-30}
MIN_JOB_AGE=${SLURM_TEST_MIN_JOB_AGE:-60}
PORT_BASE=${SLURM_TEST_PORT:-26817}

die() { echo "$PROG: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# The daemon names we expect for each pids-file entry (guards against pid reuse).
alive_as() { # alive_as PID NAME -> 0 if PID is alive, not a zombie, and its comm is NAME
  local pid=$1 name=$2 comm state
  [ -r "/proc/$pid/comm" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  state=$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || return 1
  [ "$comm" = "$name" ] && [ "$state" != Z ]
}

running() { # running PID -> 0 while PID exists and is not a zombie. For a daemon just started with `&`: until the
  # forked shell has exec'd it, its comm is still the shell's, so alive_as would call a starting daemon dead.
  local state
  state=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

live_pids() { # prints "NAME PID" for every live entry of DIR/pids
  local f=$1/pids name pid
  [ -f "$f" ] || return 0
  while read -r name pid; do
    [ -n "${pid:-}" ] && alive_as "$pid" "$name" && echo "$name $pid"
  done <"$f"
  return 0
}

port_in_use() { # any TCP socket (any state) bound to local port $1, IPv4 or IPv6
  local hex
  hex=$(printf '%04X' "$1")
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v h=":$hex" 'NR > 0 && $2 ~ h"$" { f = 1 } END { exit !f }'
}

cmd_install() {
  local need=0 b
  for b in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || need=1
  done
  if [ $need = 0 ]; then echo "$PROG: slurm-wlm and munge already installed"; return 0; fi
  # Keep the packages' init scripts from starting system-wide munged/slurmd during the install (no systemd in
  # CI containers; we run our own daemons). Only if no policy is installed already; removed afterwards.
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e $policy ]; then
    printf '#!/bin/sh\nexit 101\n' >$policy && chmod 0755 $policy && made_policy=1
  fi
  local rc=0
  {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 slurm-wlm munge
  } || rc=$?
  [ $made_policy = 1 ] && rm -f $policy
  return $rc
}

cmd_start() {
  [ $# = 1 ] || die "usage: $PROG start DIR"
  [ "$(id -u)" = 0 ] || die "must run as root (SlurmUser=root)"
  local t0 dir
  t0=$(now)
  mkdir -p "$1"
  dir=$(cd "$1" && pwd -P)

  local live
  live=$(live_pids "$dir")
  [ -z "$live" ] || die "a cluster is already running from $dir (live: $(echo $live)); run '$PROG stop $dir' first"
  rm -f "$dir/pids" "$dir/env"

  for b in munged mungekey slurmctld slurmd sinfo; do
    command -v "$b" >/dev/null 2>&1 || die "$b not found; run '$PROG install'"
  done

  # Ports: two free consecutive ports starting at PORT_BASE (slurmctld, slurmd).
  local port="" p
  for ((p = PORT_BASE; p < PORT_BASE + 200; p += 2)); do
    if ! port_in_use $p && ! port_in_use $((p + 1)); then port=$p; break; fi
  done
  [ -n "$port" ] || die "no free port pair in $PORT_BASE..$((PORT_BASE + 200))"

  local node
  node=$(hostname -s)
  # Real CPUs/RealMemory of this machine, as slurmd detects them (a mismatch would DRAIN the node).
  local hw cpus mem
  hw=$(slurmd -C | head -1)
  cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
  [ -n "$cpus" ] && [ -n "$mem" ] || die "cannot parse 'slurmd -C': $hw"

  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" "$dir/jobs"
  chmod 0755 "$dir" "$dir/munge" # munged requires o+x on the socket directory
  chmod 0700 "$dir/state" "$dir/spool"

  # Own munge key (mungekey is in munge >= 0.5.14; fall back to random bytes).
  if [ ! -s "$dir/munge/munge.key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile="$dir/munge/munge.key"
    else
      dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none
    fi
  fi
  chmod 0600 "$dir/munge/munge.key"
  local sock=$dir/munge/munge.socket.2

  cat >"$dir/slurm.conf" <<EOF
# generated by tests/slurm/cluster.sh $(date -u +%FT%TZ)
ClusterName=fracflow-test
SlurmctldHost=${node}(127.0.0.1)
SlurmctldPort=${port}
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${sock}
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/spool
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/slurmd.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups (containers without systemd / delegated cgroup v2): track processes by /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
# No accounting storage (no slurmdbd/MariaDB): sacct cannot report jobs on this cluster.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# Default batch_sched_delay=3 starts sbatch jobs on a ~3 s grid (trivial job 1-4 s to COMPLETED); with 0 they start on
# the 1 s background tick (~1 s). Real clusters keep the delay and have queues: the engine must not assume fast starts.
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a job without --mem gets the whole node's memory and jobs run one at a time.
DefMemPerCPU=256
ReturnToService=2
# Finished jobs stay in scontrol (and squeue -t all) for at least MinJobAge s; slurmctld purges on a timer, so
# 60 gives 100-103 s here. Long enough for an engine polling every few seconds or restarting, short enough that a
# test can see a purged job id ('Invalid job id specified') within ~2 minutes. (Slurm default: 300.)
MinJobAge=${MIN_JOB_AGE}
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
NodeName=${node} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf

  # From here on, kill what we started if anything fails.
  cleanup_failed_start() {
    local rc=$?
    if [ $rc != 0 ]; then
      echo "$PROG: start failed; logs:" >&2
      tail -n 15 "$dir"/log/*.log "$dir"/log/*.out 2>/dev/null >&2 || true
      cmd_stop "$dir" >&2 || true
    fi
  }
  trap cleanup_failed_start EXIT

  # munged: foreground (-F) so $! is the daemon; -f because DIR may sit below a 0700 directory (mktemp -d,
  # /root) which munged's socket-permission check rejects, and to reuse a stale socket after a crash.
  munged -F -f --socket="$sock" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed" --num-threads=2 </dev/null >"$dir/log/munged.out" 2>&1 &
  echo "munged $!" >>"$dir/pids"
  local deadline=$((SECONDS + START_TIMEOUT))
  until munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "munged did not come up within ${START_TIMEOUT}s"
    running "$(awk '$1 == "munged" { print $2 }' "$dir/pids")" || die "munged exited"
    sleep 0.05
  done

  # -D: foreground, so $! is the daemon. -i: ignore unreadable state (first start / stale state).
  slurmctld -D -i -f "$SLURM_CONF" </dev/null >"$dir/log/slurmctld.out" 2>&1 &
  echo "slurmctld $!" >>"$dir/pids"
  slurmd -D -f "$SLURM_CONF" </dev/null >"$dir/log/slurmd.out" 2>&1 &
  echo "slurmd $!" >>"$dir/pids"

  local state="" name pid
  while :; do
    state=$(timeout 5 sinfo -h -n "$node" -o '%T' 2>/dev/null | head -1 || true)
    [ "$state" = idle ] && break
    [ $SECONDS -lt $deadline ] || die "node not idle within ${START_TIMEOUT}s (state: '${state}')"
    while read -r name pid; do
      running "$pid" || die "$name (pid $pid) exited during start"
    done <"$dir/pids"
    sleep 0.1
  done

  cat >"$dir/env" <<EOF
# source this file: . $dir/env
export SLURM_CONF=$dir/slurm.conf
# for scripts/tests (not read by Slurm itself):
export FRACFLOW_SLURM_DIR=$dir
export FRACFLOW_SLURM_PARTITION=debug
export FRACFLOW_SLURM_NODE=$node
# munge clients need the socket explicitly: munge -n -S \$FRACFLOW_MUNGE_SOCKET | unmunge -S \$FRACFLOW_MUNGE_SOCKET
export FRACFLOW_MUNGE_SOCKET=$sock
EOF
  trap - EXIT
  echo "$PROG: cluster up in $(elapsed "$t0") s (node $node idle, ports $port/$((port + 1)), . $dir/env)"
}

cmd_stop() {
  [ $# = 1 ] || die "usage: $PROG stop DIR"
  local dir=$1
  [ -d "$dir" ] || { echo "$PROG: $dir does not exist; nothing to stop"; return 0; }
  dir=$(cd "$dir" && pwd -P)
  [ -f "$dir/pids" ] || { echo "$PROG: no $dir/pids; nothing to stop"; return 0; }
  local live
  live=$(live_pids "$dir")

  # Cancel this cluster's jobs first: slurmstepd and the job processes are not children of slurmd and would
  # outlive it. scancel talks to this cluster's slurmctld only (SLURM_CONF), nothing is killed by name.
  if grep -q '^slurmctld ' <<<"$live" && [ -f "$dir/slurm.conf" ]; then
    export SLURM_CONF=$dir/slurm.conf
    if [ -n "$(timeout 5 squeue -h -o %i 2>/dev/null || true)" ]; then
      timeout 10 scancel --partition=debug >/dev/null 2>&1 || true
      local dl=$((SECONDS + 15))
      while [ $SECONDS -lt $dl ] &&
        [ -n "$(timeout 5 squeue -h -t PD,R,CG,S -o %i 2>/dev/null || true)" ]; do sleep 0.2; done
    fi
  fi

  # Stop in reverse start order: slurmd, slurmctld, munged.
  local name pid
  for name in slurmd slurmctld munged; do
    pid=$(awk -v n="$name" '$1 == n { print $2 }' <<<"$live")
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  done
  local deadline=$((SECONDS + 20)) left
  while :; do
    left=$(live_pids "$dir")
    [ -z "$left" ] && break
    if [ $SECONDS -ge $deadline ]; then
      echo "$PROG: still alive after 20 s, sending SIGKILL: $(echo $left)" >&2
      while read -r name pid; do kill -KILL "$pid" 2>/dev/null || true; done <<<"$left"
      local dl2=$((SECONDS + 5))
      while [ -n "$(live_pids "$dir")" ] && [ $SECONDS -lt $dl2 ]; do sleep 0.1; done
      [ -z "$(live_pids "$dir")" ] || die "could not stop: $(echo $(live_pids "$dir"))"
      break
    fi
    sleep 0.1
  done
  rm -f "$dir/pids"
  echo "$PROG: stopped${live:+ ($(echo $live))}"
}

cmd_status() {
  [ $# = 1 ] || die "usage: $PROG status DIR"
  local dir=$1 want live
  [ -f "$dir/pids" ] || { echo "not running"; return 1; }
  want=$(wc -l <"$dir/pids")
  live=$(live_pids "$dir")
  echo "$live"
  [ "$(grep -c . <<<"$live")" = "$want" ] || { echo "not all daemons alive"; return 1; }
  SLURM_CONF=$dir/slurm.conf timeout 5 sinfo
}

case "${1:-}" in
install) shift; cmd_install "$@" ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
status) shift; cmd_status "$@" ;;
*) echo "usage: $PROG install | start DIR | stop DIR | status DIR" >&2; exit 2 ;;
esac
