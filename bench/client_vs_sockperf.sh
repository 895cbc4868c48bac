#!/usr/bin/env bash
# Our load client (`fracflow client`) against sockperf and netperf on loopback, in one run, with the same
# CPU placement (every server on core SERVER_CPU, every client on core CLIENT_CPU), closed loop with one
# request in flight, for 64 B and 4 KiB per direction. The cases:
#   ours-bare       fracflow client -Z 1 against bench/bare_echo.c (read whatever came, write it back)
#   ours-bare-bp    the same with --busy-poll (client spins on a non-blocking socket; server unchanged)
#   ours-pattern    fracflow client -Z 1 -K 0 against the emulated device with pattern_slot in slot 0
#   sockperf        sockperf ping-pong --tcp --full-rtt against `sockperf server --tcp`
#   netperf         netperf TCP_RR -j (-- -r S,S -D) against netserver
# Sizes are TCP payload bytes each way, each tool's own header included (so like with like on the wire):
# our -X/-R (the 64-byte fRAC header included: a 64 B request is header-only, and pattern_slot answers
# it with the header line echoed), sockperf -m (its 14-byte header included), netperf -r.
# Latency is the full round trip everywhere: ours = from before the request's first write to the last
# response byte read (the samples' latency_ns; fperf's last-piece latency, which starts after the write
# returns, is printed below the table), sockperf --full-rtt, netperf -j P50/P99_LATENCY (from netperf's
# coarse histogram). Ratios: ours p50 / sockperf p50 and ours tps / netperf tps at the same size.
#
# Installs what it needs: sockperf (Debian main), netperf (Debian non-free: if `apt-get install netperf`
# finds nothing, the script adds /etc/apt/sources.list.d/fracflow-bench-non-free.sources with
# `Components: non-free` for this release, installs, and removes that file again; by hand, add
# `non-free` to the Components: line of /etc/apt/sources.list.d/debian.sources, then `apt-get update &&
# apt-get install netperf`), pyarrow in a venv under ~/.cache/fracflow-bench (to read our samples), and
# builds fracflow and bench/bare_echo.c. Loopback only; every run is bounded; every server started here
# is stopped by pid on exit, failure included.
# Usage: bench/client_vs_sockperf.sh [SECONDS]   (default 5 measured seconds per case)
# Environment: CLIENT_CPU (default 0), SERVER_CPU (default 1).
set -euo pipefail
secs=${1:-5}
client_cpu=${CLIENT_CPU:-0}
server_cpu=${SERVER_CPU:-1}
sizes=(64 4096)
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
nonfree_file=/etc/apt/sources.list.d/fracflow-bench-non-free.sources
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '%s\n' "$*" >&2; }

# ---- installs -------------------------------------------------------------------------------------
export DEBIAN_FRONTEND=noninteractive
apt_updated=
apt_update() { [[ -n $apt_updated ]] || { apt-get update -qq >/dev/null 2>&1 || true; apt_updated=1; }; }
if ! command -v sockperf >/dev/null; then
  apt_update
  apt-get install -y -qq sockperf >/dev/null
