//! A board double that behaves like the board, on a real network path: the emulated device in a network
//! namespace of its own (veth, MTU 9000, the artifact's 172.24.1.52:2888), programmed by a fake
//! `programfpga.sh` that takes only files with a Xilinx header and records what it programmed, and that — as
//! the board does — answers success to a partial of another build and leaves the slot as it was. The "real"
//! bitstreams are made here: the emulated flow's images framed as Xilinx `.bit`/`.bin` files, laid out as the
//! artifact's `example/` tree and pinned with `fracflow bitstreams import`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fracflow_proto::bitstream::{make_bin_file, make_bit_file};
use fracflow_record::prebuilt::PrebuiltManifest;
use fracflow_record::{MeasureSummary, SUMMARY_FILE};

use crate::support::{KillOnDrop, Sandbox, text};

/// The build record the fixture artifact carries (docs/frac.md §4.2).
const FIXTURE_RUN: &str = "job: 1768\npayload: 5d1f0c\nvivado: 2022.2\nfrac_commit: 7a4f82b\n";

fn frame_bit(from: &Path, to: &Path) {
    let container = std::fs::read(from).expect("emulated image");
    let bit = make_bit_file(
        "frac_top;UserID=0XFFFFFFFF",
        "xcu280-fsvh2892-2L-e",
        "2026/10/03",
        "12:00:00",
        &container,
    );
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    std::fs::write(to, bit).expect("write .bit");
}

fn frame_bin(container: &[u8], to: &Path) {
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    std::fs::write(to, make_bin_file(container)).expect("write .bin");
}

/// Builds the emulated images, frames them as Xilinx files under `artifact/example/` with a `RUN` record, and
/// pins them as `bitstreams/frac-example.yaml`. Returns the example folder.
pub(crate) fn pinned_fixture_artifact(sandbox: &Sandbox) -> PathBuf {
    let built = sandbox.run(&["run", "bitstreams"]);
    assert!(built.status.success(), "{}", text(&built));
    let nodes = sandbox.results("frac-bitstreams").join("latest/nodes");
    let example = sandbox.path().join("artifact/example");
    frame_bit(
        &nodes.join("image/jtag/frac.bit"),
        &example.join("frac/jtag/frac.bit"),
    );
    frame_bit(
        &nodes.join("bypass/bypass/frac.bit"),
        &example.join("bypass/frac.bit"),
    );
    for entry in std::fs::read_dir(&nodes).expect("nodes").flatten() {
        let icap = entry.path().join("icap");
        for partial in std::fs::read_dir(&icap).into_iter().flatten().flatten() {
            let container = std::fs::read(partial.path()).expect("partial");
            let name = partial.file_name().to_string_lossy().into_owned();
            let to = example.join("frac/icap").join(&name);
            frame_bin(&container, &to);
            // The artifact's partial sizes (docs/frac.md §3); the board double reads the design at the start of
            // the configuration data and takes the zero fill after it for frames.
            let size = match name.get(..3) {
                Some("c02") if name.contains("_f20") => 10_186_124,
                Some("c02") => 6_161_880,
                Some("c01") => 3_147_444,
                Some("c03") => 3_189_860,
                _ => 3_139_996,
            };
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&to)
                .expect("open");
            file.set_len(size).expect("a real partial's size");
        }
    }
    std::fs::write(example.join("RUN"), FIXTURE_RUN).expect("RUN");
    let import = sandbox.run(&["bitstreams", "import", "artifact"]);
    assert!(import.status.success(), "{}", text(&import));
    example
}

/// The partial `name` re-made as if by another build of the design (another build id): the board takes it,
/// reports success, and leaves the slot as it was.
fn partial_of_another_build(example: &Path, name: &str, to: &Path) {
    use fracflow_emulator::image::{Fidelity, container_of};
    let framed = std::fs::read(example.join("frac/icap").join(name)).expect("partial");
    let container = container_of(&framed, Fidelity::BoardDouble, "partial").expect("framed");
    let mut partial = fracflow_emulator::PartialImage::decode(container).expect("container");
    partial.build_id = fracflow_emulator::BuildId::of(b"another build of the static shell");
    frame_bin(&partial.encode(), &to.join(name));
}

