//! The real-testbed side of the FPGA kinds, against recording fake tools on PATH: the exact commands, their
//! environment and their order.

use std::os::unix::fs::PermissionsExt;

use crate::support::{Sandbox, copy_tree, text};

const PIPELINE: &str = r#"pipeline: realflow
nodes:
  hls:
    kind: hls
    foreach: {unit: [top_k, log]}
    unit: "{unit}"
    tool: vitis_hls
    inputs: ["hw/accelerators/{unit}/*"]
    outputs: [ip/]
  weave:
    kind: weave
    tool: spinhdl
    deps: [hls]
    outputs: [jtag/, icap/]
  partials:
    kind: partials
    tool: spinhdl
    foreach: {unit: [log]}
    unit: "{unit}"
    deps: [weave]
    outputs: [icap/]
  program:
    kind: program
    tool: vivado
    deps: [weave]
    addr: "127.0.0.1:2888"
    vivado_root: /opt/Xilinx/Vivado/2022.2
    hw_target: localhost:3121/xilinx_tcf/Xilinx/TEST0
    settle_s: 0.1
    ready_timeout_s: 5
"#;

/// Each fake appends `NAME ARGS` (and, for the programming script, its environment) to $FAKE_RECORD and
/// leaves the files the real tool would.
const FAKES: [(&str, &str); 4] = [
    (
        "bin/vitis_hls",
        r#"echo "vitis_hls $*" >> "$FAKE_RECORD"
[ "$1" = -version ] && { echo "Vitis HLS v2022.2 (fake)"; exit 0; }
grep -q "set_part xcu280-fsvh2892-2L-e" "$2" || { echo "no part in $2" >&2; exit 3; }
mkdir -p ip && echo "<component/>" > ip/component.xml"#,
    ),
    (
        "bin/spinhdl",
        r#"echo "spinhdl $*" >> "$FAKE_RECORD"
case "$1" in
  --version) echo "spinhdl 0.9 (fake)";;
  --parallel) mkdir -p build/frac/bitstreams/jtag build/frac/bitstreams/icap
              echo full > build/frac/bitstreams/jtag/frac.bit; echo p > build/frac/bitstreams/icap/c00_f00.bin;;
  spin) out=""; cell=""; while [ $# -gt 0 ]; do case "$1" in --out-dir) out=$2;; --cell) cell=$2;; esac; shift; done
        mkdir -p "$out/icap" && echo "$cell" > "$out/icap/$cell.bin";;
esac"#,
    ),
    ("bin/ping", r#"echo "ping $*" >> "$FAKE_RECORD""#),
    (
        "scripts/programfpga.sh",
        r#"echo "programfpga.sh $* VIVADO_ROOT=$VIVADO_ROOT HW_TARGET=$HW_TARGET" >> "$FAKE_RECORD"
[ -s "$1" ] || { echo "no image $1" >&2; exit 2; }"#,
    ),
];

#[test]
fn real_flow_runs_vitis_spinhdl_and_programfpga_with_readiness_checks_in_order() {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/realflow.yaml", PIPELINE);
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    copy_tree(&repo.join("hw"), &sandbox.path().join("hw"));
    for (path, body) in FAKES {
        sandbox.write(path, &format!("#!/bin/sh\n{body}\n"));
        let full = sandbox.path().join(path);
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let record = sandbox.path().join("record.txt");
    let path = format!(
        "{}:{}",
        sandbox.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = sandbox
        .command(&["run", "realflow", "--jobs", "1"])
        .env("PATH", path)
        .env("FAKE_RECORD", &record)
        .output()
        .expect("run");
    assert!(output.status.success(), "{}", text(&output));

    let recorded = std::fs::read_to_string(&record).expect("record");
    let root = sandbox.path().display().to_string();
    let steps: Vec<String> = recorded
        .lines()
        .filter(|l| !l.ends_with(" -version") && !l.ends_with(" --version"))
        .map(|l| l.replace(&root, "ROOT"))
        .map(|l| {
            regex::Regex::new(r"cache/tmp/[^/ ]+")
                .expect("regex")
                .replace_all(&l, "STAGING")
                .into_owned()
        })
        .map(|l| {
            regex::Regex::new(r"--parallel \d+")
                .expect("regex")
                .replace_all(&l, "--parallel N")
                .into_owned()
        })
        .collect();
    let expected = [
        "vitis_hls -f ROOT/.fracflow/STAGING/hls.tcl",
        "vitis_hls -f ROOT/.fracflow/STAGING/hls.tcl",
        "spinhdl --parallel N weave spinhdl.yaml --units spin.yaml --static static.yaml",
        "spinhdl spin log --shell build/frac/abstract_shell/ab_sh_c00_bbx_inst.dcp --cell C00 --out-dir ROOT/.fracflow/STAGING",
        "spinhdl spin log --shell build/frac/abstract_shell/ab_sh_c01_bbx_inst.dcp --cell C01 --out-dir ROOT/.fracflow/STAGING",
        "spinhdl spin log --shell build/frac/abstract_shell/ab_sh_c02_bbx_inst.dcp --cell C02 --out-dir ROOT/.fracflow/STAGING",
        "spinhdl spin log --shell build/frac/abstract_shell/ab_sh_c03_bbx_inst.dcp --cell C03 --out-dir ROOT/.fracflow/STAGING",
        "programfpga.sh ROOT/results/realflow/RUN/nodes/weave/jtag/frac.bit VIVADO_ROOT=/opt/Xilinx/Vivado/2022.2 HW_TARGET=localhost:3121/xilinx_tcf/Xilinx/TEST0",
        "ping -c 1 -W 1 127.0.0.1",
    ];
    let run_id = regex::Regex::new(r"results/realflow/[^/]+/").expect("regex");
    let steps: Vec<String> = steps
        .iter()
        .map(|l| run_id.replace_all(l, "results/realflow/RUN/").into_owned())
        .collect();
    assert_eq!(steps, expected, "recorded:\n{recorded}");

    let nodes = sandbox.results("realflow").join("latest/nodes");
    assert!(nodes.join("hls[unit=log]/ip/component.xml").is_file());
    assert!(nodes.join("partials[unit=log]/icap/C02.bin").is_file());
    assert!(nodes.join("weave/jtag/frac.bit").is_file());
}
