#!/bin/sh
# Loads the SUME driver on the host under test unless it is loaded, then checks that its four interfaces
# appeared (docs/tools.md §3.3: loading it should create the four interfaces sume0-sume3).
#
#   sh hw/sume/driver.sh [--exec CMD] [--module if_sume.ko|PATH] [--ifaces "sume0 sume1 sume2 sume3"]
#
# Fails, naming what is missing, when an interface did not appear; then nothing is benchmarked. Prints
# `interfaces: …` (ifconfig -l) and, last, `driver: sume attached: IFACES`.
set -u
. "$(dirname "$0")/lib.sh"

MODULE=if_sume.ko IFACES='sume0 sume1 sume2 sume3'
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || die "option $1 needs a value"
	case $1 in
	--exec) HOST_EXEC=$2 ;;
	--module) MODULE=$2 ;;
	--ifaces) IFACES=$2 ;;
	*) die "unknown option $1" ;;
	esac
	shift 2
done

if host_run kldstat -q -m sume </dev/null; then
	echo "driver: if_sume is already loaded"
else
	echo "driver: kldload $MODULE" >&2
	host_run kldload "$MODULE" </dev/null || die "kldload $MODULE failed on the host under test"
fi
# The driver prints its `[riffa]` attach lines (channels, bus width, link width and rate): keep them in the log.
host_run dmesg </dev/null 2>/dev/null | grep -E 'sume|riffa' | tail -n 20 >&2

present=$(host_run ifconfig -l </dev/null) || die "ifconfig -l failed on the host under test"
echo "interfaces: $present"
missing=''
for want in $IFACES; do
	case " $present " in
	*" $want "*) ;;
	*) missing="$missing $want" ;;
	esac
done
if [ -n "$missing" ]; then
	die "the SUME driver is loaded but these interfaces did not appear:$missing (ifconfig -l: $present). Check that the board runs the reference NIC bitstream (pciconf -l lists 10ee:7028) and the driver's attach messages (dmesg | grep -i riffa)."
fi
echo "driver: sume attached: $IFACES"
