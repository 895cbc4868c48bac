#!/bin/sh
# One benchmark point of the NetFPGA SUME table (docs/tools.md §3.8: TX only / RX only / loopback × tool × size): snapshots
# the counters, runs one tool in one direction at one size for a bounded time, snapshots again, and prints
# `result.NAME=VALUE` lines for the pipeline's `metrics:` (and everything it ran on stderr, for the log).
#
#   sh hw/sume/bench.sh --tool iperf|iperf3|netperf|pkt-gen|sockperf --direction tx-only|rx-only|loopback
#       --size BYTES --seconds S --counters sume:UNIT|sysfs:IFACE|none
#       [--port IFACE]           the SUME port cabled to the peer (tx-only, rx-only)
#       [--loop TX_IF:RX_IF]     two SUME ports cabled to each other (loopback: TX_IF sends, RX_IF receives)
#       [--local ADDR]           this host's address on --port (127.0.0.1 on the loopback variant)
#       [--peer ADDR]            the peer host's address (127.0.0.1 on the loopback variant)
#       [--peer-if IFACE]        the peer's NIC, for pkt-gen sending from the peer (rx-only)
#       [--host-exec CMD] [--peer-exec CMD]   prefixes reaching the host under test and the peer (lib.sh)
#       [--iperf iperf|iperf3]   the binary behind `--tool iperf` (iperf2's text, or iperf3's JSON)
#       [--pktgen-wait S]        pkt-gen's -w (seconds it waits for the PHY before sending or receiving)
#       [--pktgen-args ARGS]     extra pkt-gen arguments for the sender (-D MAC, -d IP:PORT, …)
#       [--server-port P]        first port of the servers (default: 20000 + pid % 20000, a new one per point)
#
# What each direction means (the seed's words, then how it maps):
#   tx-only   this host sends, the peer receives. iperf/iperf3/sockperf: client here, server on the peer;
#             netperf TCP_STREAM; pkt-gen -f tx on --port. Counters: --port's tx side.
#   rx-only   the peer sends, this host receives. iperf2: client on the peer, server here (iperf2's -R is not
#             in every version); iperf3 -R; netperf TCP_MAERTS; sockperf: client on the peer, server here;
#             pkt-gen -f rx here and -f tx on the peer. Counters: --port's rx side.
#   loopback  on the board: port TX_IF → port RX_IF of the same board, pkt-gen only (-f tx on TX_IF, -f rx on
#             RX_IF; the seed has no TCP loopback numbers, and TCP between two ports of one host needs a VNET
#             jail). On 127.0.0.1 (the sume-loopback pipeline): both directions at once: iperf3 --bidir,
#             netperf TCP_STREAM and TCP_MAERTS together (summed), two sockperf streams, one each way (summed).
#             Counters: RX_IF's rx side (sume), lo's rx side (sysfs).
#
# What `size` is: the tool's own size knob: pkt-gen's frame length without CRC (-l; the seed's 60 B minimum
# and 1500 B), iperf/iperf3's write length (-l), netperf's send size (-m, the remote one for TCP_MAERTS),
# sockperf's UDP payload (-m).
#
# The numbers printed, and where each comes from:
#   result.throughput_mbps  the tool's own figure, in 10^6 bit/s: iperf2's Mbits/sec (-f m), iperf3's receiver
#                           bits_per_second, netperf's THROUGHPUT (10^6bits/s); for pkt-gen and sockperf
#                           packets × size × 8 / seconds, with the packets the receiving tool counted (or the
#                           sending one, tx-only) and the sender's seconds. Loopback on 127.0.0.1 sums both ways.
#   result.elapsed_s        the seconds the tool measured over (the sender's, for pkt-gen and sockperf).
#   result.packets          the host's counter delta on the measured side (after − before; see above).
#   result.kpps             result.packets / result.elapsed_s / 1000.
#   result.hw_packets       (sume only) the board's hw_tx_packets/hw_rx_packets delta (its own MAC counters).
#   result.dropped          the driver's tx_dropped/rx_dropped delta on the measured interface(s).
#   result.watchdog_resets  dev.sume.UNIT.reset_ctr after − before: the driver's TX-stuck watchdog reset the
#                           board this many times during the point (the run is tainted when it is not 0). With
#                           sysfs counters there is no board and no watchdog: always 0 (`watchdog=none` says so).
set -u
. "$(dirname "$0")/lib.sh"

