#!/bin/sh
# Reboots the host under test (so that PCIe re-enumerates the freshly programmed FPGA) and waits until it answers
# ssh again with a new boot id, polling every POLL seconds for at most WAIT seconds. fracflow runs on another
# machine: it reaches the host with the `ssh` command given.
#
# usage: reboot.sh "SSH" "SUDO" WAIT POLL
set -u
ssh=$1 sudo=$2 wait_s=$3 poll_s=$4
boot_id=/proc/sys/kernel/random/boot_id
before=$($ssh cat $boot_id) || { echo "reboot: the host does not answer '$ssh' before the reboot" >&2; exit 1; }
echo "reboot: host boot id $before; rebooting" >&2
# The connection drops as the host goes down, so the reboot's own exit status says nothing; bounded in case
# ssh hangs on the dying connection.
timeout 60 $ssh "$sudo reboot" >&2 || true
deadline=$(($(date +%s) + wait_s))
while :; do
    if now=$($ssh cat $boot_id 2>/dev/null) && [ -n "$now" ] && [ "$now" != "$before" ]; then
        echo "reboot: host is back with boot id $now" >&2
        exit 0
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "reboot: the host did not come back with a new boot id within ${wait_s}s" >&2
        exit 1
    fi
    sleep "$poll_s"
done
