#!/usr/bin/env python3
"""Tool doubles for the NetFPGA SUME pipeline (pipelines/sume/board.yaml): the scripts next to this file
(dsumecfg, devctl, pciconf, kldstat, kldload, ifconfig, sysctl, dmesg, ping, iperf, netserver, netperf, pkt-gen,
ssh, sudo) all run this one with their name. None of them touches hardware or the network: they keep one
simulated board in a state file, print what the real tools print (the formats the scripts in hw/sume/ parse,
docs/tools.md §3.6) and append their argv to a record, so a test can check what ran, where and in which order.

Every number they print is made up from the driver page's own table (its FreeBSD 12.1-p7 row, docs/tools.md
§3.8) by the rules in RATES below; nothing is measured.

Files, under $SUME_DOUBLES_DIR (default $FRACFLOW_ROOT/.fracflow/sume-doubles):
  record.txt   one line per invocation: `HOST: NAME ARG…` (HOST: `local`, or the ssh destination)
  state.json   the board: flash sections, the PCIe view, the driver, interfaces, addresses and counters
  hosts/DEST/  the working directory of commands run through the ssh double (a remote home directory)

Scenario switches (environment):
  SUME_DOUBLES_NO_IFACES=1     the driver loads but attaches no interface (as with a wrong bitstream)
  SUME_DOUBLES_RESET_ON=TEXT   a double whose record line contains TEXT makes the driver's TX-stuck watchdog
                               reset the board once while it runs (reset_ctr + 1, and dmesg says so)

The simulated cabling (docs/tools.md §3.6, §3.8: one port to another computer, two ports to each other):
  sume0 <-> the peer's NIC (any interface on an ssh destination); sume2 -> sume3 (the loopback fibre);
  sume1 unconnected.
"""

import fcntl
import hashlib
import ipaddress
import json
import math
import os
import signal
import sys
import time

HUT = "local"  # the host under test: commands run here directly or through sudo
IFACES = ["sume0", "sume1", "sume2", "sume3"]
CABLED = {"sume0": "peer", "sume2": "sume3", "sume3": "sume2"}
COUNTERS = [
    "ifc_down_packets",
    "ifc_down_bytes",
    "hw_tx_packets",
    "hw_rx_packets",
    "tx_packets",
    "tx_bytes",
    "tx_dropped",
    "rx_packets",
    "rx_bytes",
    "rx_dropped",
]
ADAPTER_COUNTERS = [
    "reset_ctr",
    "tx_data_recovery",
    "rx_data_recovery",
    "tx_modreg_recovery",
    "rx_modreg_recovery",
    "rx_epkts",
    "rx_ebytes",
]

# RATES: the driver page's FreeBSD 12.1-p7 numbers (docs/tools.md §3.8).
# pkt-gen: Kpps by path and frame size (other sizes interpolate linearly). TCP (iperf, netperf): Mbit/s by path
# at 1500-B writes; a write of L bytes gets L/1500 of it (made up, so the table tells the sizes apart).
# TCP segments: ceil(bytes / 1448), an MSS at a 1500-B MTU.
PKTGEN_KPPS = {"tx": {60: 279.0, 1500: 260.0}, "rx": {60: 220.0, 1500: 215.0}, "loopback": {60: 164.0, 1500: 133.0}}
TCP_MBPS = {("iperf", "tx"): 2200.0, ("iperf", "rx"): 610.0, ("netperf", "tx"): 2200.0, ("netperf", "rx"): 201.0}
MSS = 1448


def tcp_mbps(tool, path, size):
    return round(TCP_MBPS[(tool, path)] * min(1.0, size / 1500.0), 1)


def pktgen_kpps(path, size):
    table = PKTGEN_KPPS[path]
    lo, hi = table[60], table[1500]
    size = min(max(size, 60), 1500)
    return lo + (hi - lo) * (size - 60) / (1500 - 60)


# --- state ---------------------------------------------------------------------------------------------------