TOOL='' DIRECTION='' SIZE='' DURATION='' COUNTERS=none PORT_IF='' LOOP='' LOCAL='' PEER='' PEER_IF=''
IPERF=iperf PKTGEN_WAIT=2 PKTGEN_ARGS='' SERVER_PORT=''
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || die "option $1 needs a value"
	case $1 in
	--tool) TOOL=$2 ;;
	--direction) DIRECTION=$2 ;;
	--size) SIZE=$2 ;;
	--seconds) DURATION=$2 ;;
	--counters) COUNTERS=$2 ;;
	--port) PORT_IF=$2 ;;
	--loop) LOOP=$2 ;;
	--local) LOCAL=$2 ;;
	--peer) PEER=$2 ;;
	--peer-if) PEER_IF=$2 ;;
	--host-exec) HOST_EXEC=$2 ;;
	--peer-exec) PEER_EXEC=$2 ;;
	--iperf) IPERF=$2 ;;
	--pktgen-wait) PKTGEN_WAIT=$2 ;;
	--pktgen-args) PKTGEN_ARGS=$2 ;;
	--server-port) SERVER_PORT=$2 ;;
	*) die "unknown option $1 (the options are listed at the top of $0)" ;;
	esac
	shift 2
done

is_count() {
	case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac
}
case $TOOL in iperf | iperf3 | netperf | pkt-gen | sockperf) ;; *) die "--tool: iperf, iperf3, netperf, pkt-gen or sockperf, not '$TOOL'" ;; esac
case $DIRECTION in tx-only | rx-only | loopback) ;; *) die "--direction: tx-only, rx-only or loopback, not '$DIRECTION'" ;; esac
is_count "$SIZE" && [ "$SIZE" -gt 0 ] || die "--size must be a positive number of bytes, not '$SIZE'"
is_count "$DURATION" && [ "$DURATION" -gt 0 ] || die "--seconds must be a positive whole number, not '$DURATION'"
is_count "$PKTGEN_WAIT" || die "--pktgen-wait must be a whole number of seconds, not '$PKTGEN_WAIT'"
[ -n "$LOCAL" ] && [ -n "$PEER" ] || die "--local and --peer are needed (127.0.0.1 for the loopback variant)"
[ "$TOOL" = iperf ] && [ "${IPERF##*/}" = iperf3 ] && TOOL=iperf3
if [ -z "$SERVER_PORT" ]; then
	# A fresh port per point: a server left behind on a remote host (bounded by its own timeout) cannot hold
	# the next point's port.
	SERVER_PORT=$((20000 + $$ % 20000))
fi

# The interfaces whose counters matter, and which side of each.
case $COUNTERS in
sume:*)
	UNIT=${COUNTERS#sume:}
	is_count "$UNIT" || die "--counters sume:UNIT needs the device unit (0 for dev.sume.0), not '$UNIT'"
	if [ "$DIRECTION" = loopback ]; then
		LOOP_TX=${LOOP%%:*} LOOP_RX=${LOOP#*:}
		[ -n "$LOOP" ] && [ "$LOOP_TX" != "$LOOP" ] || die "--loop TX_IF:RX_IF is needed for loopback on the board"
		case $TOOL in pkt-gen) ;; *) die "loopback on the board is measured with pkt-gen only (the seed has no TCP loopback numbers; TCP between two ports of one host needs a VNET jail)" ;; esac
		IFACES_USED="$LOOP_TX $LOOP_RX"
	else
		[ -n "$PORT_IF" ] || die "--port IFACE (the SUME port cabled to the peer) is needed for $DIRECTION"
		IFACES_USED=$PORT_IF
	fi
	;;