fi
netperf_reason=
if ! { command -v netperf && command -v netserver; } >/dev/null; then
  apt_update
  if ! apt-get install -y -qq netperf >/dev/null 2>&1; then
    log "netperf: not found in the enabled apt components; it lives in Debian's non-free component."
    . /etc/os-release
    uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    uri=${uri:-http://deb.debian.org/debian}
    log "netperf: enabling non-free for ${VERSION_CODENAME:-?} from $uri in $nonfree_file (removed again after)"
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$uri" "${VERSION_CODENAME:-bookworm}" >"$nonfree_file"
    if ! apt-get update -qq >/dev/null 2>&1; then
      netperf_reason="apt-get update with non-free enabled failed (the mirror may not serve non-free)"
    elif ! apt-get install -y -qq netperf >/dev/null 2>&1; then
      netperf_reason="not installable even with non-free enabled (apt-get install netperf failed)"
    fi
    rm -f "$nonfree_file"
  fi
fi
if [[ -z $netperf_reason ]] && ! { command -v netperf && command -v netserver; } >/dev/null; then
  netperf_reason="netperf or netserver not on PATH after install"
fi
command -v taskset >/dev/null || { apt_update; apt-get install -y -qq util-linux >/dev/null; }
command -v cc >/dev/null || { apt_update; apt-get install -y -qq gcc libc6-dev >/dev/null; }
venv=${XDG_CACHE_HOME:-$HOME/.cache}/fracflow-bench/venv
if ! "$venv/bin/python" -c 'import pyarrow' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q pyarrow
fi
py=$venv/bin/python

cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
fracflow=${CARGO_TARGET_DIR:-$repo/target}/release/fracflow
cc -O2 -pthread -o "$work/bare_echo" "$repo/bench/bare_echo.c"

nodes=$repo/results/frac-bitstreams/latest/nodes
image=$nodes/image/jtag/frac.bit
partial="$nodes/partials[unit=pattern_slot]/icap/c00_f07.bin"
if [[ ! -f $image || ! -f $partial ]]; then
  (cd "$repo" && "$fracflow" run bitstreams >/dev/null)
fi

# ---- helpers --------------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
on_client() { taskset -c "$client_cpu" "$@"; }
wait_port() { # port: until something accepts on it (at most 10 s)
  local i
  for i in $(seq 100); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2).close()" 2>/dev/null && return 0
    sleep 0.1
  done
  log "nothing listens on 127.0.0.1:$1"
  return 1
}
wait_line() { # file: until it has a line (at most 10 s)
  local i
  for i in $(seq 100); do
    [[ -s $1 ]] && return 0
    sleep 0.1
  done
  log "no listening line in $1"
  return 1
}

rows=$work/rows
: >"$rows"
row() { printf '%s %s %s %s %s %s\n' "$@" >>"$rows"; } # case size p50_us p99_us tps lastpiece_p50_us

