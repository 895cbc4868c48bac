#!/bin/sh
# Runs one RPCNIC host program on the host under test and prints its output (the node's metrics come from it).
# First it checks that the host is still as its chain's driver step left it: set up for CHAIN's bitstream, in
# the current boot. fracflow runs the chain just before the runs that need it, so this catches what happens to
# the host outside the run: a crash or a reboot since (the driver is gone), or another chain set up meanwhile
# (someone else's run on the same host). The program is staged under its content hash, then run with sudo.
#
# usage: run.sh "SSH" "SUDO" HOST_DIR CHAIN PROGRAM ARGS...
set -eu
ssh=$1 sudo=$2 host_dir=$3 chain=$4 program=$5
shift 5
fail() { echo "run: $*" >&2; exit 1; }
# One connection: the boot id, then the stamp the driver step left (empty when there is none).
found=$($ssh "cat /proc/sys/kernel/random/boot_id && cat $host_dir/device-state 2>/dev/null || true") ||
    fail "the host does not answer '$ssh'"
boot=$(echo "$found" | sed -n 1p)
state=$(echo "$found" | sed -n 2p)
[ "$state" = "$chain $boot" ] || fail "the host is not as the '$chain' steps left it (its stamp says '$state', this \
run needs '$chain' set up in boot $boot): something rebooted it or set it up for another bitstream since. Run \
fracflow again: the '$chain' steps run again before the runs that failed."
staged="bin/$(sha256sum "$program" | cut -c1-16)-$(basename "$program")"
# Stage and run in one connection; the program's own stdin is then empty, as under the artifact's sudo.
exec $ssh "cd $host_dir && mkdir -p bin && cat > $staged.part && chmod +x $staged.part && mv $staged.part $staged \
&& $sudo ./$staged $*" <"$program"