/// A network namespace with one end of a veth pair, removed on drop (which removes the pair).
struct Namespace {
    name: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "`ip {}` failed: {} (this test needs root and network namespaces: `ip netns add` must be permitted)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

impl Namespace {
    /// `NS` holding `172.24.1.52/24` on its veth end, the host end `172.24.1.1/24`, both at `mtu`.
    fn create(tag: &str, mtu: u32) -> (Namespace, String) {
        let name = format!("ff{tag}{}", std::process::id());
        let host = format!("{name}h");
        let inside = format!("{name}n");
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let namespace = Namespace { name: name.clone() };
        let mtu = mtu.to_string();
        ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", &inside,
        ]);
        ip(&["link", "set", &inside, "netns", &name]);
        ip(&["addr", "add", "172.24.1.1/24", "dev", &host]);
        ip(&["link", "set", &host, "mtu", &mtu, "up"]);
        for args in [
            vec!["addr", "add", "172.24.1.52/24", "dev", &inside],
            vec!["link", "set", &inside, "mtu", &mtu, "up"],
            vec!["link", "set", "lo", "up"],
        ] {
            let mut full = vec!["netns", "exec", &name, "ip"];
            full.extend(args);
            ip(&full);
        }
        (namespace, host)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn executable(sandbox: &Sandbox, relative: &str, body: &str) {
    sandbox.write(relative, body);
    std::fs::set_permissions(
        sandbox.path().join(relative),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
}

/// The board double: the device in `namespace` at 172.24.1.52:2888, and the fake programming script that
/// programs it over its management channel (loopback inside the namespace) after checking the header.
fn board_double(sandbox: &Sandbox, namespace: &Namespace, nic: &str) -> KillOnDrop {
    let fracflow = env!("CARGO_BIN_EXE_fracflow");
    let mut device = Command::new("ip")
        .args(["netns", "exec", &namespace.name, fracflow])
        .args([
            "device",
            "serve",
            "--listen",
            "172.24.1.52:2888",
            "--board-double",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the device in the namespace");
    let mut line = String::new();
    BufReader::new(device.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the device's address line");
    assert!(line.contains("172.24.1.52:2888"), "{line}");
    let log = sandbox.path().join("programmed.log");
    executable(
        sandbox,
        "scripts/programfpga.sh",
        &format!(
            r#"#!/bin/sh
# Like the artifact's programfpga.sh: one .bit over JTAG, PROGRAM_OK or PROGRAM_FAIL, Vivado's status.
head=$(head -c 13 "$1" | od -An -tx1 | tr -d ' \n')
if [ "$head" != "00090ff00ff00ff00ff0000001" ]; then
  echo "PROGRAM_FAIL: $1 has no Xilinx .bit header"; exit 1
fi
sha256sum "$1" | cut -d' ' -f1 >> "{log}"
ip netns exec {ns} "{fracflow}" device program --addr 172.24.1.52:2888 "$1" || {{ echo "PROGRAM_FAIL"; exit 1; }}
echo "PROGRAM_OK: xcu280_0"
"#,
            log = log.display(),
            ns = namespace.name,
        ),
    );
    sandbox.write(
        "hw/testbeds/u280-double.yaml",
        &format!(
            "kind: doubles\ndescription: the emulated device in a network namespace behind a fake programfpga.sh\n\
             device:\n  addr: \"172.24.1.52:2888\"\nboard:\n  programfpga: scripts/programfpga.sh\n  nic: {nic}\n  \
             settle_s: 0\n  ready_timeout_s: 20\nsudo: \"\"\nimages:\n  source: prebuilt\n  manifest: frac-example\n  \
             artifact: artifact/example\nadapt:\n  caps: {{d: 2, skip: 1, from_s: 1}}\n  set: {{latency: from_send}}\n  \
             client_threads: cores\n  pin: false\n"
        ),
    );
    KillOnDrop(device)
}

fn programmed(sandbox: &Sandbox) -> Vec<String> {
    std::fs::read_to_string(sandbox.path().join("programmed.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn manifest_sha(sandbox: &Sandbox, path: &str) -> String {
    let text = std::fs::read_to_string(sandbox.path().join("bitstreams/frac-example.yaml"))
        .expect("manifest");
    let manifest = PrebuiltManifest::from_yaml(&text).expect("parses");
    manifest
        .files
        .iter()
        .find(|f| f.path == path)
        .map(|f| f.sha256.clone())
        .expect("pinned")
}

#[test]
fn a_board_double_in_its_own_namespace_gets_only_pinned_real_bitstreams_checked_after_every_load() {
    let sandbox = crate::figures::figures_project();
    let example = pinned_fixture_artifact(&sandbox);
    // The emulated device itself refuses a real bitstream, by name.
    let (emulated_device, addr) = crate::fpga::serve(&sandbox);
    let _emulated_device = crate::fpga::Stop(emulated_device);
    let image = example.join("frac/jtag/frac.bit");
    let image_arg = image.display().to_string();
    let refused = sandbox.run(&["device", "program", "--addr", &addr, &image_arg]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("is a real Xilinx bitstream (a .bit of design `frac_top"),
        "{}",
        text(&refused)
    );
    let (namespace, nic) = Namespace::create("bd", 9000);
    let _device = board_double(&sandbox, &namespace, &nic);
    let smoke = [
        "--smoke",
        "--testbed",
        "u280-double",
        "--only",
        "k=1",
        "--only",
        "n=4",
    ];

    // An emulated container on the board's profile: refused at plan time, nothing programmed.
    let emulated = sandbox
        .results("frac-bitstreams")
        .join("latest/nodes/image/jtag/frac.bit");
    let bitstream = format!("frac={}", emulated.display());
    let mut args = vec!["plan", "fig16", "--bitstream", &bitstream];
    args.extend(smoke);
    let plan = sandbox.run(&args);
    assert_eq!(plan.status.code(), Some(2), "{}", text(&plan));
    assert!(
        text(&plan).contains("an emulated full image"),
        "{}",
        text(&plan)
    );

    // A pinned file whose bytes changed since the import: refused at plan time.
    let pinned = example.join("frac/icap/c00_f00.bin");
    let original = std::fs::read(&pinned).expect("partial");
    let mut changed = original.clone();
    changed.push(0);
    std::fs::write(&pinned, &changed).expect("change");
    let check = sandbox.run(&["testbed", "check", "--testbed", "u280-double"]);
    assert!(
        text(&check).contains("changed: frac/icap/c00_f00.bin"),
        "testbed check re-hashes the pinned images: {}",
        text(&check)
    );
    let mut args = vec!["plan", "fig16"];
    args.extend(smoke);
    let plan = sandbox.run(&args);
    assert_eq!(plan.status.code(), Some(2), "{}", text(&plan));
    assert!(
        text(&plan).contains("the file changed since it was pinned"),
        "{}",
        text(&plan)
    );
    std::fs::write(&pinned, &original).expect("restore");
    assert!(programmed(&sandbox).is_empty(), "nothing was programmed");
    let check = sandbox.run(&["testbed", "check", "--testbed", "u280-double"]);
    assert!(
        text(&check).contains("bitstreams/frac-example.yaml: all")
            && text(&check).contains("pinned file(s) under"),
        "{}",
        text(&check)
    );

    // The plan shows the session's commands in order, with the pinned files' own paths, and counts them in.
    let mut args = vec!["plan", "fig16"];
    args.extend(smoke);
    let plan = sandbox.run(&args);
    let shown = text(&plan);
    assert!(plan.status.success(), "{shown}");
    let program = format!("scripts/programfpga.sh {}", image.display());
    let load = format!(
        "load slot 0: {}",
        example.join("frac/icap/c00_f00.bin").display()
    );
    let (Some(programs_at), Some(loads_at)) = (shown.find(&program), shown.find(&load)) else {
        panic!("no programming or slot load in the plan: {shown}");
    };
    assert!(programs_at < loads_at, "{shown}");
    assert!(shown.contains("then check it answers as top_k"), "{shown}");
    assert!(
        shown.contains("the testbed session: programming, settling, slot loads, server starts"),
        "{shown}"
    );

    // The smoke figure: programs exactly the pinned image, checks each loaded slot, measures.
    let mut args = vec!["run", "fig16"];
    args.extend(smoke);
    let run = sandbox.run(&args);
    assert!(matches!(run.status.code(), Some(0 | 5)), "{}", text(&run));
    assert_eq!(
        programmed(&sandbox),
        vec![manifest_sha(&sandbox, "frac/jtag/frac.bit")],
        "the fake programfpga.sh programmed the pinned image once"
    );
    let latest = sandbox.latest_on("scalability", Some("smoke"), "u280-double");
    let summary: MeasureSummary =
        fracflow_record::read_record(&latest.join("nodes/frac[m=4096,k=1,n=4]").join(SUMMARY_FILE))
            .expect("the fRAC point was measured");
    // The summary table itself says the numbers came from doubles, row by row.
    let rows = crate::figures::csv_rows(&latest.join("nodes/aggregate/summary.csv"));
    assert!(!rows.is_empty(), "no summary rows");
    for row in &rows {
        assert_eq!(
            row.get("testbed").map(String::as_str),
            Some("u280-double"),
            "{row:?}"
        );
        assert_eq!(
            row.get("testbed_kind").map(String::as_str),
            Some("doubles"),
            "{row:?}"
        );
    }
    // What loading a real-size partial over the controller took (the note's figure; doubles, not a board).
    for action in &summary.device {
        eprintln!("board double: {} {}", action.action, action.file);
    }
    assert!(
        summary.device.iter().any(|a| a
            .action
            .starts_with("load slot 0 (12266 WRITE_HBM of 256 B in")),
        "a 3 139 996-byte partial is 12 266 uploads of 256 bytes: {:?}",
        summary.device
    );
    assert_eq!(summary.source.testbed_kind, "doubles");
    assert_eq!(summary.source.target, "172.24.1.52:2888");
    assert!(
        summary.device.iter().any(|a| a.action
            == "check slot 0: top_k ok (7 checks against the Rust references)"
            || a.action.starts_with("check slot 0: top_k ok")),
        "{:?}",
        summary.device
    );

    // A partial of another build (log for slot 1): the board reports success and leaves top_k there; the
    // check after the load catches it, reloads once, and the point fails naming what the slot answers as.
    let other = sandbox.path().join("other-build/icap");
    for entry in std::fs::read_dir(example.join("frac/icap"))
        .expect("icap")
        .flatten()
    {
        std::fs::create_dir_all(&other).expect("mkdir");
        std::fs::copy(entry.path(), other.join(entry.file_name())).expect("copy");
    }
    partial_of_another_build(&example, "c01_f05.bin", &other);
    sandbox.write(
        "pipelines/frac/logslot.yaml",
        "pipeline: logslot\nuses: [build.yaml]\nnodes:\n  logit:\n    kind: measure\n    deps: [image, partials]\n    \
         image: jtag/frac.bit\n    slots: {1: c01_f05.bin}\n    fperf: \"-t rr -d 1 -n 1 -m 1024 -X 1024 -R 960 -Z 1 -K 1\"\n    \
         resources: [\"device:fpga0\"]\n    outputs: [console.log, seconds.jsonl, samples.parquet, summary.json]\n",
    );
    let partials = format!("frac={}", other.display());
    let run = sandbox.run(&[
        "run",
        "logslot",
        "--testbed",
        "u280-double",
        "--partials",
        &partials,
    ]);
    let shown = text(&run);
    assert_eq!(run.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("slot 1 answers as top_k, expected log after loading c01_f05.bin twice"),
        "{shown}"
    );
    assert!(
        !sandbox
            .latest_on("logslot", None, "u280-double")
            .join("nodes/logit/samples.parquet")
            .exists(),
        "nothing was measured on the slot"
    );
}

#[test]
fn a_shipped_board_profile_without_pinned_images_says_which_command_pins_them() {
    let sandbox = crate::figures::figures_project();
    for profile in ["u280-switched", "u280-direct"] {
        let file = format!("hw/testbeds/{profile}.yaml");
        std::fs::copy(
            crate::support::repo().join(&file),
            sandbox.path().join(&file),
        )
        .expect(&file);
        let plan = sandbox.run(&["plan", "fig16", "--smoke", "--testbed", profile]);
        let shown = text(&plan);
        assert_eq!(plan.status.code(), Some(2), "{shown}");
        assert!(
            shown.contains("bitstreams/frac-example.yaml")
                && shown.contains("fracflow bitstreams import PATH/TO/frac-atc-artifact"),
            "{shown}"
        );
    }
}

#[test]
fn the_vivado_source_plans_the_real_build_and_needs_the_bypass_image_given() {
    let sandbox = crate::figures::figures_project();
    sandbox.write(
        "hw/testbeds/u280-vivado.yaml",
        "kind: doubles\ndescription: a board whose images the real build makes\ndevice:\n  addr: \"172.24.1.52:2888\"\n\
         board:\n  programfpga: scripts/programfpga.sh\n  nic: fake0\nsudo: \"\"\nimages:\n  source: vivado\n",
    );
    let plan = sandbox.run(&[
        "plan",
        "fig16",
        "--smoke",
        "--testbed",
        "u280-vivado",
        "--only",
        "k=1",
        "--only",
        "n=4",
    ]);
    let shown = text(&plan);
    assert!(plan.status.success(), "{shown}");
    assert!(
        shown.contains(
            "spinhdl --parallel N weave spinhdl.yaml --units spin.yaml --static static.yaml"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("scripts/programfpga.sh jtag/frac.bit (built by this run)"),
        "{shown}"
    );
    assert!(
        !shown.contains("-> design.json") && !shown.contains("[image]"),
        "no emulated build step: {shown}"
    );
    // Figure 13 measures the bypass baseline too, which the real fRAC build does not make.
    let plan = sandbox.run(&["plan", "fig13", "--smoke", "--testbed", "u280-vivado"]);
    let shown = text(&plan);
    assert_eq!(plan.status.code(), Some(2), "{shown}");
    assert!(shown.contains("--bitstream bypass=FILE"), "{shown}");
}
