# Programs one FPGA through a (remote) hw_server in Vivado batch mode: what RPCNIC's DEPLOY.md does in the
# Hardware Manager GUI (open target, select xcu280_u55c_0, no probes file, program).
#
# vivado -mode batch -source program.tcl -tclargs HW_SERVER HW_TARGET HW_DEVICE BITSTREAM
#   HW_SERVER  host:port of hw_server, e.g. 192.168.189.16:3123
#   HW_TARGET  a glob over the server's JTAG targets (`*` takes the only one), e.g. */xilinx_tcf/Xilinx/21770297400LA
#   HW_DEVICE  the device on that target, e.g. xcu280_u55c_0
#   BITSTREAM  the .bit file
if {[llength $argv] != 4} {
    puts stderr "usage: -tclargs HW_SERVER HW_TARGET HW_DEVICE BITSTREAM"
    exit 2
}
lassign $argv server target_glob device_name bitstream

open_hw_manager
connect_hw_server -url $server -allow_non_jtag
set targets [get_hw_targets $target_glob]
if {[llength $targets] != 1} {
    puts stderr "hw_server $server has [llength $targets] targets matching `$target_glob` ([get_hw_targets]); name one"
    exit 3
}
open_hw_target $targets
set device [get_hw_devices $device_name]
if {[llength $device] != 1} {
    puts stderr "target $targets has no device $device_name (devices: [get_hw_devices])"
    exit 4
}
current_hw_device $device
refresh_hw_device -update_hw_probes false $device
set_property PROBES.FILE {} $device
set_property FULL_PROBES.FILE {} $device
set_property PROGRAM.FILE $bitstream $device
program_hw_devices $device
refresh_hw_device $device
close_hw_target
disconnect_hw_server
close_hw_manager
# program.sh looks for this line: Vivado's exit status alone does not prove that programming happened.
puts "fracflow: programmed $device_name with $bitstream"
