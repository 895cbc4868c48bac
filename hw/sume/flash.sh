#!/bin/sh
# Flashes the NetFPGA SUME with a bitstream from the host that has Digilent's Adept Utilities (FreeBSD has no
# JTAG tools, so this is usually another, Linux, host reached through --exec). The three steps of the driver
# page (docs/tools.md §3.2, §3.8), each checked for its exit status, in this order:
#
#   dsumecfg -d NetSUME write -verbose -s SECTION -f BITSTREAM   write the bitstream to flash section SECTION
#   dsumecfg -d NetSUME setbootsec -s SECTION                    the CPLD loads that section at power-up
#   dsumecfg -d NetSUME reconfig -s SECTION                      reconfigure the FPGA from it now
#
#   sh hw/sume/flash.sh --bitstream FILE [--sha256 HEX] [--section 2] [--device NetSUME] [--exec CMD]
#                       [--staging /tmp/fracflow-sume.bit]
#
# FILE is on this host (the pipeline declares it as an input, so its bytes are in the node's key: the driver page
# warns that a pre-built bitstream of the same name can corrupt packets). With --exec (e.g. `ssh root@adept`)
# it is first copied to STAGING on that host. With --sha256 the file must have that digest. Prints
# `flashed: section=… sha256=…` and writes flashed.json into $FRACFLOW_OUT.
set -u
. "$(dirname "$0")/lib.sh"

BITSTREAM='' SHA='' SECTION=2 DEVICE=NetSUME STAGING=/tmp/fracflow-sume.bit
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || die "option $1 needs a value"
	case $1 in
	--bitstream) BITSTREAM=$2 ;;
	--sha256) SHA=$2 ;;
	--section) SECTION=$2 ;;
	--device) DEVICE=$2 ;;
	--exec) FLASH_EXEC=$2 ;;
	--staging) STAGING=$2 ;;
	*) die "unknown option $1" ;;
	esac
	shift 2
done
case $SECTION in 0 | 1 | 2 | 3) ;; *) die "--section: the flash has sections 0-3, not '$SECTION'" ;; esac
[ -n "$BITSTREAM" ] || die "--bitstream FILE is needed (the profile's \`bitstream\`)"
[ -s "$BITSTREAM" ] || die "bitstream $BITSTREAM is missing or empty"

DIGEST=$(sha256_of "$BITSTREAM") || exit 1
echo "bitstream: $BITSTREAM sha256=$DIGEST size=$(wc -c <"$BITSTREAM" | tr -d ' ')"
if [ -n "$SHA" ] && [ "$SHA" != "$DIGEST" ]; then
	die "bitstream $BITSTREAM has sha256 $DIGEST, but the profile pins $SHA: refusing to flash another image"
fi

TARGET=$BITSTREAM
if [ -n "$FLASH_EXEC" ]; then
	# `sh -c 'cat > FILE'` reads the stream on the other side; through ssh the redirection is the remote shell's.
	echo "flash: copying the bitstream to $STAGING through '$FLASH_EXEC'" >&2
	flash_run sh -c "cat > $STAGING" <"$BITSTREAM" || die "copying the bitstream through '$FLASH_EXEC' failed"
	TARGET=$STAGING
fi

step() {
	echo "flash: $*" >&2
	# The tool's own words go to the log (stdout too, so `require` patterns can see them).
	flash_run dsumecfg -d "$DEVICE" "$@" </dev/null
	_status=$?
	[ "$_status" -eq 0 ] || die "dsumecfg -d $DEVICE $* failed with exit status $_status (is the board's USB/JTAG cable on the host '${FLASH_EXEC:-this host}'?)"
}
step write -verbose -s "$SECTION" -f "$TARGET"
step setbootsec -s "$SECTION"
step reconfig -s "$SECTION"
echo "flashed: device=$DEVICE section=$SECTION sha256=$DIGEST"
if [ -n "${FRACFLOW_OUT:-}" ]; then
	printf '{"device": "%s", "section": %s, "sha256": "%s", "bitstream": "%s", "flash_exec": "%s"}\n' \
		"$DEVICE" "$SECTION" "$DIGEST" "$BITSTREAM" "$FLASH_EXEC" >"$FRACFLOW_OUT/flashed.json"
fi
