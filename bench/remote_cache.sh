#!/usr/bin/env bash
# The remote cache against a local build, on one machine: a WebDAV nginx (Debian nginx-light) on a free
# 127.0.0.1 port, clone A builds `bitstreams` (emulated) and uploads, clone B with an empty local cache gets it
# from the remote; then the cost of remote misses: `plan` and a first run of an N-node fan-in (default 1000)
# with the remote (read mode, every key a miss) against without. Prints seconds, bytes and ratios.
# Usage: bench/remote_cache.sh [NODES]
set -euo pipefail
nodes=${1:-1000}
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -x /usr/sbin/nginx ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light; }
cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
fracflow=${CARGO_TARGET_DIR:-$repo/target}/release/fracflow
work=$(mktemp -d)
nginx_pid=
cleanup() { [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/nginx/store/cache" "$work/nginx/body"
user=; [ "$(id -u)" = 0 ] && user="user root root;"
cat > "$work/nginx/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; $user
pid $work/nginx/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 256; }
http { access_log $work/nginx/access.log; client_body_temp_path $work/nginx/body;
  server { listen 127.0.0.1:$port; root $work/nginx/store; client_max_body_size 1g;
    location /cache/ { dav_methods PUT DELETE MKCOL; create_full_put_path on; } } }
CONF
/usr/sbin/nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
nginx_pid=$!
for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
export FRACFLOW_REMOTE_CACHE=http://127.0.0.1:$port/cache

now() { date +%s.%N; }
timed() { local t0; t0=$(now); "$@" >/dev/null 2>&1 || { echo failed: "$@" >&2; exit 1; }; awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
clone() { mkdir -p "$1/hw" "$1/pipelines"; cp -r "$repo/hw/accelerators" "$repo/hw/shell.yaml" "$repo/hw/testbeds" "$1/hw/"; cp -r "$repo/pipelines/frac" "$1/pipelines/"; }
run_in() { local dir=$1; shift; FRACFLOW_ROOT=$dir FRACFLOW_LOCK_DIR=$dir/locks "$fracflow" "$@"; }

clone "$work/a"; clone "$work/b"
a=$(timed run_in "$work/a" run bitstreams)
stored=$(du -sb "$work/nginx/store" | cut -f1)
a_puts=$(grep -c '"PUT ' "$work/nginx/access.log" || true)
seen=$(wc -l < "$work/nginx/access.log")
b=$(timed run_in "$work/b" run bitstreams)
count() { tail -n +"$((seen + 1))" "$work/nginx/access.log" | grep -c "\"$1 " || true; }
moved=$(tail -n +"$((seen + 1))" "$work/nginx/access.log" | awk '{ s += $10 } END { print s + 0 }')
printf 'bitstreams: local build (A, uploading) %ss, from the remote (B) %ss, %.1fx faster; %s bytes on the server\n' \
  "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')" "$stored"
printf 'A sent %s PUT; B sent %s GET, %s HEAD, %s PUT and received %s bytes\n' "$a_puts" "$(count GET)" "$(count HEAD)" "$(count PUT)" "$moved"

fan=$work/fan; mkdir -p "$fan/pipelines" "$fan/hw/testbeds"; printf 'kind: emulated\n' > "$fan/hw/testbeds/emulated.yaml"
python3 - "$nodes" "$fan/pipelines/fan.yaml" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
y = ["pipeline: fan", "nodes:"]
for i in range(n - 1):
    y.append(f"  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} > \"$FRACFLOW_OUT/o\"'")
y.append("  all:\n    kind: command\n    outputs: [o]\n    deps: [" + ", ".join(f"n{i}" for i in range(n - 1)) + "]\n    run: 'echo all > \"$FRACFLOW_OUT/o\"'")
open(path, "w").write("\n".join(y) + "\n")
PY
plan_local=$(FRACFLOW_REMOTE_CACHE= timed run_in "$fan" plan fan)
plan_remote=$(timed run_in "$fan" plan fan)
first_remote=$(FRACFLOW_REMOTE_CACHE_MODE=read timed run_in "$fan" run fan --jobs 2)
rm -rf "$fan/.fracflow" "$fan/results"
first_local=$(FRACFLOW_REMOTE_CACHE= timed run_in "$fan" run fan --jobs 2)
noop_remote=$(timed run_in "$fan" run fan --jobs 2)
noop_local=$(FRACFLOW_REMOTE_CACHE= timed run_in "$fan" run fan --jobs 2)
per() { awk -v a="$1" -v b="$2" -v n="$nodes" 'BEGIN { printf "%.3f ms/node", (b - a) * 1000 / n }'; }
printf '%s-node fan-in, every key a remote miss: plan %ss local, %ss with the remote (%s); first run %ss local, %ss with the remote in read mode (%s)\n' \
  "$nodes" "$plan_local" "$plan_remote" "$(per "$plan_local" "$plan_remote")" "$first_local" "$first_remote" "$(per "$first_local" "$first_remote")"
printf 'no-op (every key a local hit: the remote is not asked): %ss local, %ss with the remote\n' "$noop_local" "$noop_remote"
