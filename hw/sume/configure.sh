#!/bin/sh
# Configures the SUME ports the table uses on the host under test and checks the path to the peer:
#   the port cabled to the peer gets ADDR/PREFIX and comes up; the two loopback ports come up (pkt-gen needs no
#   address); then each used port must report `status: active` (the driver polls the link once a second,
#   docs/tools.md §3.3) within --link-wait seconds, and the peer must answer ping on its address.
#
#   sh hw/sume/configure.sh [--exec CMD] --port IFACE --addr ADDR/PREFIX --peer ADDR [--loop TX_IF:RX_IF]
#                           [--link-wait 15]
# The peer's own NIC (--peer's address, up) is the peer's business: the ping checks it.
set -u
. "$(dirname "$0")/lib.sh"

PORT='' ADDR='' PEER='' LOOP='' LINK_WAIT=15
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || die "option $1 needs a value"
	case $1 in
	--exec) HOST_EXEC=$2 ;;
	--port) PORT=$2 ;;
	--addr) ADDR=$2 ;;
	--peer) PEER=$2 ;;
	--loop) LOOP=$2 ;;
	--link-wait) LINK_WAIT=$2 ;;
	*) die "unknown option $1" ;;
	esac
	shift 2
done
[ -n "$PORT" ] && [ -n "$ADDR" ] && [ -n "$PEER" ] || die "--port, --addr and --peer are needed"

echo "configure: ifconfig $PORT inet $ADDR up" >&2
host_run ifconfig "$PORT" inet "$ADDR" up </dev/null || die "ifconfig $PORT inet $ADDR up failed"
used=$PORT
if [ -n "$LOOP" ]; then
	for ifc in ${LOOP%%:*} ${LOOP#*:}; do
		echo "configure: ifconfig $ifc up" >&2
		host_run ifconfig "$ifc" up </dev/null || die "ifconfig $ifc up failed"
		used="$used $ifc"
	done
fi
for ifc in $used; do
	tries=$LINK_WAIT
	until host_run ifconfig "$ifc" </dev/null | grep -q 'status: active'; do
		tries=$((tries - 1))
		[ "$tries" -gt 0 ] || die "$ifc has no link after $LINK_WAIT s (ifconfig $ifc shows no 'status: active'): check its SFP+ module and fibre"
		sleep 1
	done
	echo "link: $ifc active"
done
host_run timeout 20 ping -c 3 "$PEER" </dev/null >&2 || die "the peer $PEER does not answer ping through $PORT: give its NIC that address and cable it to $PORT"
echo "configured: $PORT=$ADDR peer=$PEER loop=${LOOP:-none}"
