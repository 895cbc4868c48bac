#!/bin/sh
# Loads the QDMA PF driver on the host and sets up queue 0 as RPCNIC's INSTALL.md does, after every reboot:
# insmod qdma-pf.ko, qmax = 1024, `dma-ctl qdma<bus>000 q add`, `q start`; then checks that the driver probed the
# device (dmesg) and stamps the host with the bitstream and boot it was set up for, which every run checks.
#
# usage: driver.sh "SSH" "SUDO" PCI_BUS QDMA_KO QMAX HOST_DIR PROGRAM_DIR   (writes $FRACFLOW_OUT/driver.json)
set -eu
ssh=$1 sudo=$2 bus=$3 ko=$4 qmax=$5 host_dir=$6 programmed=$7
fail() { echo "driver: $*" >&2; exit 1; }
device="0000:$bus:00.0"
queues="qdma${bus}000"
sha=$(sed -n 's/.*"sha256": "\([0-9a-f]*\)".*/\1/p' "$programmed/programmed.json")
[ -n "$sha" ] || fail "$programmed/programmed.json names no bitstream"

$ssh "$sudo insmod $ko" || fail "insmod $ko failed"
$ssh "echo $qmax | $sudo tee /sys/bus/pci/devices/$device/qdma/qmax" >/dev/null ||
    fail "cannot set qmax of $device (is the FPGA at PCI bus $bus? see lspci)"
$ssh "$sudo dma-ctl $queues q add idx 0 mode st dir bi" || fail "dma-ctl $queues q add failed"
$ssh "$sudo dma-ctl $queues q start idx 0 dir bi desc_bypass_en pfetch_bypass_en" ||
    fail "dma-ctl $queues q start failed"
$ssh "$sudo dmesg" | grep "qdma_pf" | grep -qF "$device" ||
    fail "dmesg has no qdma_pf probe line for $device: the driver did not bind the FPGA"
hugepages=$($ssh cat /proc/sys/vm/nr_hugepages)
[ "$hugepages" -ge 2048 ] || fail "the host has $hugepages hugepages; RPCNIC's 1 GiB DMA pool needs at least 2048"
boot=$($ssh cat /proc/sys/kernel/random/boot_id)
$ssh "mkdir -p $host_dir && echo '$sha $boot' > $host_dir/device-state"
echo "driver: $queues started for bitstream $sha (boot $boot)" >&2
printf '{"pci_bus": "%s", "qmax": %s, "bitstream_sha256": "%s"}\n' "$bus" "$qmax" "$sha" >"$FRACFLOW_OUT/driver.json"