sysfs:*)
	IFACES_USED=${COUNTERS#sysfs:}
	[ -n "$IFACES_USED" ] || die "--counters sysfs:IFACE needs an interface (lo)"
	;;
none) IFACES_USED='' ;;
*) die "--counters: sume:UNIT, sysfs:IFACE or none, not '$COUNTERS'" ;;
esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fracflow-sume-bench.XXXXXX") || die "cannot create a temporary directory"
BACKGROUND=''
cleanup() {
	for pid in $BACKGROUND; do
		kill "$pid" 2>/dev/null
	done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# `show CMD…` prints what runs where, for the log.
show() {
	echo "bench: run: $*" >&2
}
# `start_bg NAME WHERE CMD…` runs CMD in the background on WHERE (host: the host under test, peer: the peer),
# output in $WORK/NAME.out, its pid in $LAST_PID. It is a simple command, never a function: its pid is then
# the process `kill` reaches (timeout, sudo or ssh), where an asynchronous function would be a subshell that
# ignores SIGINT.
start_bg() {
	_name=$1
	_where=$2
	shift 2
	show "[$_where] $* &"
	if [ "$_where" = host ]; then
		# shellcheck disable=SC2086 # the prefix is a word list
		$HOST_EXEC "$@" >"$WORK/$_name.out" 2>&1 &
	else
		# shellcheck disable=SC2086
		$PEER_EXEC "$@" >"$WORK/$_name.out" 2>&1 &
	fi
	LAST_PID=$!
	BACKGROUND="$BACKGROUND $LAST_PID"
}
# `run_fg NAME WHERE CMD…`: the same in the foreground; returns CMD's exit status.
run_fg() {
	_name=$1
	_where=$2
	shift 2
	show "[$_where] $*"
	if [ "$_where" = host ]; then
		# shellcheck disable=SC2086
		$HOST_EXEC "$@" >"$WORK/$_name.out" 2>&1
	else
		# shellcheck disable=SC2086
		$PEER_EXEC "$@" >"$WORK/$_name.out" 2>&1
	fi
}
# `stop_receiver PID WHERE`: a receiver that prints its count on SIGINT (pkt-gen -f rx, sockperf sr) is
# stopped as soon as its sender is done: SIGINT to timeout (or sudo), which passes it on. Through ssh the
# signal would only end the local ssh and lose the count, so there the receiver's own timeout ends it.
stop_receiver() {
	if [ "$2" = host ]; then _prefix=$HOST_EXEC; else _prefix=$PEER_EXEC; fi
	case " $_prefix" in
	*" ssh"* | */ssh*) ;;
	*) kill -INT "$1" 2>/dev/null ;;
	esac
	wait "$1"
}
# `dump NAME`: a tool's output into the log (stderr) and into the node's tool.txt.
dump() {
	if [ -f "$WORK/$1.out" ]; then
		sed "s/^/[$1] /" "$WORK/$1.out" >&2
		if [ -n "${FRACFLOW_OUT:-}" ]; then
			sed "s/^/[$1] /" "$WORK/$1.out" >>"$FRACFLOW_OUT/tool.txt"
		fi
	fi
}
fail_with() {
	_name=$1
	shift
	dump "$_name"
	die "$*"
}
# `server_up NAME PATTERN`: waits for a server's listening line; a server that never listens is retried (75).
server_up() {
	if ! wait_for_line "$WORK/$1.out" "$2" 15; then
		dump "$1"
		tempfail "$1 did not start listening within 15 s (port $SERVER_PORT busy?); a retry picks another port"
	fi
}

# --- counters ------------------------------------------------------------------------------------------------
SUME_IFC_COUNTERS="hw_tx_packets hw_rx_packets tx_packets rx_packets tx_dropped rx_dropped"
SYSFS_COUNTERS="tx_packets rx_packets tx_dropped rx_dropped"

# `snapshot WHEN`: $WORK/counters.WHEN as NAME=VALUE lines (reset_ctr, IFACE.COUNTER).
snapshot() {
	_when=$1
	_file="$WORK/counters.$_when"
	: >"$_file"
	case $COUNTERS in
	sume:*)
		_prefix="dev.sume.$UNIT."
		_names="${_prefix}reset_ctr"
		for _if in $IFACES_USED; do
			for _c in $SUME_IFC_COUNTERS; do
				_names="$_names $_prefix$_if.$_c"
			done
		done
		# One call for all of them (one ssh round trip, and a consistent moment), `name: value` per line.
		# shellcheck disable=SC2086
		if ! host_run sysctl $_names >"$WORK/sysctl.out" 2>&1; then
			sed 's/^/[sysctl] /' "$WORK/sysctl.out" >&2
			die "reading the SUME counters failed (sysctl $_prefix…): is if_sume loaded and the board attached? fracflow runs the rescan, driver and configure steps just before the points that need them: was the host under test rebooted, or the driver unloaded, since? Then run fracflow again"
		fi
		awk -v p="$_prefix" '/: / { n = $1; sub(/:$/, "", n); if (index(n, p) == 1) print substr(n, length(p) + 1) "=" $2 }' \
			"$WORK/sysctl.out" >"$_file"
		for _n in $_names; do
			grep -q "^${_n#"$_prefix"}=[0-9][0-9]*\$" "$_file" ||
				die "counter $_n is missing or not a number in: $(tr '\n' ' ' <"$WORK/sysctl.out")"
		done
		;;
	sysfs:*)
		_files=''
		for _c in $SYSFS_COUNTERS; do
			_files="$_files /sys/class/net/$IFACES_USED/statistics/$_c"
		done
		# shellcheck disable=SC2086
		host_run cat $_files >"$WORK/sysfs.out" || die "cannot read the counters of $IFACES_USED under /sys/class/net"
		set -- $SYSFS_COUNTERS
		while read -r _value; do
			echo "$IFACES_USED.$1=$_value" >>"$_file"
			shift
		done <"$WORK/sysfs.out"
		;;
	esac
	sed "s/^/bench: counters $_when: /" "$_file" >&2
	if [ -n "${FRACFLOW_OUT:-}" ]; then
		sed "s/^/$_when /" "$_file" >>"$FRACFLOW_OUT/counters.txt"
	fi
}