def doubles_dir():
    explicit = os.environ.get("SUME_DOUBLES_DIR")
    if explicit:
        path = explicit
    elif os.environ.get("FRACFLOW_ROOT"):
        path = os.path.join(os.environ["FRACFLOW_ROOT"], ".fracflow", "sume-doubles")
    else:
        path = ".sume-doubles"
    os.makedirs(path, exist_ok=True)
    return os.path.abspath(path)


def fresh_state():
    counters = {"adapter": {name: 0 for name in ADAPTER_COUNTERS}}
    for unit, ifc in enumerate(IFACES):
        # Non-zero starting values, different per interface: the scripts must report deltas, not totals.
        counters[ifc] = {name: 1000 * (unit + 1) + i for i, name in enumerate(COUNTERS)}
        for name in ("tx_dropped", "rx_dropped"):
            counters[ifc][name] = 7 * (unit + 1)
    return {
        "flash": {},  # section -> sha256 of what was written
        "boot_section": None,
        "fpga": None,  # sha256 of the running image
        "pci_stale": False,  # reconfigured since the last PCIe rescan
        "module": False,
        "attached": [],
        "addrs": {},
        "up": [],
        "counters": counters,
        "servers": {},  # "iperf:PORT" -> host
        "dmesg": [],
    }


class Board:
    """The state file, locked for the duration of a `with`."""

    def __init__(self):
        self.dir = doubles_dir()
        self.path = os.path.join(self.dir, "state.json")
        self.lock = open(os.path.join(self.dir, "state.lock"), "w")

    def __enter__(self):
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            with open(self.path) as f:
                self.state = json.load(f)
        except FileNotFoundError:
            self.state = fresh_state()
        return self.state

    def __exit__(self, *exc):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f, indent=1)
        os.replace(tmp, self.path)
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        return False


def host():
    return os.environ.get("SUME_DOUBLES_HOST", HUT)


