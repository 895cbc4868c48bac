//! The emulated fRAC chain through the engine: incremental rebuilds per accelerator, and a live device
//! programmed, reconfigured and probed with the CLI.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use crate::support::{Sandbox, frac_project, text};

/// Node ids by the event they got in the latest run of `pipeline` (the pipeline as written).
fn outcome(sandbox: &Sandbox, pipeline: &str, event: &str) -> BTreeSet<String> {
    outcome_in(&sandbox.results(pipeline).join("latest"), event)
}

/// Node ids by the event they got in the run `run` (a run directory or a `latest` link).
fn outcome_in(run: &std::path::Path, event: &str) -> BTreeSet<String> {
    let events = std::fs::read_to_string(run.join("events.jsonl")).expect("events");
    events
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["event"] == event)
        .filter_map(|e| e["node"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn editing_one_accelerator_rebuilds_only_what_contains_it() {
    let sandbox = frac_project();
    let first = sandbox.run(&["run", "bitstreams"]);
    assert!(first.status.success(), "{}", text(&first));
    assert_eq!(
        outcome(&sandbox, "frac-bitstreams", "node_finished").len(),
        15
    );

    let source = sandbox.path().join("hw/accelerators/top_k/top_k.cpp");
    let mut code = std::fs::read_to_string(&source).expect("top_k.cpp");
    code.push_str("\nextern \"C\" int32_t frac_build_marker(void) { return 42; }\n");
    std::fs::write(&source, code).expect("edit top_k.cpp");

    let second = sandbox.run(&["run", "bitstreams"]);
    assert!(second.status.success(), "{}", text(&second));
    let rebuilt = outcome(&sandbox, "frac-bitstreams", "node_finished");
    let expected: BTreeSet<String> = ["hls[unit=top_k]", "partials[unit=top_k]", "image"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(
        rebuilt, expected,
        "only top_k's plugin, its partials and the full image (every cell starts with top_k)"
    );
    assert_eq!(
        outcome(&sandbox, "frac-bitstreams", "node_cached").len(),
        12
    );
}

/// Starts `fracflow ARGS…` (a server that prints `listening ADDR …` first); returns it and ADDR.
fn start_server(sandbox: &Sandbox, args: &[&str]) -> (Child, String) {
    start_server_command(sandbox.command(args))
}

/// Starts a server command that prints `listening ADDR …` first; returns it and ADDR.
fn start_server_command(mut command: std::process::Command) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn server");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("address line");
    let addr = line
        .split_whitespace()
        .nth(1)
        .expect("listening ADDR")
        .to_owned();
    (child, addr)
}

/// `fracflow device serve` on a free loopback port; returns the child and its data address.
pub(crate) fn serve(sandbox: &Sandbox) -> (Child, String) {
    start_server(sandbox, &["device", "serve", "--listen", "127.0.0.1:0"])
}

/// The same device as a board double (`--board-double`): it takes the Xilinx-framed fixtures of
/// `board_double::pinned_fixture_artifact` and, like the board, ignores a partial of another build.
pub(crate) fn serve_board_double(sandbox: &Sandbox) -> (Child, String) {
    start_server(
        sandbox,
        &[
            "device",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--board-double",
        ],
    )
}

pub(crate) struct Stop(pub(crate) Child);
impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A live emulated device after the `reconfigure` pipeline: the full image (top_k everywhere), then log in
/// slot 1. Dropping the `Stop` stops the device.
pub(crate) fn reconfigured_device(sandbox: &Sandbox) -> (Stop, String) {
    let (child, addr) = serve(sandbox);
    let stop = Stop(child);
    let set = format!("device=\"{addr}\"");
    let run = sandbox.run(&["run", "reconfigure", "--set", &set]);
    assert!(run.status.success(), "{}", text(&run));
    (stop, addr)
}

#[test]
fn a_killed_device_leaves_nothing_in_its_temp_directory() {
    let sandbox = frac_project();
    let temp = sandbox.path().join("device-temp");
    std::fs::create_dir(&temp).expect("device temp directory");
    let mut command = sandbox.command(&["device", "serve", "--listen", "127.0.0.1:0"]);
    command.env("TMPDIR", &temp);
    let (child, addr) = start_server_command(command);
    let mut stop = Stop(child);
    let set = format!("device=\"{addr}\"");
    let run = sandbox.run(&["run", "reconfigure", "--set", &set]);
    assert!(run.status.success(), "{}", text(&run));
    let probe = sandbox.run(&["device", "probe", "--addr", &addr]);
    assert!(
        text(&probe).contains("slot 1: Log"),
        "the device loaded plugins: {}",
        text(&probe)
    );

    // SIGKILL, as the tests and an interrupted engine stop a device: no destructor runs.
    stop.0.kill().expect("kill the device");
    stop.0.wait().expect("reap the device");
    let left: Vec<_> = std::fs::read_dir(&temp)
        .expect("read the temp directory")
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .expect("list the temp directory");
    assert!(left.is_empty(), "the killed device left {left:?}");
}

#[test]
fn a_live_device_is_programmed_reconfigured_and_refuses_foreign_or_misplaced_partials() {
    let sandbox = frac_project();
    let (_stop, addr) = reconfigured_device(&sandbox);

    let probe = sandbox.run(&["device", "probe", "--addr", &addr]);
    assert!(probe.status.success(), "{}", text(&probe));
    let shown = text(&probe);
    assert!(shown.contains("slot 0: TopK"), "{shown}");
    assert!(
        shown.contains("slot 1: Log"),
        "the pipeline loaded c01_f05 (log) into slot 1: {shown}"
    );

    let icap = |unit: &str, file: &str| {
        sandbox
            .results("frac-reconfigure")
            .join("latest/nodes")
            .join(format!("partials[unit={unit}]/icap/{file}"))
    };
    let cnn = icap("cnn", "c02_f20.bin");
    let loaded = sandbox.run(&[
        "device",
        "load",
        "--addr",
        &addr,
        "--slot",
        "2",
        cnn.to_str().expect("path"),
    ]);
    assert!(loaded.status.success(), "{}", text(&loaded));
    assert!(
        text(&loaded).contains("upload"),
        "per-phase timing: {}",
        text(&loaded)
    );
    let probe = sandbox.run(&["device", "probe", "--addr", &addr, "--slots", "2"]);
    assert!(text(&probe).contains("slot 2: Cnn"), "{}", text(&probe));

    let misplaced = sandbox.run(&[
        "device",
        "load",
        "--addr",
        &addr,
        "--slot",
        "0",
        cnn.to_str().expect("path"),
    ]);
    assert_eq!(misplaced.status.code(), Some(1), "{}", text(&misplaced));
    assert!(
        text(&misplaced).contains("status 9"),
        "ERR_ICAP for the wrong cell: {}",
        text(&misplaced)
    );

    // A partial from another build of the shell: same cell and unit, different build id.
    let other = frac_project();
    let shell = std::fs::read_to_string(other.path().join("hw/shell.yaml")).expect("shell");
    let without_one_rm = shell.replace("      - { id: 19, unit: pattern_slot }\n", "");
    assert_ne!(without_one_rm, shell, "the shell still lists RM 19");
    std::fs::write(other.path().join("hw/shell.yaml"), without_one_rm).expect("edit shell");
    let built = other.run(&["run", "bitstreams"]);
    assert!(built.status.success(), "{}", text(&built));
    let foreign = other
        .results("frac-bitstreams")
        .join("latest/nodes/partials[unit=log]/icap/c01_f05.bin");
    let refused = sandbox.run(&[
        "device",
        "load",
        "--addr",
        &addr,
        "--slot",
        "1",
        foreign.to_str().expect("path"),
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let probe = sandbox.run(&["device", "probe", "--addr", &addr, "--slots", "1"]);
    assert!(
        text(&probe).contains("slot 1: Log"),
        "the slot kept its module: {}",
        text(&probe)
    );
}

#[test]
fn the_client_measures_a_slot_in_fperf_format_and_writes_parquet_samples() {
    let sandbox = frac_project();
    let built = sandbox.run(&["run", "bitstreams"]);
    assert!(built.status.success(), "{}", text(&built));
    let image = sandbox
        .results("frac-bitstreams")
        .join("latest/nodes/image/jtag/frac.bit");
    let image = image.to_str().expect("path");
    let (child, addr) = start_server(
        &sandbox,
        &[
            "device",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--image",
            image,
        ],
    );
    let _stop = Stop(child);
    let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
    let samples = sandbox.path().join("samples.parquet");
    let args = [
        "client", "-c", host, "-p", port, "-t", "rr", "-d", "2", "-n", "1", "-m", "512", "-X",
        "1024",
    ];
    let mut args: Vec<&str> = args.to_vec();
    args.extend([
        "-R",
        "64",
        "-Z",
        "1",
        "-K",
        "0",
        "--samples",
        samples.to_str().expect("path"),
    ]);
    let run = sandbox.run(&args);
    assert!(run.status.success(), "{}", text(&run));
    let stdout = String::from_utf8_lossy(&run.stdout);
    let counts: u64 = stdout
        .lines()
        .filter(|l| l.contains(" RR .0 "))
        .filter_map(|l| l.rsplit("count=").next()?.trim().parse::<u64>().ok())
        .sum();
    assert!(counts > 0, "{stdout}");
    assert!(
        stdout.contains("Total-Throughput") && stdout.contains("exiting client: 0"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!("{counts} per-request samples")),
        "samples equal the counted requests: {stderr}"
    );
    assert!(std::fs::metadata(&samples).expect("parquet").len() > 0);

    let refused = sandbox.run(&[
        "client", "-c", host, "-p", port, "-m", "1000", "-X", "1024", "-Z", "1",
    ]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "checked before connecting: {}",
        text(&refused)
    );
}

#[test]
fn the_cpu_server_answers_the_client_over_the_cpu_protocol() {
    let sandbox = frac_project();
    let built = sandbox.run(&["run", "bitstreams"]);
    assert!(built.status.success(), "{}", text(&built));
    let kernels = sandbox.results("frac-bitstreams").join("latest/nodes");
    let kernels = kernels.to_str().expect("path");
    let (child, addr) = start_server(
        &sandbox,
        &["cpu-server", "-p", "0", "-n", "2", "--kernels", kernels],
    );
    let _stop = Stop(child);
    let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
    for (function, response) in [("1", "64"), ("3", "960")] {
        let args = [
            "client", "-c", host, "-p", port, "-t", "rr", "-d", "1", "-n", "1", "-m", "1024", "-X",
            "1024",
        ];
        let mut args: Vec<&str> = args.to_vec();
        args.extend(["-R", response, "-Z", "0", "-F", function]);
        let run = sandbox.run(&args);
        assert!(run.status.success(), "-F {function}: {}", text(&run));
        assert!(
            String::from_utf8_lossy(&run.stdout).contains("exiting client: 0"),
            "{}",
            text(&run)
        );
    }
}

#[test]
fn measurements_run_in_process_and_are_cached_by_key() {
    let sandbox = frac_project();
    let (child, addr) = serve(&sandbox);
    let _stop = Stop(child);
    let set = format!("device=\"{addr}\"");
    let first = sandbox.run(&["run", "topk", "--smoke", "--set", &set]);
    assert!(first.status.success(), "{}", text(&first));
    let measured = outcome_in(&sandbox.latest_smoke("frac-measure"), "node_finished");
    assert!(
        measured.contains("measure[m=1024]") && measured.contains("measure[m=4096]"),
        "{measured:?}"
    );
    let nodes = sandbox.latest_smoke("frac-measure").join("nodes");
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(nodes.join("measure[m=4096]/summary.json")).expect("summary"),
    )
    .expect("json");
    assert!(summary["requests"].as_u64().unwrap_or(0) > 0, "{summary}");
    assert_eq!(summary["source"]["target"], addr.as_str());
    let console =
        std::fs::read_to_string(nodes.join("measure[m=4096]/console.log")).expect("console");
    assert!(console.contains("Total-Throughput"), "{console}");

    // Programming is an effect and runs again; the measurements' keys are unchanged, so they are cache hits.
    let second = sandbox.run(&["run", "topk", "--smoke", "--set", &set]);
    assert!(second.status.success(), "{}", text(&second));
    let cached = outcome_in(&sandbox.latest_smoke("frac-measure"), "node_cached");
    assert!(
        cached.contains("measure[m=1024]") && cached.contains("measure[m=4096]"),
        "{cached:?}"
    );
    assert_eq!(
        outcome_in(&sandbox.latest_smoke("frac-measure"), "node_finished"),
        ["program".to_owned()].into()
    );
}