# `delta NAME`: DELTA=after − before (a variable, not output: a `die` inside $(…) would only end a subshell).
delta() {
	_b=$(sed -n "s/^$1=//p" "$WORK/counters.before")
	_a=$(sed -n "s/^$1=//p" "$WORK/counters.after")
	is_count "$_b" && is_count "$_a" || die "counter $1 has no value before ('$_b') or after ('$_a')"
	DELTA=$((_a - _b))
}

# --- tools ---------------------------------------------------------------------------------------------------
# Each sets MBPS (10^6 bit/s) and ELAPSED (seconds).
MBPS='' ELAPSED=''
GRACE=15 # seconds a tool may take beyond the point's duration before `timeout` stops it

# iperf2: `-f m` fixes the unit; the report line is `[  3]  0.0-10.0 sec  2563 MBytes  2150 Mbits/sec` (2.0.5
# pads the interval, `0.0- 1.0 sec`; 2.1 prints `0.0000-10.0040 sec`). The last such line wins.
iperf2_report() {
	awk '/ Mbits\/sec/ && / sec / {
		line = $0
		if (match(line, /[0-9.]+- *[0-9.]+ sec/)) {
			iv = substr(line, RSTART, RLENGTH); sub(/ sec$/, "", iv); gsub(/ /, "", iv)
			split(iv, t, "-"); secs = t[2] - t[1]
		}
		if (match(line, /[0-9.]+ Mbits\/sec/)) { rate = substr(line, RSTART, RLENGTH); sub(/ Mbits\/sec/, "", rate) }
		found = 1
	}
	END { if (found && secs > 0 && rate != "") printf "%s %.3f\n", rate, secs; else exit 1 }' "$WORK/$1.out"
}

run_iperf2() {
	_t=$((DURATION + GRACE))
	case $DIRECTION in
	tx-only)
		start_bg server peer timeout "$_t" "$IPERF" -s -p "$SERVER_PORT" -B "$PEER"
		server_up server 'listening'
		run_fg client host timeout "$_t" "$IPERF" -c "$PEER" -p "$SERVER_PORT" -l "$SIZE" -t "$DURATION" -f m ||
			fail_with client "iperf client failed"
		;;
	rx-only)
		start_bg server host timeout "$_t" "$IPERF" -s -p "$SERVER_PORT" -B "$LOCAL"
		server_up server 'listening'
		run_fg client peer timeout "$_t" "$IPERF" -c "$LOCAL" -p "$SERVER_PORT" -l "$SIZE" -t "$DURATION" -f m ||
			fail_with client "iperf client (on the peer) failed"
		;;
	loopback)
		die "iperf2 has no both-ways mode here; use iperf3 (--bidir) for loopback on 127.0.0.1"
		;;
	esac
	dump client
	_r=$(iperf2_report client) || die "no 'Mbits/sec' report line in iperf's output"
	# shellcheck disable=SC2086 # split into fields on purpose
	set -- $_r
	MBPS=$1 ELAPSED=$2
}