def record(name, args):
    line = f"{host()}: {' '.join([name] + args)}"
    with open(os.path.join(doubles_dir(), "record.txt"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line + "\n")
    return line


def watchdog_maybe(line, board):
    """SUME_DOUBLES_RESET_ON: the TX path hangs during this tool, and the driver's watchdog resets the board."""
    trigger = os.environ.get("SUME_DOUBLES_RESET_ON")
    if trigger and trigger in line and board["module"] and board["attached"]:
        board["counters"]["adapter"]["reset_ctr"] += 1
        board["dmesg"].append("sume0: TX stuck, resetting adapter.")


def out(text=""):
    print(text, flush=True)


def fail(message, code=1):
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


def on_hut(tool):
    if host() != HUT:
        fail(f"{tool}: (double) this runs on the host under test only, not on {host()}")


def stop_flag():
    """SIGINT/SIGTERM set a flag (a tool that runs until interrupted); SIG_IGN inherited from a shell is replaced."""
    flag = {"stop": None}

    def handler(signum, _frame):
        flag["stop"] = signum

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return flag


def wait_until_stopped(flag, limit_s=600):
    start = time.monotonic()
    while flag["stop"] is None and time.monotonic() - start < limit_s:
        time.sleep(0.02)
    return time.monotonic() - start


def iface_for(board, addr):
    """(HUT interface, 'rx' | 'tx'): the interface holding `addr` (traffic to the HUT) or whose subnet holds it."""
    target = ipaddress.ip_address(addr)
    for ifc, cidr in board["addrs"].items():
        net = ipaddress.ip_interface(cidr)
        if net.ip == target:
            return ifc, "rx"
    for ifc, cidr in board["addrs"].items():
        if target in ipaddress.ip_interface(cidr).network:
            return ifc, "tx"
    return None, None


def count(board, ifc, side, packets, nbytes):
    c = board["counters"][ifc]
    c[f"{side}_packets"] += packets
    c[f"{side}_bytes"] += nbytes
    c[f"hw_{side}_packets"] += packets


def opt(args, flag, default=None):
    if flag in args:
        i = args.index(flag)
        if i + 1 < len(args):
            return args[i + 1]
    return default


# --- the tools -----------------------------------------------------------------------------------------------


def dsumecfg(args, line):
    # Digilent's real output is not in the reference; these lines only mark progress.
    if opt(args, "-d") != "NetSUME":
        fail("dsumecfg: ERROR: device not found (expected -d NetSUME)")
    section = opt(args, "-s")
    if section not in ("0", "1", "2", "3"):
        fail("dsumecfg: ERROR: section must be 0-3")
    with Board() as board:
        if "write" in args:
            path = opt(args, "-f")
            if not path or not os.path.isfile(path):
                fail(f"dsumecfg: ERROR: cannot open {path}")
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            board["flash"][section] = digest
            out(f"Erasing flash section {section}... done")
            out(f"Programming flash section {section} with {path}... done")
            out("Write successful.")
        elif "setbootsec" in args:
            if section not in board["flash"]:
                fail(f"dsumecfg: ERROR: flash section {section} is empty")
            board["boot_section"] = section
            out(f"Boot section set to {section}.")
        elif "reconfig" in args:
            if section not in board["flash"]:
                fail(f"dsumecfg: ERROR: flash section {section} is empty")
            board["fpga"] = board["flash"][section]
            # The FPGA drops off the PCIe bus while it reconfigures: the host must rescan (or reboot).
            board["pci_stale"] = True
            board["module_attached_before_reconfig"] = board["module"]
            board["attached"] = []
            out(f"Reconfiguring FPGA from section {section}... done")
        else:
            fail("dsumecfg: ERROR: unknown command")


def devctl(args, line):
    on_hut("devctl")
    if args[:1] != ["rescan"]:
        fail("devctl: (double) only `devctl rescan BUS`")
    with Board() as board:
        board["pci_stale"] = False
        if board["module"] and board["fpga"] and not os.environ.get("SUME_DOUBLES_NO_IFACES"):
            board["attached"] = list(IFACES)


def pci_visible(board):
    return board["fpga"] is not None and not board["pci_stale"]


def pciconf(args, line):
    on_hut("pciconf")
    with Board() as board:
        out("hostb0@pci0:0:0:0:\tclass=0x060000 card=0x00000000 chip=0x0c008086 rev=0x06 hdr=0x00")
        out("em0@pci0:0:25:0:\tclass=0x020000 card=0x00008086 chip=0x153a8086 rev=0x04 hdr=0x00")
        if pci_visible(board):
            name = "sume0" if board["attached"] else "none0"
            out(f"{name}@pci0:1:0:0:\tclass=0x020000 card=0x000710ee chip=0x702810ee rev=0x00 hdr=0x00")


def kldstat(args, line):
    on_hut("kldstat")
    with Board() as board:
        loaded = board["module"]
    if "-m" in args:
        sys.exit(0 if loaded and opt(args, "-m") == "sume" else 1)
    out("Id Refs Address                Size Name")
    out(" 1   20 0xffffffff80200000  2295a98 kernel")
    if loaded:
        out(" 2    1 0xffffffff82a12000     a1c0 if_sume.ko")


def kldload(args, line):
    on_hut("kldload")
    if not args or not args[-1].endswith(("if_sume.ko", "if_sume")):
        fail(f"kldload: (double) can't load {args[-1] if args else ''}: No such file or directory")
    with Board() as board:
        if board["module"]:
            fail(f"kldload: can't load {args[-1]}: module already loaded or in kernel")
        board["module"] = True
        if pci_visible(board) and not os.environ.get("SUME_DOUBLES_NO_IFACES"):
            board["attached"] = list(IFACES)
            board["dmesg"].append("sume0: <NetFPGA SUME reference NIC> mem 0xfb000000-0xfb00ffff irq 16 at device 0.0 on pci1")
            board["dmesg"].append("sume0: [riffa] # of channels: 2")
            board["dmesg"].append("sume0: [riffa] bus width: 128-bit")
            board["dmesg"].append("sume0: [riffa] link width: x8")
            board["dmesg"].append("sume0: [riffa] link rate: 5.0 GT/s")
        elif not pci_visible(board):
            board["dmesg"].append("if_sume: no NetFPGA SUME on the PCI bus (reconfigured without a rescan?)")


def ifconfig(args, line):
    on_hut("ifconfig")
    with Board() as board:
        present = ["em0", "lo0"] + board["attached"]
        if args == ["-l"]:
            out(" ".join(present))
            return
        if not args:
            fail("ifconfig: (double) give an interface")
        ifc = args[0]
        if ifc not in present:
            fail(f"ifconfig: interface {ifc} does not exist")
        rest = args[1:]
        if "inet" in rest:
            cidr = opt(rest, "inet")
            ipaddress.ip_interface(cidr)
            board["addrs"][ifc] = cidr
        if "up" in rest and ifc not in board["up"]:
            board["up"].append(ifc)
        if not rest:
            flags = "UP,BROADCAST,RUNNING,SIMPLEX,MULTICAST" if ifc in board["up"] else "BROADCAST,SIMPLEX,MULTICAST"
            out(f"{ifc}: flags=8843<{flags}> metric 0 mtu 1500")
            unit = IFACES.index(ifc) if ifc in IFACES else 0
            out(f"\tether 02:53:55:4d:45:0{unit}")
            if ifc in board["addrs"]:
                out(f"\tinet {board['addrs'][ifc]}")
            out("\tmedia: Ethernet 10Gbase-SR")
            active = ifc in board["up"] and (ifc in CABLED or not ifc.startswith("sume"))
            out(f"\tstatus: {'active' if active else 'no carrier'}")


def sysctl(args, line):
    on_hut("sysctl")
    values_only = "-n" in args
    names = [a for a in args if not a.startswith("-")]
    status = 0
    with Board() as board:
        for name in names:
            value = None
            parts = name.split(".")
            if board["attached"] and parts[:3] == ["dev", "sume", "0"]:
                if len(parts) == 4 and parts[3] in board["counters"]["adapter"]:
                    value = board["counters"]["adapter"][parts[3]]
                elif len(parts) == 5 and parts[3] in IFACES and parts[4] in COUNTERS:
                    value = board["counters"][parts[3]][parts[4]]
            if value is None:
                print(f"sysctl: unknown oid '{name}'", file=sys.stderr)
                status = 1
                continue
            out(str(value) if values_only else f"{name}: {value}")
    sys.exit(status)


def dmesg(args, line):
    on_hut("dmesg")
    with Board() as board:
        for entry in board["dmesg"]:
            out(entry)


def ping(args, line):
    on_hut("ping")
    target = args[-1]
    with Board() as board:
        ifc, side = iface_for(board, target)
        reachable = ifc is not None and side == "tx" and CABLED.get(ifc) == "peer" and ifc in board["up"]
    out(f"PING {target} ({target}): 56 data bytes")
    if not reachable:
        out("--- ping statistics ---\n3 packets transmitted, 0 packets received, 100.0% packet loss")
        sys.exit(2)
    for seq in range(3):
        out(f"64 bytes from {target}: icmp_seq={seq} ttl=64 time=0.081 ms")
    out("--- ping statistics ---\n3 packets transmitted, 3 packets received, 0.0% packet loss")


def serve(kind, port, banner_lines):
    """A server double: registered while it runs, so a client finds it; prints its banner; waits for a signal."""
    flag = stop_flag()
    key = f"{kind}:{port}"
    with Board() as board:
        board["servers"][key] = host()
    for text in banner_lines:
        out(text)
    wait_until_stopped(flag)
    with Board() as board:
        board["servers"].pop(key, None)


def require_server(board, kind, port, tool):
    if f"{kind}:{port}" not in board["servers"]:
        fail(f"{tool}: connect failed: Connection refused (no {kind} server on port {port})")


def tcp_transfer(board, line, tool, addr, size, seconds, maerts=False):
    """Counts one TCP transfer between the HUT and the peer; returns (path, Mbit/s, bytes)."""
    ifc, side = iface_for(board, addr)
    if ifc is None or CABLED.get(ifc) != "peer" or ifc not in board["up"]:
        fail(f"{tool}: connect failed: No route to host {addr}")
    if host() == HUT:
        path = "rx" if maerts else "tx"
    else:
        if side != "rx":
            fail(f"{tool}: (double) from the peer, traffic goes to the host under test's address, not {addr}")
        path = "rx"
    mbps = tcp_mbps("netperf" if tool == "netperf" else "iperf", path, size)
    nbytes = int(mbps * 1e6 * seconds / 8)
    count(board, ifc, path, math.ceil(nbytes / MSS), nbytes)
    watchdog_maybe(line, board)
    return path, mbps, nbytes


def iperf(args, line):
    port = opt(args, "-p", "5001")
    if "-s" in args:
        serve("iperf", port, [
            "------------------------------------------------------------",
            f"Server listening on TCP port {port}",
            "TCP window size: 64.0 KByte (default)",
            "------------------------------------------------------------",
        ])
        return
    addr = opt(args, "-c")
    size = int(opt(args, "-l", "131072"))
    seconds = float(opt(args, "-t", "10"))
    if opt(args, "-f") != "m":
        fail("iperf: (double) the scripts ask for -f m")
    with Board() as board:
        require_server(board, "iperf", port, "iperf")
        _path, mbps, nbytes = tcp_transfer(board, line, "iperf", addr, size, seconds)
    out("------------------------------------------------------------")
    out(f"Client connecting to {addr}, TCP port {port}")
    out("TCP window size: 32.8 KByte (default)")
    out("------------------------------------------------------------")
    out(f"[  3] local 10.0.0.9 port 51234 connected with {addr} port {port}")
    out("[ ID] Interval       Transfer     Bandwidth")
    out(f"[  3]  0.0-{seconds:.1f} sec  {nbytes / 1048576:.0f} MBytes  {mbps:.1f} Mbits/sec")


def netserver(args, line):
    port = opt(args, "-p", "12865")
    addr = opt(args, "-L", "IN(6)ADDR_ANY")
    serve("netserver", port, [f"Starting netserver with host '{addr}' port '{port}' and family AF_INET"])


def netperf(args, line):
    on_hut("netperf")
    port = opt(args, "-p", "12865")
    addr = opt(args, "-H")
    test = opt(args, "-t", "TCP_STREAM")
    seconds = float(opt(args, "-l", "10"))
    test_args = args[args.index("--") + 1:] if "--" in args else []
    send = opt(test_args, "-m", "16384")
    maerts = test == "TCP_MAERTS"
    if maerts:
        # `-m ,SIZE`: the remote's send size.
        local_send, _, remote_send = send.partition(",")
        size = int(remote_send or 16384)
    else:
        size = int(send)
    if test not in ("TCP_STREAM", "TCP_MAERTS") or "-P" not in args:
        fail("netperf: (double) the scripts run -P 0 with TCP_STREAM or TCP_MAERTS")
    with Board() as board:
        require_server(board, "netserver", port, "netperf")
        _path, mbps, _nbytes = tcp_transfer(board, line, "netperf", addr, size, seconds, maerts=maerts)
    keys = opt(test_args, "-k", "").split(",")
    values = {
        "THROUGHPUT": f"{mbps:.2f}",
        "THROUGHPUT_UNITS": "10^6bits/s",
        "ELAPSED_TIME": f"{seconds:.2f}",
        "LOCAL_SEND_SIZE": "0" if maerts else str(size),
        "REMOTE_SEND_SIZE": str(size) if maerts else "-1",
    }
    for key in keys:
        out(f"{key}={values.get(key, '')}")


def pktgen(args, line):
    ifc = opt(args, "-i")
    role = opt(args, "-f")
    size = int(opt(args, "-l", "60"))
    wait_s = int(opt(args, "-w", "2"))
    if role not in ("tx", "rx"):
        fail("pkt-gen: (double) -f tx or -f rx")
    stamp = lambda: f"{time.time() % 1000:.6f}"  # noqa: E731
    with Board() as board:
        if host() == HUT:
            if ifc not in board["attached"]:
                fail(f"{stamp()} nm_open [444] invalid port name: {ifc}")
            if ifc not in board["up"]:
                fail(f"{stamp()} main [2650] {ifc} is down")
        start_rx = board["counters"][ifc]["rx_packets"] if host() == HUT else 0
        start_rx_bytes = board["counters"][ifc]["rx_bytes"] if host() == HUT else 0
    flag = stop_flag()
    out(f"{stamp()} main [2620] interface is {ifc}")
    out(f"{stamp()} main [2749] Wait {wait_s} secs for phy reset")
    out(f"{stamp()} main [2751] Ready...")
    elapsed = wait_until_stopped(flag)
    seconds = round(max(elapsed, 0.01), 2)
    if role == "tx":
        if host() != HUT:
            path, dest = "rx", "sume0"  # the peer's NIC is cabled to sume0
        elif CABLED.get(ifc) == "peer":
            path, dest = "tx", None
        elif ifc in CABLED:
            path, dest = "loopback", CABLED[ifc]
        else:
            path, dest = "tx", None  # nothing cabled: the frames leave into the void
        kpps = pktgen_kpps(path, size)
        packets = round(kpps * 1000 * seconds)
        with Board() as board:
            if host() == HUT:
                count(board, ifc, "tx", packets, packets * size)
            if dest is not None and dest in board["attached"] and dest in board["up"]:
                count(board, dest, "rx", packets, packets * size)
            watchdog_maybe(line, board)
        amount = packets * size * 8 / seconds
        out(f"Sent {packets} packets {packets * size} bytes {packets} events {size} bytes each in {seconds:.2f} seconds.")
        out(f"Speed: {kpps:.2f} Kpps Bandwidth: {amount / 1e6:.2f} Mbps (raw {amount * 84 / 60 / 1e6:.2f} Mbps). Average batch: 1.00 pkts")
    else:
        with Board() as board:
            got = board["counters"][ifc]["rx_packets"] - start_rx if host() == HUT else 0
            got_bytes = board["counters"][ifc]["rx_bytes"] - start_rx_bytes if host() == HUT else 0
            watchdog_maybe(line, board)
        each = got_bytes // got if got else 0
        out(f"Received {got} packets {got_bytes} bytes {got} events {each} bytes each in {seconds:.2f} seconds.")
        out(f"Speed: {got / seconds / 1000:.2f} Kpps Bandwidth: {got_bytes * 8 / seconds / 1e6:.2f} Mbps. Average batch: 1.00 pkts")
    # pkt-gen ends 0 after SIGINT; `timeout` then reports 124.


SSH_FLAGS_WITH_VALUE = set("BbcDEeFIiJLlmOoPpQRSWw")


def ssh(args, line):
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        letters = args[i][1:]
        i += 1
        if letters and letters[-1] in SSH_FLAGS_WITH_VALUE and len(letters) == 1:
            i += 1
    if i >= len(args):
        fail("ssh: (double) no destination")
    dest = args[i]
    rest = args[i + 1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        fail("ssh: (double) no remote command (the scripts never log in interactively)")
    home = os.path.join(doubles_dir(), "hosts", dest.split("@")[-1])
    os.makedirs(home, exist_ok=True)
    os.chdir(home)
    os.environ["SUME_DOUBLES_HOST"] = dest.split("@")[-1]
    # Like ssh: the words are joined with spaces and the remote shell parses the line.
    os.execvp("sh", ["sh", "-c", " ".join(rest)])


def sudo(args, line):
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if args[i] in ("-u", "-g") else 1
    if args[i:i + 1] == ["--"]:
        i += 1
    if i >= len(args):
        fail("sudo: (double) no command")
    os.execvp(args[i], args[i:])


TOOLS = {
    "dsumecfg": dsumecfg,
    "devctl": devctl,
    "pciconf": pciconf,
    "kldstat": kldstat,
    "kldload": kldload,
    "ifconfig": ifconfig,
    "sysctl": sysctl,
    "dmesg": dmesg,
    "ping": ping,
    "iperf": iperf,
    "netserver": netserver,
    "netperf": netperf,
    "pkt-gen": pktgen,
    "ssh": ssh,
    "sudo": sudo,
}


def main():
    name, args = sys.argv[1], sys.argv[2:]
    line = record(name, args)
    TOOLS[name](args, line)


if __name__ == "__main__":
    main()
