#define BENCH0
// Fake serialize_hw.cpp for fracflow's tool doubles: the real program selects the benchmark with the define above and
// drives the FPGA over QDMA on the PCI bus below. Only those two lines matter to the build step.
#include "bench_header/bench_selector.h"
#include "QDMAController.hpp"

int main(int argc, char *argv[]) {
    int pci_bus = 0x1a;
    return run_serialize_hw(argc, argv, pci_bus);
}