# iperf3 -J: cJSON prints one member per line, so a small awk flattens it to `end.sum_received.bytes=…`.
flatten_json() {
	awk '{
		line = $0
		gsub(/^[ \t]+/, "", line); gsub(/[ \t,]+$/, "", line)
		if (line ~ /^"[^"]*":[ \t]*[{[]$/) { k = line; sub(/^"/, "", k); sub(/".*/, "", k); path[++d] = k; next }
		if (line == "{" || line == "[") { path[++d] = "-"; next }
		if (line == "}" || line == "]") { d--; next }
		if (line ~ /^"[^"]*":/) {
			k = line; sub(/^"/, "", k); sub(/".*/, "", k)
			v = line; sub(/^"[^"]*":[ \t]*/, "", v); gsub(/"/, "", v)
			p = ""; for (i = 2; i <= d; i++) p = p path[i] "."
			print p k "=" v
		}
	}' "$1"
}
json_value() {
	sed -n "s/^$2=//p" "$1" | head -n 1
}

run_iperf3() {
	_t=$((DURATION + GRACE))
	start_bg server peer timeout "$_t" "$IPERF3" -s -1 -p "$SERVER_PORT" -B "$PEER" --forceflush
	server_up server 'listening'
	case $DIRECTION in
	tx-only) _mode='' ;;
	rx-only) _mode=-R ;;
	loopback) _mode=--bidir ;;
	esac
	# shellcheck disable=SC2086 # _mode is one word or none
	run_fg client host timeout "$_t" "$IPERF3" -c "$PEER" -p "$SERVER_PORT" -l "$SIZE" -t "$DURATION" $_mode -J
	_status=$?
	flatten_json "$WORK/client.out" >"$WORK/client.flat"
	_error=$(json_value "$WORK/client.flat" error)
	[ "$_status" -eq 0 ] && [ -z "$_error" ] || fail_with client "iperf3 failed: ${_error:-exit status $_status}"
	dump client
	# The receiver's numbers: what arrived. --bidir adds the reverse stream's receiver.
	_bps=$(json_value "$WORK/client.flat" end.sum_received.bits_per_second)
	_secs=$(json_value "$WORK/client.flat" end.sum_received.seconds)
	[ -n "$_bps" ] && [ -n "$_secs" ] || die "no end.sum_received in iperf3's JSON"
	if [ "$DIRECTION" = loopback ]; then
		_rbps=$(json_value "$WORK/client.flat" end.sum_received_bidir_reverse.bits_per_second)
		_rsecs=$(json_value "$WORK/client.flat" end.sum_received_bidir_reverse.seconds)
		[ -n "$_rbps" ] || die "no end.sum_received_bidir_reverse in iperf3's JSON (iperf3 older than 3.7 has no --bidir)"
	else
		_rbps=0 _rsecs=0
	fi
	set -- $(awk -v a="$_bps" -v b="$_rbps" -v s="$_secs" -v r="$_rsecs" \
		'BEGIN { printf "%.3f %.3f\n", (a + b) / 1e6, (r > s ? r : s) }')
	MBPS=$1 ELAPSED=$2
}

# netperf: -P 0 drops the banner, -k prints KEY=VALUE lines.
netperf_report() {
	awk -F= '$1 == "THROUGHPUT" { t = $2 } $1 == "THROUGHPUT_UNITS" { u = $2 } $1 == "ELAPSED_TIME" { e = $2 }
		END { if (t == "" || e == "") exit 1; if (u != "10^6bits/s") { print "units " u; exit 2 } print t, e }' "$WORK/$1.out"
}

run_netperf() {
	_t=$((DURATION + GRACE))
	start_bg server peer timeout $((_t + 5)) netserver -D -4 -L "$PEER" -p "$SERVER_PORT"
	server_up server 'Starting netserver'
	_keys=THROUGHPUT,THROUGHPUT_UNITS,ELAPSED_TIME,LOCAL_SEND_SIZE,REMOTE_SEND_SIZE
	_stream="netperf -H $PEER -p $SERVER_PORT -l $DURATION -P 0 -t TCP_STREAM -- -m $SIZE -k $_keys"
	# TCP_MAERTS: the remote sends; `-m ,SIZE` sets the remote's send size.
	_maerts="netperf -H $PEER -p $SERVER_PORT -l $DURATION -P 0 -t TCP_MAERTS -- -m ,$SIZE -k $_keys"
	case $DIRECTION in
	tx-only)
		# shellcheck disable=SC2086
		run_fg stream host timeout "$_t" $_stream || fail_with stream "netperf TCP_STREAM failed"
		_runs=stream
		;;
	rx-only)
		# shellcheck disable=SC2086
		run_fg maerts host timeout "$_t" $_maerts || fail_with maerts "netperf TCP_MAERTS failed"
		_runs=maerts
		;;
	loopback)
		# shellcheck disable=SC2086
		start_bg stream host timeout "$_t" $_stream
		_spid=$LAST_PID
		# shellcheck disable=SC2086
		run_fg maerts host timeout "$_t" $_maerts || fail_with maerts "netperf TCP_MAERTS failed"
		wait "$_spid" || fail_with stream "netperf TCP_STREAM failed"
		_runs="stream maerts"
		;;
	esac
	MBPS=0 ELAPSED=0
	for _r in $_runs; do
		dump "$_r"
		_report=$(netperf_report "$_r") || die "netperf printed no THROUGHPUT/ELAPSED_TIME (or another unit): $_report"
		set -- $_report
		set -- $(awk -v m="$MBPS" -v e="$ELAPSED" -v t="$1" -v s="$2" 'BEGIN { printf "%.3f %.3f\n", m + t, (s > e ? s : e) }')
		MBPS=$1 ELAPSED=$2
	done
}