ours() { # case size port [extra flags]
  local name=$1 size=$2 port=$3
  shift 3
  local out=$work/$name-$size
  local rc=0
  on_client timeout $((secs + 30)) "$fracflow" client -c 127.0.0.1 -p "$port" -t rr -d $((secs + 1)) --skip 1 \
    -n 1 -C 1 -S "$client_cpu" -m "$size" -X "$size" -R "$size" -Z 1 -K 0 -q --samples "$out.parquet" "$@" \
    >"$out.log" 2>&1 || rc=$?
  grep -E 'SATURATED|timed out|failed' "$out.log" | sed "s|^|$name $size: |" >&2 || true
  if [[ $rc -ne 0 || ! -s $out.parquet ]]; then
    log "$name $size: fracflow client exited $rc: $(tail -2 "$out.log" | tr '\n' ' ')"
    row "$name" "$size" - - - -
    return
  fi
  row "$name" "$size" $("$py" - "$out.parquet" "$secs" <<'PY'
import sys, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1], columns=["latency_ns", "latency_last_piece_ns"])
lat = sorted(t.column("latency_ns").to_pylist())
last = sorted(t.column("latency_last_piece_ns").to_pylist())
def pct(v, q):  # nearest rank
    return v[max(0, min(len(v) - 1, -(-len(v) * q // 100) - 1))] / 1000
print(f"{pct(lat, 50):.2f} {pct(lat, 99):.2f} {len(lat) / float(sys.argv[2]):.0f} {pct(last, 50):.2f}")
PY
)
}

# ---- servers (started directly, not through a function, so that $! is the server itself) --------------------------------------------------------------------------------------
taskset -c "$server_cpu" "$work/bare_echo" 0 >"$work/bare.out" 2>&1 &
pids+=($!)
wait_line "$work/bare.out"
bare_port=$(awk '{ print $2 }' "$work/bare.out")

taskset -c "$server_cpu" "$fracflow" device serve --listen 127.0.0.1:0 --image "$image" >"$work/emu.out" 2>"$work/emu.err" &
pids+=($!)
wait_line "$work/emu.out"
emu_addr=$(awk '{ print $2 }' "$work/emu.out")
"$fracflow" device load --addr "$emu_addr" --slot 0 "$partial" >"$work/load.out" 2>&1 ||
  { cat "$work/load.out" >&2; exit 1; }
emu_port=${emu_addr##*:}

sp_port=$(free_port)
taskset -c "$server_cpu" sockperf server --tcp -i 127.0.0.1 -p "$sp_port" >"$work/sockperf-server.log" 2>&1 &
pids+=($!)
wait_port "$sp_port"

np_port=
if [[ -z $netperf_reason ]]; then
  np_port=$(free_port)
  taskset -c "$server_cpu" netserver -D -L 127.0.0.1 -p "$np_port" >"$work/netserver.log" 2>&1 &
  pids+=($!)
  wait_port "$np_port" || { netperf_reason="netserver did not start: $(tail -1 "$work/netserver.log")"; np_port=; }
fi

# ---- runs -----------------------------------------------------------------------------------------
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for size in "${sizes[@]}"; do
  ours ours-bare "$size" "$bare_port"
  ours ours-bare-bp "$size" "$bare_port" --busy-poll
  ours ours-pattern "$size" "$emu_port"

  out=$work/sockperf-$size.log
  if on_client timeout $((secs + 30)) sockperf ping-pong --tcp -i 127.0.0.1 -p "$sp_port" -m "$size" -t "$secs" \
    --full-rtt >"$out" 2>&1; then
    row sockperf "$size" $(awk '
      /percentile 50.000 =/ { p50 = $NF } /percentile 99.000 =/ { p99 = $NF }
      /\[Valid Duration\]/ { for (i = 1; i <= NF; i++) { if ($i ~ /^RunTime=/) { sub(/RunTime=/, "", $i); t = $i }
                                                           if ($i ~ /^ReceivedMessages=/) { sub(/ReceivedMessages=/, "", $i); n = $i } } }
      END { printf "%.2f %.2f %.0f -\n", p50, p99, (t > 0 ? n / t : 0) }' "$out")
  else
    log "sockperf $size: failed: $(tail -2 "$out" | tr '\n' ' ')"
    row sockperf "$size" - - - -
  fi

  if [[ -n $np_port ]]; then
    out=$work/netperf-$size.log
    if on_client timeout $((secs + 30)) netperf -P 0 -H 127.0.0.1 -p "$np_port" -t TCP_RR -l "$secs" -j \
      -T "$client_cpu,$server_cpu" -- -r "$size,$size" -D -o P50_LATENCY,P99_LATENCY,THROUGHPUT >"$out" 2>&1; then
      row netperf "$size" $(tail -1 "$out" | awk -F, '{ printf "%.2f %.2f %.0f -\n", $1, $2, $3 }')
    else
      log "netperf $size: failed: $(tail -2 "$out" | tr '\n' ' ')"
      row netperf "$size" - - - -
    fi
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- table ----------------------------------------------------------------------------------------
printf '# loopback, closed loop, 1 connection, %s s per case; servers on core %s, clients on core %s; %s cores\n' \
  "$secs" "$server_cpu" "$client_cpu" "$(nproc)"
printf '# load average before %s, after %s (shared host: other work runs beside this)\n' "$load_before" "$load_after"
awk '
  { c[NR] = $1; s[NR] = $2; p50[NR] = $3; p99[NR] = $4; tps[NR] = $5; lp[NR] = $6
    if ($1 == "sockperf") sp[$2] = $3
    if ($1 == "netperf") np[$2] = $5 }
  function ratio(a, b) { return (a == "-" || b == "" || b == "-" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
  END {
    printf "%-14s %6s %9s %9s %12s %13s %13s\n", "case", "size", "p50_us", "p99_us", "trans/s", "p50/sockperf", "tps/netperf"
    for (i = 1; i <= NR; i++) {
      ours = c[i] ~ /^ours/
      printf "%-14s %6s %9s %9s %12s %13s %13s\n", c[i], s[i], p50[i], p99[i], tps[i],
        ours ? ratio(p50[i], sp[s[i]]) : "", ours ? ratio(tps[i], np[s[i]]) : ""
    }
    printf "# ours, fperf last-piece p50 (after the write returns):"
    for (i = 1; i <= NR; i++) if (c[i] ~ /^ours/) printf " %s/%s=%sus", c[i], s[i], lp[i]
    printf "\n"
  }' "$rows"
if [[ -n $netperf_reason ]]; then
  printf 'netperf: not available (%s)\n' "$netperf_reason"
fi
