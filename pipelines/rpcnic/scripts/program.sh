#!/bin/sh
# Programs the U280 with one bitstream through Vivado's Hardware Manager in batch mode, against the lab's remote
# hw_server (the artifact does this in the GUI over X11), then records what was programmed. The host must be
# rebooted afterwards so that PCIe re-enumerates the new design (the `reboot` step). It is an effect: what it
# programmed goes to its log; nothing in $FRACFLOW_OUT (its private scratch directory) is kept.
#
# usage: program.sh VIVADO TCL HW_SERVER HW_TARGET HW_DEVICE BITSTREAM
set -eu
vivado=$1 tcl=$2 server=$3 target=$4 device=$5 bitstream=$6
[ -s "$bitstream" ] || { echo "program: bitstream $bitstream is missing or empty" >&2; exit 1; }
log="$FRACFLOW_OUT/vivado.out"
status="$FRACFLOW_OUT/vivado.status"
# Vivado's messages stream into the node's log (stderr) as it works; its exit status is kept aside.
{
    code=0
    "$vivado" -mode batch -nojournal -nolog -notrace -source "$tcl" -tclargs "$server" "$target" "$device" \
        "$bitstream" || code=$?
    echo "$code" >"$status"
} 2>&1 | tee "$log" >&2
code=$(cat "$status")
[ "$code" = 0 ] || { echo "program: $vivado exited with status $code" >&2; exit 1; }
# The Tcl script's last line is the proof that it got through programming, whatever Vivado's exit status says.
grep -q "^fracflow: programmed $device with " "$log" ||
    { echo "program: Vivado did not report programming $device (see the log above)" >&2; exit 1; }
sha=$(sha256sum "$bitstream" | cut -d' ' -f1)
echo "program: $device holds $(basename "$bitstream") (sha256 $sha) via $server" >&2
