#!/bin/sh
# Builds RPCNIC's four host programs for one HyperProtoBench benchmark, the way the artifact does it by hand:
# select the benchmark with `#define BENCH<n>` at the top of each src/*.cpp and the QDMA PCI bus in
# `int pci_bus = 0x..;`, then `mkdir build_host; cd build_host; cmake ..; make -j`. The tree is copied first, so the
# checkout is never edited and two benchmarks can build at once.
#
# usage: build.sh TREE BENCH PCI_BUS JOBS   (writes $FRACFLOW_OUT/bin_host/ and $FRACFLOW_OUT/build.json)
set -eu
tree=$1 bench=$2 bus=$3 jobs=$4
programs="deserialize_hw serialize_sw serialize_co serialize_hw"
fail() { echo "build: $*" >&2; exit 1; }

[ -f "$tree/CMakeLists.txt" ] || fail "$tree is not an RPCNIC checkout (no CMakeLists.txt)"
case $bench in [0-9]) ;; *) fail "bench must be one digit 0-9, not '$bench'" ;; esac
case $bus in [0-9a-f][0-9a-f]) ;; *) fail "pci_bus must be two lower-case hex digits (the artifact's is 1a), not '$bus'" ;; esac

work="$FRACFLOW_OUT/tree"
mkdir -p "$work"
# Everything the build reads; the bitstreams, the Verilog and the DPU/test code are large and not compiled here.
tar -C "$tree" --exclude=./.git --exclude=./bitstream --exclude=./hardware_verilog --exclude=./bluefield \
    --exclude=./test_suite --exclude=./build_host --exclude=./bin_host --exclude=./bin_dpu -cf - . |
    tar -C "$work" -xf -

for program in $programs; do
    source="$work/src/$program.cpp"
    [ -f "$source" ] || fail "$tree/src/$program.cpp is missing"
    # Exactly one benchmark define and one bus assignment per program; anything else is a tree we do not know.
    [ "$(grep -c '^#define BENCH[0-9]\b' "$source")" = 1 ] ||
        fail "src/$program.cpp does not have exactly one '#define BENCH<n>' line to select the benchmark"
    [ "$(grep -c 'int pci_bus = 0x[0-9a-fA-F]*;' "$source")" = 1 ] ||
        fail "src/$program.cpp does not have exactly one 'int pci_bus = 0x..;' line to set the PCI bus"
    sed -i -e "s/^#define BENCH[0-9]\b/#define BENCH$bench/" \
        -e "s/int pci_bus = 0x[0-9a-fA-F]*;/int pci_bus = 0x$bus;/" "$source"
    grep -q "^#define BENCH$bench\b" "$source" || fail "src/$program.cpp: the BENCH define was not rewritten"
done

mkdir -p "$work/build_host"
(cd "$work/build_host" && cmake .. && make -j"$jobs")
for program in $programs; do
    [ -x "$work/bin_host/$program" ] || fail "make did not produce bin_host/$program"
done
mv "$work/bin_host" "$FRACFLOW_OUT/bin_host"
printf '{"bench": %s, "pci_bus": "0x%s", "define": "BENCH%s"}\n' "$bench" "$bus" "$bench" >"$FRACFLOW_OUT/build.json"