# pkt-gen's summary: `Sent N packets B bytes E events L bytes each in T seconds.` (`Received …` on -f rx).
pktgen_report() {
	awk -v word="$2" '$1 == word && $3 == "packets" && $NF ~ /^seconds\.?$/ {
		n = $2
		for (i = 1; i <= NF; i++) if ($i == "in") t = $(i + 1)
		found = 1
	} END { if (!found) exit 1; print n, t }' "$WORK/$1.out"
}

run_pktgen() {
	_w=$PKTGEN_WAIT
	# The sender's run: its -w wait, then DURATION seconds of sending, then SIGINT makes it print its summary.
	_send_t=$((DURATION + _w))
	# The receiver starts first and gets SIGINT once the sender is done (or, through ssh, stops on its own a
	# little after it). Its clock starts at its first packet and runs until SIGINT, so its count is taken over
	# the sender's seconds.
	_recv_t=$((_send_t + _w + 5))
	case $DIRECTION in
	tx-only)
		# shellcheck disable=SC2086 # PKTGEN_ARGS is a word list
		run_fg sender host timeout -s INT "$_send_t" pkt-gen -i "$PORT_IF" -f tx -l "$SIZE" -w "$_w" $PKTGEN_ARGS
		;;
	rx-only | loopback)
		if [ "$DIRECTION" = rx-only ]; then
			_rx_if=$PORT_IF
			[ -n "$PEER_IF" ] || die "--peer-if (the peer's NIC) is needed for pkt-gen rx-only"
		else
			_rx_if=$LOOP_RX
		fi
		start_bg receiver host timeout -s INT "$_recv_t" pkt-gen -i "$_rx_if" -f rx -w "$_w"
		_rpid=$LAST_PID
		wait_for_line "$WORK/receiver.out" 'Ready' $((_w + 10)) || fail_with receiver "pkt-gen -f rx on $_rx_if never got ready"
		if [ "$DIRECTION" = rx-only ]; then
			# shellcheck disable=SC2086
			run_fg sender peer timeout -s INT "$_send_t" pkt-gen -i "$PEER_IF" -f tx -l "$SIZE" -w "$_w" $PKTGEN_ARGS
		else
			# shellcheck disable=SC2086
			run_fg sender host timeout -s INT "$_send_t" pkt-gen -i "$LOOP_TX" -f tx -l "$SIZE" -w "$_w" $PKTGEN_ARGS
		fi
		stop_receiver "$_rpid" host
		dump receiver
		;;
	esac
	# timeout's SIGINT is how pkt-gen is meant to stop: exit status 124 (timed out) is the normal end.
	dump sender
	_r=$(pktgen_report sender Sent) || die "no 'Sent N packets … in T seconds.' summary from pkt-gen -f tx"
	# shellcheck disable=SC2086 # split into fields on purpose
	set -- $_r
	_sent=$1 ELAPSED=$2
	_count=$_sent
	if [ "$DIRECTION" != tx-only ]; then
		_r=$(pktgen_report receiver Received) || die "no 'Received N packets … in T seconds.' summary from pkt-gen -f rx"
		# shellcheck disable=SC2086 # split into fields on purpose
		set -- $_r
		_count=$1
	fi
	echo "bench: tool: pkt-gen sent $_sent, counted $_count (the seed's pps: the tool's count / the sender's seconds)" >&2
	MBPS=$(awk -v n="$_count" -v l="$SIZE" -v t="$ELAPSED" 'BEGIN { if (t <= 0) exit 1; printf "%.3f\n", n * l * 8 / t / 1e6 }') ||
		die "pkt-gen reported $ELAPSED seconds"
}

