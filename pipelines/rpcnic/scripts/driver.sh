#!/bin/sh
# Loads the QDMA PF driver on the host and sets up queue 0 as RPCNIC's INSTALL.md does, after every reboot:
# insmod qdma-pf.ko, qmax = 1024, `dma-ctl qdma<bus>000 q add`, `q start`; then checks that the driver probed the
# device (dmesg) and stamps the host with the chain (the bitstream's steps) and boot it was set up for, which
# every run checks. It is an effect: it writes no outputs.
#
# usage: driver.sh "SSH" "SUDO" PCI_BUS QDMA_KO QMAX HOST_DIR CHAIN
set -eu
ssh=$1 sudo=$2 bus=$3 ko=$4 qmax=$5 host_dir=$6 chain=$7
fail() { echo "driver: $*" >&2; exit 1; }
device="0000:$bus:00.0"
queues="qdma${bus}000"

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
$ssh "mkdir -p $host_dir && echo '$chain $boot' > $host_dir/device-state"
echo "driver: $queues started for the '$chain' bitstream (boot $boot)" >&2
