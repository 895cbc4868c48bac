"""What the RPCNIC tool doubles share: where the fake lab lives, how each double records its call, and the fake
host under test (its /proc, /sys, PCI device, driver and boot id).

These are tool doubles, not hardware: they print the output formats documented in
docs/tools.md §2 (RPCNIC) with numbers made up by a formula, so that the pipeline's
steps, their order and its parsing can be tested without an FPGA. Layout of $RPCNIC_DOUBLES_HOME:

    record.log                     one line per call: TOOL ARGS...
    lab/fpga                       "<design> <sha256>" of the bitstream Vivado last programmed
    host/proc/sys/kernel/random/boot_id, host/proc/sys/vm/nr_hugepages
    host/sys/bus/pci/devices/0000:<bus>:00.0/[qdma/qmax]   the FPGA once enumerated [and bound by qdma-pf]
    host/var/{pcie,modules,queues,dmesg,down}               the design enumerated at boot, driver state, log
    host/login/                    where ssh commands run (the user's home on the host)
"""

import hashlib
import os
import sys
from pathlib import Path


def fail(tool, message, code=1):
    print(f"{tool}: {message}", file=sys.stderr)
    sys.exit(code)


def home():
    value = os.environ.get("RPCNIC_DOUBLES_HOME")
    if not value:
        fail("rpcnic double", "RPCNIC_DOUBLES_HOME is not set (the test points it at a scratch directory)", 2)
    return Path(value)


def bus():
    """The PCI bus the fake FPGA enumerates on (the artifact hard-codes 0x1a; tests move it to check the param)."""
    return os.environ.get("RPCNIC_FAKE_BUS", "1a")


def record(tool, args):
    """Appends `TOOL ARGS...` to record.log in one write (O_APPEND keeps concurrent lines whole)."""
    line = " ".join([tool, *args]).replace("\n", "\\n") + "\n"
    fd = os.open(home() / "record.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def host():
    """The fake host's root, created on first use: booted once, with hugepages, no FPGA enumerated."""
    root = home() / "host"
    if not (root / "login").is_dir():
        for directory in ["proc/sys/kernel/random", "proc/sys/vm", "sys/bus/pci/devices", "var", "login"]:
            (root / directory).mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
        (root / "proc/sys/vm/nr_hugepages").write_text("2048\n")
        (root / "var/dmesg").write_text("[    0.000000] Linux version 6.1.0 (fake host, tool double)\n")
    return root


def read(path, default=""):
    try:
        return Path(path).read_text().strip()
    except FileNotFoundError:
        return default


def device_dir():
    return host() / f"sys/bus/pci/devices/0000:{bus()}:00.0"


def need_root(tool):
    """The sudo double marks its children; insmod, dma-ctl and reboot refuse to run without it."""
    if os.environ.get("RPCNIC_DOUBLES_SUDO") != "1":
        fail(tool, "Operation not permitted (run it through sudo)")


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


if __name__ == "__main__":
    # The shell doubles (ssh) create the fake host this way on first use.
    host()