# sockperf: the client's `Total of N messages sent in T sec`; the server's `Total M messages received` (printed
# on SIGINT, which its timeout sends).
sockperf_sent() {
	awk '/Total of [0-9]+ messages sent in/ { for (i = 1; i <= NF; i++) { if ($i == "of") n = $(i + 1); if ($i == "in") t = $(i + 1) } f = 1 }
		END { if (!f) exit 1; print n, t }' "$WORK/$1.out"
}
sockperf_received() {
	awk '/Total [0-9]+ messages received/ { for (i = 1; i <= NF; i++) if ($i == "Total") n = $(i + 1); f = 1 } END { if (!f) exit 1; print n }' "$WORK/$1.out"
}

run_sockperf() {
	_client_t=$((DURATION + GRACE))
	# sockperf tp waits about 2 s before it sends (even with --dontwarmup). The servers get SIGINT, which
	# makes them print their totals, once their client is done; through ssh their own timeout sends it, 8 s
	# after the start, which must come after the client's end.
	_server_t=$((DURATION + 8))
	_port2=$((SERVER_PORT + 1))
	case $DIRECTION in
	tx-only)
		start_bg server peer timeout -s INT "$_server_t" sockperf sr -i "$PEER" -p "$SERVER_PORT"
		server_up server 'listen on'
		run_fg client host timeout "$_client_t" sockperf tp -i "$PEER" -p "$SERVER_PORT" -m "$SIZE" -t "$DURATION" ||
			fail_with client "sockperf tp failed"
		dump client
		_r=$(sockperf_sent client) || die "no 'Total of N messages sent in T sec' from sockperf"
		# shellcheck disable=SC2086 # split into fields on purpose
		set -- $_r
		_count=$1 ELAPSED=$2
		;;
	rx-only)
		start_bg server host timeout -s INT "$_server_t" sockperf sr -i "$LOCAL" -p "$SERVER_PORT"
		_spid=$LAST_PID
		server_up server 'listen on'
		run_fg client peer timeout "$_client_t" sockperf tp -i "$LOCAL" -p "$SERVER_PORT" -m "$SIZE" -t "$DURATION" ||
			fail_with client "sockperf tp (on the peer) failed"
		stop_receiver "$_spid" host
		dump client
		dump server
		_r=$(sockperf_sent client) || die "no 'Total of N messages sent in T sec' from sockperf"
		# shellcheck disable=SC2086 # split into fields on purpose
		set -- $_r
		ELAPSED=$2
		_count=$(sockperf_received server) || die "no 'Total M messages received' from sockperf sr"
		;;
	loopback)
		start_bg server_here host timeout -s INT "$_server_t" sockperf sr -i "$LOCAL" -p "$SERVER_PORT"
		_h=$LAST_PID
		start_bg server_peer peer timeout -s INT "$_server_t" sockperf sr -i "$PEER" -p "$_port2"
		_p=$LAST_PID
		server_up server_here 'listen on'
		server_up server_peer 'listen on'
		start_bg client_in peer timeout "$_client_t" sockperf tp -i "$LOCAL" -p "$SERVER_PORT" -m "$SIZE" -t "$DURATION"
		_c=$LAST_PID
		run_fg client_out host timeout "$_client_t" sockperf tp -i "$PEER" -p "$_port2" -m "$SIZE" -t "$DURATION" ||
			fail_with client_out "sockperf tp failed"
		wait "$_c" || fail_with client_in "sockperf tp (the other way) failed"
		stop_receiver "$_h" host
		stop_receiver "$_p" peer
		for _n in client_in client_out server_here server_peer; do dump "$_n"; done
		_r=$(sockperf_sent client_out) || die "no 'Total of N messages sent in T sec' from sockperf"
		# shellcheck disable=SC2086 # split into fields on purpose
		set -- $_r
		ELAPSED=$2
		_r=$(sockperf_sent client_in) || die "no 'Total of N messages sent in T sec' from sockperf"
		# shellcheck disable=SC2086 # split into fields on purpose
		set -- $_r
		ELAPSED=$(awk -v a="$ELAPSED" -v b="$2" 'BEGIN { print (a > b ? a : b) }')
		_in=$(sockperf_received server_here) || die "no 'Total M messages received' from sockperf sr"
		_out=$(sockperf_received server_peer) || die "no 'Total M messages received' from sockperf sr"
		_count=$((_in + _out))
		;;
	esac
	MBPS=$(awk -v n="$_count" -v l="$SIZE" -v t="$ELAPSED" 'BEGIN { if (t <= 0) exit 1; printf "%.3f\n", n * l * 8 / t / 1e6 }') ||
		die "sockperf reported $ELAPSED seconds"
}

