#!/usr/bin/env python3
"""A fake RPCNIC host program, as the make double builds it (PROGRAM, BENCH and PCI_BUS are filled in). A tool
double, not the real program: it checks the fake host is set up as the real one needs (root, the QDMA queues of
its bus started, the right design enumerated) and prints the output format of docs/tools.md §2.3 with numbers from
the formulas below, a deterministic function of benchmark, message index, design and how many times this
(program, bench, index) ran before on this host (the repetition jitter).
The stop signals of a timeout are recorded, so a test can tell that the first one (SIGINT) ended a hung run.

Faults for tests: RPCNIC_DOUBLES_FAULT="PROGRAM/BENCH/IDX:no-speed,PROGRAM/BENCH/IDX:hang".
"""

# @CONSTANTS@
import math
import os
import signal
import sys
import time
from pathlib import Path

# `total size` of deserialize_hw per bench and message index (docs/tools.md §2.5; bench2 and bench5 were not read).
DESER = {
    0: [91323, 10091, 301623, 199606, 78490, 182783, 84250, 282819, 117569, 45176],
    1: [6874, 583, 9111, 8954, 12474, 17, 2395, 1016, 89, 1435],
    3: [202083, 845, 45885, 1821, 85898, 12888, 324753, 540, 35039, 634],
    4: [1710, 326750, 248204, 664, 20128, 25284, 37490, 146428, 63668, 36078],
}
# bench0's (cpu-part, c2h) of serialize_co/hw (docs/tools.md §2.5).
BENCH0_SPLIT = [(502, 91776), (325, 10048), (365, 301952), (1315, 199424), (1227, 77696),
                (2458, 181312), (1024, 83648), (1036, 282688), (809, 117184), (584, 44864)]
# Which enumerated design each program needs.
DESIGNS = {
    "deserialize_hw": ["deser-oneshot", "deser-fbf"],
    "serialize_sw": ["ser-memory-affinity"],
    "serialize_co": ["ser-memory-affinity"],
    "serialize_hw": ["ser-protoacc-pcie"],
}


def full_length(bench, idx):
    """serialize_sw's host_serialized_len: 17–190 bytes more than the deserializer's size (docs/tools.md §2.5)."""
    return DESER[bench][idx] + 17 + (31 * bench + 17 * idx) % 174


def split(bench, idx):
    """(cpu-part, c2h): bench0 from docs/tools.md §2.5; otherwise the fields of 4 KiB and more go to the c2h staging area."""
    if bench == 0:
        return BENCH0_SPLIT[idx]
    full = full_length(bench, idx)
    c2h = full * 3 // 4 // 64 * 64 if full >= 4096 else 0
    return full - c2h, c2h


def deser_cycles(design, size):
    """Timer ticks per RPC: one DMA of the whole message (one-shot) against one per field (field-by-field)."""
    lines = math.ceil(size / 64)
    return lines + 64 if design == "deser-oneshot" else 3 * lines + 512


def fail(message):
    print(f"{PROGRAM}: {message}", file=sys.stderr)
    sys.exit(1)


home = os.environ.get("RPCNIC_DOUBLES_HOME")
if not home:
    fail("RPCNIC_DOUBLES_HOME is not set (this is a tool double)")
host = Path(home) / "host"


def read(path):
    try:
        return (host / path).read_text().strip()
    except FileNotFoundError:
        return ""


if os.environ.get("RPCNIC_DOUBLES_SUDO") != "1":
    fail("cannot map the hugepage DMA pool: Permission denied (run it with sudo)")
argv = sys.argv[1:]
wanted = 2 if PROGRAM == "deserialize_hw" else 1
if len(argv) != wanted or argv[0] not in [str(i) for i in range(10)]:
    fail(f"usage: {PROGRAM} [0-9]" + (" OUTSTANDING" if wanted == 2 else ""))
idx = int(argv[0])
if not (host / f"sys/bus/pci/devices/0000:{PCI_BUS}:00.0").is_dir() or read("var/queues") != "started":
    fail(f"QDMA device at bus 0x{PCI_BUS}: queues not started")
