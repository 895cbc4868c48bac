//! `fracflow testbed check` against recording fake tools on PATH: it names what is missing or unreachable and
//! never touches the board.

use std::os::unix::fs::PermissionsExt;

use crate::support::{Sandbox, text};

/// Writes an executable script under `bin/` of the sandbox.
fn fake(sandbox: &Sandbox, name: &str, body: &str) {
    let path = sandbox.path().join("bin").join(name);
    sandbox.write(
        &format!("bin/{name}"),
        &format!("#!/bin/sh\necho \"{name} $*\" >> \"$FAKE_LOG\"\n{body}\n"),
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn real_testbed(sandbox: &Sandbox) {
    let root = sandbox.path().display().to_string();
    sandbox.write(
        "hw/testbeds/board.yaml",
        &format!(
            "kind: real\ndescription: a board\ndevice:\n  addr: \"10.9.8.7:2888\"\nboard:\n  vivado_root: {root}/vivado\n  programfpga: scripts/programfpga.sh\nserver:\n  host: srv\n  addr: 10.9.8.6\n  sudo: sudo -n\n"
        ),
    );
    fake(sandbox, "../scripts/programfpga.sh", "exit 0");
    fake(sandbox, "../vivado/bin/vivado", "exit 0");
    fake(
        sandbox,
        "ip",
        "case \"$*\" in\n  *route*) echo '10.9.8.7 dev fpga0 src 10.9.8.1 uid 0' ;;\n  *addr*) echo '5: fpga0    inet 10.9.8.1/24 brd 10.9.8.255 scope global fpga0' ;;\nesac",
    );
    fake(sandbox, "sudo", "exit 0");
    fake(sandbox, "ssh", "exit 0");
}

fn check(sandbox: &Sandbox, testbed: &str) -> std::process::Output {
    let path = format!(
        "{}:{}",
        sandbox.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sandbox
        .command(&["testbed", "check", "--testbed", testbed])
        .env("PATH", path)
        .env("FAKE_LOG", sandbox.path().join("calls.log"))
        .output()
        .expect("run fracflow")
}

#[test]
fn a_ready_testbed_is_checked_without_programming_the_board() {
    let sandbox = Sandbox::new();
    real_testbed(&sandbox);
    fake(&sandbox, "ping", "exit 0");
    let run = check(&sandbox, "board");
    let output = text(&run);
    assert_eq!(run.status.code(), Some(0), "{output}");
    for line in [
        "ok      NIC: fpga0 10.9.8.1/24",
        "ok      board ping: 10.9.8.7 answers",
        "ok      server ssh: srv",
        "ready",
    ] {
        assert!(output.contains(line), "missing `{line}` in:\n{output}");
    }
    let calls = std::fs::read_to_string(sandbox.path().join("calls.log")).expect("calls");
    assert!(
        !calls.contains("programfpga") && !calls.contains("vivado"),
        "checking must not program: {calls}"
    );
    assert!(
        calls.contains("ssh -o BatchMode=yes -o ConnectTimeout=5 srv sudo -n true"),
        "{calls}"
    );
}

#[test]
fn a_board_that_does_not_answer_and_a_missing_tool_are_named() {
    let sandbox = Sandbox::new();
    real_testbed(&sandbox);
    fake(&sandbox, "ping", "exit 1");
    std::fs::remove_file(sandbox.path().join("vivado/bin/vivado")).expect("remove vivado");
    let run = check(&sandbox, "board");
    let output = text(&run);
    assert_eq!(run.status.code(), Some(1), "{output}");
    assert!(
        output.contains("MISSING board ping: 10.9.8.7 does not answer ping"),
        "{output}"
    );
    assert!(output.contains("MISSING Vivado"), "{output}");
    assert!(output.contains("2 thing(s) missing"), "{output}");
}

#[test]
fn an_unknown_key_in_a_profile_is_an_error_with_its_position() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "hw/testbeds/typo.yaml",
        "kind: real\ndevice:\n  addr: \"10.9.8.7:2888\"\nbord:\n  nic: x\n",
    );
    let run = check(&sandbox, "typo");
    let output = text(&run);
    assert_eq!(run.status.code(), Some(2), "{output}");
    assert!(output.contains("typo.yaml"), "{output}");
    assert!(output.contains("bord"), "{output}");
    assert!(
        output.contains("4:1") || output.contains("line 4"),
        "{output}"
    );
}

#[test]
fn the_emulated_testbed_needs_only_a_compiler() {
    let sandbox = Sandbox::new();
    let run = check(&sandbox, "emulated");
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert!(
        text(&run).contains("ok      device: emulated"),
        "{}",
        text(&run)
    );
}
