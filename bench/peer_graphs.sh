# Sourced by the engine benches: the graphs fracflow, ninja and Snakemake are compared on.
# generate SHAPE NODES DIR: writes DIR/fracflow/pipelines/bench.yaml, DIR/ninja/build.ninja and
# DIR/snakemake/Snakefile for a chain, a fan-in, a layered diamond (each node on two of the previous layer) or a
# sweep (one node over a √N × √N sweep and an aggregator), every node writing its own distinct output; prints the
# number of nodes (a sweep's is the largest square up to NODES - 1, plus its aggregator). DIR's folders must exist.
generate() { # shape nodes dir
  python3 - "$1" "$2" "$3" <<'PY'
import math, sys
shape, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# deps[i]: the nodes node i reads; the last node is the target.
if shape == "chain":
    deps = [[i - 1] if i else [] for i in range(n)]
elif shape == "fanin":
    deps = [[] for _ in range(n - 1)] + [list(range(n - 1))]
elif shape == "diamond":
    width = max(2, int(math.sqrt(n)))
    deps = []
    for i in range(n):
        layer, pos = divmod(i, width)
        deps.append([] if layer == 0 else sorted({(layer - 1) * width + pos, (layer - 1) * width + (pos + 1) % width}))
    deps[-1] = sorted(set(deps[-1]) | set(range(max(0, n - 1 - width), n - 1)))
else:  # sweep: n-1 points and one aggregator
    deps = [[] for _ in range(n - 1)] + [list(range(n - 1))]
y = ["pipeline: bench", "nodes:"]
if shape == "sweep":
    side = int(math.sqrt(n - 1))
    points = side * side
    y = ["pipeline: bench", f"sweep: {{a: [{', '.join(map(str, range(side)))}], b: [{', '.join(map(str, range(side)))}]}}", "nodes:",
         "  p:\n    kind: command\n    foreach: [a, b]\n    outputs: [o]\n    run: 'echo {a} {b} > \"$FRACFLOW_OUT/o\"'",
         "  agg:\n    kind: command\n    deps: [p]\n    outputs: [o]\n    run: 'echo done > \"$FRACFLOW_OUT/o\"'"]
    deps = [[] for _ in range(points)] + [list(range(points))]
    n = points + 1
else:
    for i in range(n):
        y.append(f"  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} > \"$FRACFLOW_OUT/o\"'")
        if deps[i]:
            y.append("    deps: [" + ", ".join(f"n{j}" for j in deps[i]) + "]")
open(f"{d}/fracflow/pipelines/bench.yaml", "w").write("\n".join(y) + "\n")
nj = ["rule t", "  command = echo $id > $out", ""]
for i in range(n):
    nj.append(f"build o/{i}: t" + (" | " + " ".join(f"o/{j}" for j in deps[i]) if deps[i] else "") + f"\n  id = {i}")
open(f"{d}/ninja/build.ninja", "w").write("\n".join(nj) + "\n")
sm = [f"DEPS = {deps!r}", f"rule all:\n    input: 'o/{n - 1}'",
      "rule node:\n    input: lambda w: [f'o/{j}' for j in DEPS[int(w.i)]]\n    output: 'o/{i}'\n    shell: 'echo {wildcards.i} > {output}'"]
open(f"{d}/snakemake/Snakefile", "w").write("\n".join(sm) + "\n")
print(n)
PY
}

# peer_graph_setup SHAPE NODES: for a bench of one graph, with `repo` set: installs ninja when missing, builds
# fracflow (release), makes `work` (removed on exit) holding the graph under `$work/graph` (fracflow/, ninja/,
# snakemake/, the fracflow project with its emulated testbed), and sets `fracflow`, `work` and `count` (the nodes).
peer_graph_setup() { # shape nodes
  command -v ninja >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ninja-build; }
  cargo build --release --locked -q -p fracflow-cli --manifest-path "$repo/Cargo.toml"
  fracflow=${CARGO_TARGET_DIR:-$repo/target}/release/fracflow
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/graph/fracflow/pipelines" "$work/graph/fracflow/hw/testbeds" "$work/graph/ninja" "$work/graph/snakemake"
  printf 'kind: emulated\n' > "$work/graph/fracflow/hw/testbeds/emulated.yaml"
  count=$(generate "$1" "$2" "$work/graph")
}

# peer_rounds ROUNDS MEASURE RECORD: first runs of the graph set up by peer_graph_setup, by ninja, fracflow and,
# when BASE is set, that build, in rounds whose order turns (a run's place in the round moves its time: the
# writeback of the run before it, on a disk; a fixed order once made a build look 8-12 % faster in 10 of 10
# pairs). Each is `MEASURE ROUND LABEL COMMAND...` (its output handed to `RECORD LABEL OUTPUT`); `peer_labels`
# lists the labels.
peer_rounds() { # rounds measure record
  local rounds=$1 measure=$2 record=$3 r label result
  peer_labels=(ninja fracflow)
  [ -n "${BASE:-}" ] && peer_labels+=(base)
  for ((r = 1; r <= rounds; r++)); do
    local order=("${peer_labels[@]:$(((r - 1) % ${#peer_labels[@]}))}" "${peer_labels[@]:0:$(((r - 1) % ${#peer_labels[@]}))}")
    for label in "${order[@]}"; do
      case $label in
        ninja) result=$("$measure" "$r" ninja ninja -j2) ;;
        fracflow) result=$("$measure" "$r" fracflow "$fracflow" run bench --jobs 2) ;;
        base) result=$("$measure" "$r" base "$BASE" run bench --jobs 2) ;;
      esac
      "$record" "$label" "$result"
    done
  done
}

# median FORMAT VALUES...: the median of the values, printed with the printf FORMAT.
median() { # format values
  local format=$1
  shift
  printf '%s\n' "$@" | sort -g | awk -v f="$format" '{ a[NR] = $1 } END { printf f, (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