design = read("var/pcie").split(" ")[0]
if design not in DESIGNS[PROGRAM]:
    fail(f"the FPGA holds `{design}`, not a design {PROGRAM} drives ({', '.join(DESIGNS[PROGRAM])})")
if BENCH not in DESER:
    fail(f"the double knows no message sizes for bench{BENCH}")

# How many times this (program, design, bench, idx) ran on this host before: repetition k scales the serializers'
# times by 1 + k/100 and adds 997·k ticks to the deserializer's timer.
counter = host / "var" / f"runs-{PROGRAM}-{design}-{BENCH}-{idx}"
k = int(read(counter.relative_to(host)) or 0)
counter.write_text(f"{k + 1}\n")
jitter = 1 + k / 100
with open(Path(home) / "record.log", "a") as record:
    record.write(f"{PROGRAM} {' '.join(argv)} bench={BENCH} design={design} run={k}\n")

faults = [f for f in os.environ.get("RPCNIC_DOUBLES_FAULT", "").split(",") if f]
fault = {f.split(":")[1] for f in faults if f.split(":")[0] == f"{PROGRAM}/{BENCH}/{idx}"}
print(f"range of class_id is [{100 * BENCH},{100 * BENCH + 57}]", flush=True)
if "hang" in fault:
    def stopped(signum, _frame):
        with open(Path(home) / "record.log", "a") as record:
            record.write(f"{PROGRAM} {' '.join(argv)} bench={BENCH} stopped by {signal.Signals(signum).name}\n")
        sys.exit(128 + signum)

    for stop in [signal.SIGINT, signal.SIGTERM]:
        signal.signal(stop, stopped)
    # The real serializers spin on an FPGA register without a timeout.
    while True:
        time.sleep(1)

if PROGRAM == "deserialize_hw":
    size = DESER[BENCH][idx]
    timer_cnt = 100000 * deser_cycles(design, size) + 997 * k
    speed = size * 100000 * 8 / (timer_cnt * 5.0) / 2**20 * 1e6
    print(f"total size: {size}")
    print(f"{'data_cnt':<10}: {math.ceil(size / 64) * 100000}")
    print(f"{'timer_en':<10}: 1")
    print(f"{'timer_cnt':<10}: {timer_cnt}")
    print(f"{'timer_cnt':<10}: {timer_cnt}")
    if "no-speed" not in fault:
        print(f"speed: {speed:.6g}")
    print(f"timer : {timer_cnt * 4 // 1000}")
else:
    full = full_length(BENCH, idx)
    cpu, c2h = split(BENCH, idx)
    if PROGRAM == "serialize_sw":
        sw = (0.8 + full / 1500) * jitter
        total = sw + (2.0 + full / 9000) * jitter
        print(f"1. Hyperprotobench.bench0.sw.Serialize() timeing: {sw:.3f} us")
        print(f"1. Hyperprotobench.bench0.sw + hw Total() timeing: {total:.3f} us")
        print(f"host_serialized_len = {full}")
        print(f"p_c2h_buffer_size = {c2h}")
    elif PROGRAM == "serialize_co":
        sw = (0.5 + cpu / 1500) * jitter
        total = sw + (1.5 + c2h / 20000) * jitter
        # The same label twice: the software part, then the total (docs/tools.md §2.3).
        print(f"1. Hyperprotobench.bench0.Serialize() timeing: {sw:.3f} us")
        print(f"1. Hyperprotobench.bench0.Serialize() timeing: {total:.3f} us")
        print(f"host_serialized_len = {cpu}")
        print(f"p_c2h_buffer_size = {c2h}")
    else:
        total = (0.5 + cpu / 1500 + 3.0 + c2h / 6000) * jitter
        print(f"1. Hyperprotobench.bench0.Serialize() timeing: {total:.3f} us")
        # In hex without 0x, as EXP.md's sample shows them (a build whose debug dumps left cout in hex).
        print(f"host_serialized_len = {cpu:x}")
        print(f"p_c2h_buffer_size = {c2h:x}")
    for direction in ["p_h2c", "p_c2h"]:
        print(f"{direction} data BEGIN")
        print(f"{direction} data END")
print(f"################ BENCH {BENCH} ################")
print("NO_ENCODE")
if PROGRAM != "deserialize_hw":
    print(f"message[{idx}]")
