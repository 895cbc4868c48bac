#!/bin/sh
# After the FPGA was reconfigured, the host under test must see the board again on PCIe before the driver can
# attach (docs/tools.md §3.2: a reboot or a PCIe rescan). Runs HOW on the host, then waits until `pciconf -l` lists
# the reference NIC (10ee:7028), polling every 2 s for at most --wait seconds (a reboot takes minutes; ssh fails
# meanwhile, which counts as "not yet").
#
#   sh hw/sume/rescan.sh [--exec CMD] [--how "devctl rescan pci0" | "shutdown -r now"] [--wait 300]
set -u
. "$(dirname "$0")/lib.sh"

HOW='devctl rescan pci0' WAIT=300
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || die "option $1 needs a value"
	case $1 in
	--exec) HOST_EXEC=$2 ;;
	--how) HOW=$2 ;;
	--wait) WAIT=$2 ;;
	*) die "unknown option $1" ;;
	esac
	shift 2
done

echo "rescan: $HOW" >&2
# shellcheck disable=SC2086 # HOW is a command line
host_run $HOW </dev/null
status=$?
case $HOW in
*shutdown* | *reboot*)
	# The connection drops while the host goes down: ssh's 255 is expected. Give it time to go down.
	sleep 10
	;;
*) [ "$status" -eq 0 ] || die "'$HOW' failed on the host under test (exit status $status)" ;;
esac

# The reference NIC is PCI 10ee:7028: `chip=0x702810ee` (FreeBSD ≤ 12) or `vendor=0x10ee device=0x7028`.
deadline=$(($(date +%s) + WAIT))
while :; do
	if host_run pciconf -l </dev/null 2>/dev/null >"${TMPDIR:-/tmp}/fracflow-pciconf.$$"; then
		line=$(grep -E 'chip=0x702810ee|vendor=0x10ee[[:space:]]+device=0x7028' "${TMPDIR:-/tmp}/fracflow-pciconf.$$" | head -n 1)
		if [ -n "$line" ]; then
			rm -f "${TMPDIR:-/tmp}/fracflow-pciconf.$$"
			echo "pci: $line"
			exit 0
		fi
	fi
	if [ "$(date +%s)" -ge "$deadline" ]; then
		rm -f "${TMPDIR:-/tmp}/fracflow-pciconf.$$"
		die "the SUME (PCI 10ee:7028) did not appear in pciconf -l within $WAIT s after '$HOW'; a power cycle may be needed, or the bitstream is not the reference NIC"
	fi
	sleep 2
done
