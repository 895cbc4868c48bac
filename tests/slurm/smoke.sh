#!/usr/bin/env bash
# Smoke test for tests/slurm/cluster.sh: start a cluster in a temp dir, run one job that succeeds and one that
# exits 3, check their final states via scontrol, stop the cluster (also on failure). Exit non-zero on failure.
# Usage: tests/slurm/smoke.sh        (as root; `cluster.sh install` first on a fresh machine)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER=$HERE/cluster.sh
DIR=$(mktemp -d /tmp/fracflow-slurm-smoke.XXXXXX)
JOB_TIMEOUT=${SMOKE_JOB_TIMEOUT:-60}

finish() {
  local rc=$?
  "$CLUSTER" stop "$DIR" || rc=1
  if [ $rc = 0 ]; then
    rm -rf "$DIR"
  else
    echo "smoke: FAILED (rc=$rc); cluster dir kept: $DIR" >&2
    tail -n 20 "$DIR"/log/slurmctld.log "$DIR"/log/slurmd.log 2>/dev/null >&2 || true
  fi
  exit $rc
}
trap finish EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
t0=$(now)
"$CLUSTER" start "$DIR"
. "$DIR/env"

field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"; }

# wait_final ID -> prints the `scontrol show job -o` line once the job is in a terminal state (bounded)
wait_final() {
  local id=$1 line state deadline=$((SECONDS + JOB_TIMEOUT))
  while :; do
    line=$(timeout 10 scontrol show job -o "$id")
    state=$(field "$line" JobState)
    case $state in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE)
      echo "$line"; return 0 ;;
    esac
    [ $SECONDS -lt $deadline ] || { echo "smoke: job $id not finished after ${JOB_TIMEOUT}s: $state" >&2; return 1; }
    sleep 0.1
  done
}

ts=$(now)
ok=$(sbatch --parsable -J smoke-ok -o "$DIR/jobs/%j.out" -D "$DIR/jobs" --wrap 'echo hello from $SLURM_JOB_ID')
bad=$(sbatch --parsable -J smoke-bad -o "$DIR/jobs/%j.out" -D "$DIR/jobs" --wrap 'echo failing; exit 3')
[[ $ok =~ ^[0-9]+$ && $bad =~ ^[0-9]+$ ]] || { echo "smoke: bad sbatch output '$ok' '$bad'" >&2; exit 1; }

l_ok=$(wait_final "$ok")
l_bad=$(wait_final "$bad")
t_jobs=$(awk -v a="$ts" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')

fail=0
check() { # check WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "smoke: ok   $1 = $2"; else echo "smoke: FAIL $1 = '$2', want '$3'" >&2; fail=1; fi
}
check "job $ok JobState" "$(field "$l_ok" JobState)" COMPLETED
check "job $ok ExitCode" "$(field "$l_ok" ExitCode)" 0:0
check "job $ok output" "$(cat "$DIR/jobs/$ok.out")" "hello from $ok"
check "job $bad JobState" "$(field "$l_bad" JobState)" FAILED
check "job $bad ExitCode" "$(field "$l_bad" ExitCode)" 3:0
check "job $bad Reason" "$(field "$l_bad" Reason)" NonZeroExitCode
[ $fail = 0 ] || exit 1
echo "smoke: PASS (2 jobs sbatch->final ${t_jobs} s, total before stop $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }') s)"
