#!/bin/sh
# Runs one RPCNIC host program on the host under test and prints its output (the node's metrics come from it).
# First it checks that the host is still in the state this run's driver step left: that bitstream, set up in
# the current boot. A cached program/reboot/driver chain with another pipeline or run in between would
# otherwise measure the wrong design. The program is staged under its content hash, then run with sudo.
#
# usage: run.sh "SSH" "SUDO" HOST_DIR CHAIN DRIVER_DIR PROGRAM ARGS...
set -eu
ssh=$1 sudo=$2 host_dir=$3 chain=$4 driver=$5 program=$6
shift 6
fail() { echo "run: $*" >&2; exit 1; }
want=$(sed -n 's/.*"bitstream_sha256": "\([0-9a-f]*\)".*/\1/p' "$driver/driver.json")
# One connection: the boot id, then the stamp the driver step left (empty when there is none).
found=$($ssh "cat /proc/sys/kernel/random/boot_id && cat $host_dir/device-state 2>/dev/null || true") ||
    fail "the host does not answer '$ssh'"
boot=$(echo "$found" | sed -n 1p)
state=$(echo "$found" | sed -n 2p)
[ "$state" = "$want $boot" ] || fail "the host is not as the '$chain' steps left it (it holds '$state', this run \
needs bitstream $want set up in boot $boot): something reprogrammed or rebooted it since. Run again with \
--rerun '$chain.*' to program, reboot and set up the driver again."
staged="bin/$(sha256sum "$program" | cut -c1-16)-$(basename "$program")"
# Stage and run in one connection; the program's own stdin is then empty, as under the artifact's sudo.
exec $ssh "cd $host_dir && mkdir -p bin && cat > $staged.part && chmod +x $staged.part && mv $staged.part $staged \
&& $sudo ./$staged $*" <"$program"
