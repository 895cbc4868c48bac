# Sourced by the chain benches (chain_latency.sh, chain_gap.sh): the same N-node chain for fracflow and ninja,
# each node writing its own output (`echo i > out`), and a fresh project per round.

# chain_generate NODES WORK: writes WORK/chain.yaml (pipeline `chain`) and WORK/build.ninja.
chain_generate() {
  python3 - "$1" "$2" <<'PY'
import sys
n, d = int(sys.argv[1]), sys.argv[2]
y = ["pipeline: chain", "nodes:"]
for i in range(n):
    y.append(f"  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} > \"$FRACFLOW_OUT/o\"'")
    if i:
        y.append(f"    deps: [n{i - 1}]")
open(f"{d}/chain.yaml", "w").write("\n".join(y) + "\n")
nj = ["rule t", "  command = echo $id > $out", ""]
for i in range(n):
    nj.append(f"build o/{i}: t" + (f" | o/{i - 1}" if i else "") + f"\n  id = {i}")
open(f"{d}/build.ninja", "w").write("\n".join(nj) + "\n")
PY
}

# chain_project WORK LABEL: a fresh project under WORK holding both (emulated testbed); prints its path.
chain_project() {
  local dir
  # mktemp, not $RANDOM: this runs in a command substitution, whose $RANDOM need not differ between calls.
  dir=$(mktemp -d "$1/$2-XXXXXX")
  mkdir -p "$dir/pipelines" "$dir/hw/testbeds"
  printf 'kind: emulated\n' > "$dir/hw/testbeds/emulated.yaml"
  cp "$1/chain.yaml" "$dir/pipelines/"
  cp "$1/build.ninja" "$dir/"
  printf '%s' "$dir"
}

# chain_bench_setup NODES: what both benches do first: installs ninja if missing, builds fracflow (release, from
# the caller's `repo`), and sets `fracflow` (the binary) and `work` (a temporary folder, removed on exit, holding
# an N-node chain).
chain_bench_setup() {
  command -v ninja >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ninja-build; }
  cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
  fracflow=${CARGO_TARGET_DIR:-$repo/target}/release/fracflow
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  chain_generate "$1" "$work"
}