# --- the point -----------------------------------------------------------------------------------------------
echo "bench: tool=$TOOL direction=$DIRECTION size=$SIZE seconds=$DURATION counters=$COUNTERS interfaces=${IFACES_USED:-none}"
echo "bench: host_exec='$HOST_EXEC' peer_exec='$PEER_EXEC' local=$LOCAL peer=$PEER"
if [ -n "${FRACFLOW_OUT:-}" ]; then
	: >"$FRACFLOW_OUT/tool.txt"
	: >"$FRACFLOW_OUT/counters.txt"
fi
snapshot before
case $TOOL in
iperf) run_iperf2 ;;
iperf3)
	IPERF3=iperf3
	[ "${IPERF##*/}" = iperf3 ] && IPERF3=$IPERF
	run_iperf3
	;;
netperf) run_netperf ;;
pkt-gen) run_pktgen ;;
sockperf) run_sockperf ;;
esac
snapshot after

case $COUNTERS in
sume:*)
	delta reset_ctr
	WATCHDOG=$DELTA
	echo "watchdog=sysctl dev.sume.$UNIT.reset_ctr"
	case $DIRECTION in
	tx-only)
		delta "$PORT_IF.tx_packets"
		PACKETS=$DELTA
		delta "$PORT_IF.hw_tx_packets"
		HW=$DELTA
		delta "$PORT_IF.tx_dropped"
		DROPPED=$DELTA
		;;
	rx-only)
		delta "$PORT_IF.rx_packets"
		PACKETS=$DELTA
		delta "$PORT_IF.hw_rx_packets"
		HW=$DELTA
		delta "$PORT_IF.rx_dropped"
		DROPPED=$DELTA
		;;
	loopback)
		delta "$LOOP_RX.rx_packets"
		PACKETS=$DELTA
		delta "$LOOP_RX.hw_rx_packets"
		HW=$DELTA
		delta "$LOOP_TX.tx_dropped"
		DROPPED=$DELTA
		delta "$LOOP_RX.rx_dropped"
		DROPPED=$((DROPPED + DELTA))
		# For loss accounting: what left TX_IF, by the driver and by the board.
		delta "$LOOP_TX.tx_packets"
		echo "loopback.sent_packets=$DELTA"
		delta "$LOOP_TX.hw_tx_packets"
		echo "loopback.hw_sent_packets=$DELTA"
		;;
	esac
	;;
sysfs:*)
	WATCHDOG=0
	echo "watchdog=none (no SUME board here: nothing can reset, so 0)"
	case $DIRECTION in
	tx-only)
		delta "$IFACES_USED.tx_packets"
		PACKETS=$DELTA
		delta "$IFACES_USED.tx_dropped"
		DROPPED=$DELTA
		;;
	*)
		delta "$IFACES_USED.rx_packets"
		PACKETS=$DELTA
		delta "$IFACES_USED.rx_dropped"
		DROPPED=$DELTA
		;;
	esac
	HW=''
	;;
none)
	WATCHDOG=0 PACKETS=0 DROPPED=0 HW=''
	echo "watchdog=none (no counters read)"
	;;
esac

if [ "$WATCHDOG" -gt 0 ]; then
	# Not a failure of this node: the point's numbers are kept and the pipeline's check flags the row (why:
	# pipelines/sume/table.yaml).
	echo "bench: WARNING: the SUME watchdog reset the board $WATCHDOG time(s) during this point (TX stuck); its numbers are tainted" >&2
fi
echo "result.throughput_mbps=$MBPS"
echo "result.elapsed_s=$ELAPSED"
echo "result.packets=$PACKETS"
awk -v p="$PACKETS" -v t="$ELAPSED" 'BEGIN { printf "result.kpps=%.3f\n", p / t / 1000 }'
[ -n "$HW" ] && echo "result.hw_packets=$HW"
echo "result.dropped=$DROPPED"
echo "result.watchdog_resets=$WATCHDOG"
