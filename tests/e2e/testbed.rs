//! `fracflow testbed check` against recording fake tools on PATH: it names what is missing or unreachable and
//! never touches the board.

use std::os::unix::fs::PermissionsExt;

use fracflow_record::measure::MemberClient;
use fracflow_record::{MeasureSummary, SUMMARY_FILE};

use crate::support::{Sandbox, text};

/// Writes an executable script under `bin/` of the sandbox.
pub(crate) fn fake(sandbox: &Sandbox, name: &str, body: &str) {
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
            "kind: real\ndescription: a board\ndevice:\n  addr: \"10.9.8.7:2888\"\nboard:\n  vivado_root: {root}/vivado\n  programfpga: scripts/programfpga.sh\nserver:\n  host: srv\n  addr: 10.9.8.6\n  sudo: sudo -n\nimages:\n  source: prebuilt\n  artifact: artifact/example\n"
        ),
    );
    // Pinned images for `testbed check` to verify: a Xilinx-framed full image and one partial.
    let example = sandbox.path().join("artifact/example/frac");
    std::fs::create_dir_all(example.join("jtag")).expect("mkdir");
    std::fs::create_dir_all(example.join("icap")).expect("mkdir");
    let bit = fracflow_proto::bitstream::make_bit_file(
        "frac_top",
        "xcu280-fsvh2892-2L-e",
        "d",
        "t",
        b"frames",
    );
    std::fs::write(example.join("jtag/frac.bit"), bit).expect("image");
    let bin = fracflow_proto::bitstream::make_bin_file(b"frames");
    std::fs::write(example.join("icap/c00_f00.bin"), bin).expect("partial");
    let import = sandbox.run(&["bitstreams", "import", "artifact"]);
    assert!(import.status.success(), "{}", text(&import));
    fake(sandbox, "../scripts/programfpga.sh", "exit 0");
    fake(sandbox, "../vivado/bin/vivado", "exit 0");
    fake(
        sandbox,
        "ip",
        "case \"$*\" in\n  *route*) echo '10.9.8.7 dev fpga0 src 10.9.8.1 uid 0' ;;\n  *addr*) echo '5: fpga0    inet 10.9.8.1/24 brd 10.9.8.255 scope global fpga0' ;;\n  *link*) echo '5: fpga0: <BROADCAST,UP> mtu 9000 qdisc mq state UP' ;;\nesac",
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
        "ok      MTU: fpga0: mtu 9000",
        "ok      board ping: 10.9.8.7 answers",
        "ok      server ssh: srv (fracflow found there)",
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
        ["srv -- sudo -n true", "srv -- command -v 'fracflow'"]
            .iter()
            .all(|command| calls
                .lines()
                .any(|l| l.starts_with("ssh -o BatchMode=yes") && l.ends_with(command))),
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

/// A "board" that is the emulated device (as a board double, with the pinned Xilinx-framed fixture images)
/// behind a real-testbed profile: the fake `programfpga.sh` records its arguments and environment, then
/// programs the device over its management channel, so the slot loads and the measurement that follow are real.
pub(crate) fn board_project(
    ready_timeout_s: u32,
    ping_body: &str,
) -> (Sandbox, crate::fpga::Stop, String) {
    let sandbox = crate::figures::figures_project();
    crate::board_double::pinned_fixture_artifact(&sandbox);
    let (child, addr) = crate::fpga::serve_board_double(&sandbox);
    sandbox.write(
        "hw/testbeds/board.yaml",
        &format!(
            "kind: real\ndescription: the emulated device behind fake board tools\ndevice:\n  addr: \"{addr}\"\nboard:\n  jtag: localhost:3121/xilinx_tcf/Xilinx/123\n  vivado_root: /opt/vivado\n  programfpga: scripts/programfpga.sh\n  nic: fake0\n  settle_s: 0\n  ready_timeout_s: {ready_timeout_s}\nsudo: \"\"\nimages:\n  source: prebuilt\n  artifact: artifact/example\n"
        ),
    );
    fake(
        &sandbox,
        "../scripts/programfpga.sh",
        &format!(
            "echo \"env VIVADO_ROOT=$VIVADO_ROOT HW_TARGET=$HW_TARGET\" >> \"$FAKE_LOG\"\nexec \"{}\" device program --addr {addr} \"$1\"",
            env!("CARGO_BIN_EXE_fracflow")
        ),
    );
    fake(
        &sandbox,
        "ip",
        "echo '7: fake0    inet 10.1.1.1/24 scope global fake0'",
    );
    fake(&sandbox, "ping", ping_body);
    (sandbox, crate::fpga::Stop(child), addr)
}

pub(crate) fn run_on_board(sandbox: &Sandbox) -> std::process::Output {
    let path = format!(
        "{}:{}",
        sandbox.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sandbox
        .command(&[
            "run",
            "fig16",
            "--smoke",
            "--testbed",
            "board",
            "--only",
            "k=1",
            "--only",
            "n=4",
        ])
        .env("PATH", path)
        .env("FAKE_LOG", sandbox.path().join("calls.log"))
        .output()
        .expect("run fracflow")
}

#[test]
fn a_real_testbed_programs_waits_for_the_link_and_measures() {
    // The board answers ping on the second try.
    let (sandbox, _stop, addr) = board_project(
        20,
        "n=$(cat \"$FAKE_LOG.pings\" 2>/dev/null || echo 0); echo $((n+1)) > \"$FAKE_LOG.pings\"; [ $n -ge 1 ]",
    );
    let run = run_on_board(&sandbox);
    assert!(matches!(run.status.code(), Some(0 | 5)), "{}", text(&run));
    let calls = std::fs::read_to_string(sandbox.path().join("calls.log")).expect("calls");
    let order: Vec<&str> = calls
        .lines()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    let first = |tool: &str| order.iter().position(|t| *t == tool);
    assert!(
        first("programfpga.sh") < first("ip") && first("ip") < first("ping"),
        "program, then the NIC, then ping: {calls}"
    );
    assert!(calls.contains("jtag/frac.bit"), "{calls}");
    assert!(
        calls
            .contains("env VIVADO_ROOT=/opt/vivado HW_TARGET=localhost:3121/xilinx_tcf/Xilinx/123"),
        "{calls}"
    );
    assert_eq!(order.iter().filter(|t| **t == "ping").count(), 2, "{calls}");
    let summary: MeasureSummary = fracflow_record::read_record(
        &sandbox
            .latest_on("scalability", Some("smoke"), "board")
            .join("nodes/frac[m=4096,k=1,n=4]")
            .join(SUMMARY_FILE),
    )
    .expect("the fRAC point was measured");
    assert_eq!(summary.source.testbed_kind, "real");
    assert_eq!(summary.source.target, addr.as_str());
    assert!(
        summary.device.iter().any(|a| a.action.contains("program"))
            && summary
                .device
                .iter()
                .any(|a| a.file.contains("c00_f00.bin")),
        "{:?}",
        summary.device
    );
}

#[test]
fn a_board_that_never_answers_fails_after_the_ready_timeout_and_measures_nothing() {
    let (sandbox, _stop, _addr) = board_project(3, "exit 1");
    let run = run_on_board(&sandbox);
    let output = text(&run);
    assert_eq!(run.status.code(), Some(1), "{output}");
    assert!(output.contains("did not answer ping"), "{output}");
    assert!(
        !sandbox
            .latest_on("scalability", Some("smoke"), "board")
            .join("nodes/frac[m=4096,k=1,n=4]")
            .exists(),
        "nothing measured against a board that is not up"
    );
}

/// fperf's documented rr console (docs/tools.md §1.6) and `hugepage_thread_<i>.txt` latencies (§1.7):
/// thread `i` completes `2 + s + i` requests in second `s`, the `j`-th taking `1000 × (s + 1) + j` ns.
pub(crate) const FAKE_FPERF: &str = r#"echo "env TPA_ID=$TPA_ID TPA_ETH_DEV=$TPA_ETH_DEV TPA_CFG=$TPA_CFG" >> "$FAKE_LOG"
d=3; n=1; D=""
while [ $# -gt 0 ]; do
  case "$1" in -d) d=$2; shift 2 ;; -n) n=$2; shift 2 ;; -D) D=$2; shift 2 ;; *) shift ;; esac
done
s=0
while [ $s -lt $d ]; do
  i=0
  while [ $i -lt $n ]; do
    c=$((2 + s + i))
    printf '%5d RR .%d min=1.00us avg=2.00us max=3.00us read(Gbits/sec)=0.001 write(Gbits/sec)=0.001 count=%d\n' $s $i $c
    j=1
    while [ $j -le $c ]; do echo $((1000 * (s + 1) + j)) >> "$D/hugepage_thread_$i.txt"; j=$((j + 1)); done
    i=$((i + 1))
  done
  printf '%5d RR Total-Throughput read(Gbits/sec)=0.002 write(Gbits/sec)=0.002\n' $s
  s=$((s + 1))
done
printf '\n---\n'
i=0
while [ $i -lt $n ]; do printf '%2d nr_conn=1 nr_zero_io_conn=0\n' $i; i=$((i + 1)); done
exit 0"#;

#[test]
fn the_real_fperf_measures_under_sudo_asked_once_and_kept_fresh() {
    let (sandbox, _stop, addr) = board_project(20, "exit 0");
    let bin = sandbox.path().join("bin");
    let profile = std::fs::read_to_string(sandbox.path().join("hw/testbeds/board.yaml"))
        .expect("profile")
        .replace("sudo: \"\"\n", "sudo: sudo\nsudo_refresh_s: 1\n");
    sandbox.write(
        "hw/testbeds/board.yaml",
        &format!(
            "{profile}client:\n  start_cpu: 2\n  tpa: {bin}/tpa\n  fperf: {bin}/fperf\n  tpa_cfg: \"tcp {{tso = 0; }}\"\n",
            bin = bin.display()
        ),
    );
    // sudo needs a password until `sudo -v` ran once (the run's one prompt); then it runs the command.
    fake(
        &sandbox,
        "sudo",
        "stamp=\"$FAKE_LOG.fresh\"\ncase \"$1\" in\n  -v) touch \"$stamp\"; exit 0 ;;\n  -n) [ -e \"$stamp\" ] || exit 1; \
         shift; [ \"$1\" = true ] || [ \"$1\" = -v ] && exit 0 ;;\nesac\n[ -e \"$stamp\" ] || exit 1\nexec \"$@\"",
    );
    fake(
        &sandbox,
        "tpa",
        "[ \"$1\" = run ] || exit 2\nshift\nexec \"$@\"",
    );
    // The fakes answer at once, so the run could end before the 1-s refresher first wakes: fperf waits
    // (bounded, 20 s) until a refresh was logged, as an hour-long measurement would outlast many.
    fake(
        &sandbox,
        "fperf",
        &format!(
            "i=0; while ! grep -qx 'sudo -n -v' \"$FAKE_LOG\" && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done\n{FAKE_FPERF}"
        ),
    );
    let run = run_on_board(&sandbox);
    let output = text(&run);
    assert!(matches!(run.status.code(), Some(0 | 5)), "{output}");
    let calls = std::fs::read_to_string(sandbox.path().join("calls.log")).expect("calls");
    let lines: Vec<&str> = calls.lines().collect();
    let first = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {calls}"))
    };
    let frac_fperf = lines
        .iter()
        .position(|l| l.starts_with("fperf ") && l.contains("-Z 1"))
        .unwrap_or_else(|| panic!("fperf never ran against the board: {calls}"));
    assert!(
        first("sudo -n true") < first("sudo -v")
            && first("sudo -v") < first("fperf ")
            && first("../scripts/programfpga.sh") < frac_fperf,
        "sudo checked and asked once before any fperf; the board programmed before its fperf: {calls}"
    );
    assert!(
        lines[first("sudo -v")..].contains(&"sudo -n -v"),
        "kept fresh after the prompt: {calls}"
    );
    assert_eq!(
        lines.iter().filter(|l| **l == "sudo -v").count(),
        1,
        "{calls}"
    );
    let (host, port) = addr.rsplit_once(':').expect("addr");
    // The smoke point's `-d 3` plus fperf's 120 s of grace.
    assert!(
        calls.contains(&format!(
            "sudo timeout -k 15 123 env TPA_ID=client TPA_ETH_DEV=fake0 TPA_CFG=tcp {{tso = 0; }} {bin}/tpa run \
             {bin}/fperf -c {host} -p {port} -S 2",
            bin = bin.display()
        )),
        "{calls}"
    );
    assert!(
        calls.contains("env TPA_ID=client TPA_ETH_DEV=fake0 TPA_CFG=tcp {tso = 0; }"),
        "{calls}"
    );
    let summary: MeasureSummary = fracflow_record::read_record(
        &sandbox
            .latest_on("scalability", Some("smoke"), "board")
            .join("nodes/frac[m=4096,k=1,n=4]")
            .join(SUMMARY_FILE),
    )
    .expect("the fRAC point was measured");
    assert_eq!(
        summary.source.client,
        "real fperf (libtpa/DPDK) through the adapter"
    );
    assert!(
        matches!(summary.members[0].client, MemberClient::Fperf(_)),
        "{:?}",
        summary.members
    );
    assert!(summary.requests > 0, "{summary:?}");
}

#[test]
fn a_profile_that_drives_other_tools_needs_no_fpga_device() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "hw/testbeds/tools.yaml",
        "kind: real\ndescription: iperf3 on loopback\nsudo: \"\"\n",
    );
    let run = check(&sandbox, "tools");
    let output = text(&run);
    assert_eq!(run.status.code(), Some(0), "{output}");
    assert!(output.contains("ok      device: none"), "{output}");
    assert!(!output.contains("device.addr"), "{output}");
}

/// `ip ARGS`, bounded by `timeout`; Err(what it said) when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("timeout")
        .arg("10")
        .arg("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            text(&out).trim()
        ))
    }
}

/// A network namespace holding one end of a veth pair, the other end on this host: a link to a "board" at
/// `peer_addr`. Removed when dropped (deleting the namespace deletes its end, and with it the pair).
struct VethLink {
    namespace: String,
    host_nic: String,
    peer_addr: String,
}

impl VethLink {
    /// A fresh pair with `mtu`, named after this process (and a counter) so parallel test runs never share one.
    fn new(mtu: u32) -> Result<VethLink, String> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        // Interface names have at most 15 bytes.
        let tag = format!("{:x}{n}", pid % 0x10_0000);
        let link = VethLink {
            namespace: format!("fracflow-test-{pid}-{n}"),
            host_nic: format!("ffh{tag}"),
            peer_addr: format!("10.254.{}.{}", (pid + n) % 250, 2),
        };
        let host_addr = format!("10.254.{}.1/30", (pid + n) % 250);
        let peer_nic = format!("ffp{tag}");
        ip(&["netns", "add", &link.namespace]).map_err(|e| {
            format!("network namespaces are not permitted here (the test needs root and CAP_SYS_ADMIN): {e}")
        })?;
        let mtu = mtu.to_string();
        ip(&[
            "link",
            "add",
            &link.host_nic,
            "mtu",
            &mtu,
            "type",
            "veth",
            "peer",
            "name",
            &peer_nic,
            "mtu",
            &mtu,
            "netns",
            &link.namespace,
        ])?;
        ip(&["addr", "add", &host_addr, "dev", &link.host_nic])?;
        ip(&["link", "set", &link.host_nic, "up"])?;
        let peer = format!("{}/30", link.peer_addr);
        ip(&[
            "-n",
            &link.namespace,
            "addr",
            "add",
            &peer,
            "dev",
            &peer_nic,
        ])?;
        ip(&["-n", &link.namespace, "link", "set", &peer_nic, "up"])?;
        Ok(link)
    }
}

impl Drop for VethLink {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.namespace]);
        // Gone with the namespace already, unless the peer never moved into it.
        let _ = ip(&["link", "del", &self.host_nic]);
    }
}

#[test]
fn a_link_without_jumbo_frames_and_too_few_hugepages_are_reported() {
    let link = VethLink::new(1500).unwrap_or_else(|why| panic!("{why}"));
    let sandbox = Sandbox::new();
    sandbox.write(
        "hw/testbeds/veth.yaml",
        &format!(
            "kind: real\ndescription: a board behind a veth pair\ndevice:\n  addr: \"{}:2888\"\nboard:\n  nic: {}\n\
             sudo: \"\"\nclient:\n  tpa: /bin/true\n  fperf: /bin/true\n",
            link.peer_addr, link.host_nic
        ),
    );
    let run = sandbox
        .command(&["testbed", "check", "--testbed", "veth"])
        .output()
        .expect("run fracflow");
    let output = text(&run);
    assert_eq!(run.status.code(), Some(1), "{output}");
    let mtu_line = format!(
        "MISSING MTU: {}: found mtu 1500, needs ≥ 8232",
        link.host_nic
    );
    assert!(output.contains(&mtu_line), "no `{mtu_line}` in:\n{output}");
    // What this host holds decides the verdict; the rule (4 processes × 8 GB) is the same everywhere.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> u64 {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let free_mb = field("HugePages_Free:") * field("Hugepagesize:") / 1024;
    let verdict = if free_mb >= 4 * 8192 {
        "ok     "
    } else {
        "MISSING"
    };
    let hugepage_line = format!("{verdict} hugepages: found ");
    assert!(
        output.contains(&hugepage_line),
        "no `{hugepage_line}` in:\n{output}"
    );
    assert!(
        output.contains(
            "needs 32 GB: 8 GB per fperf process (socket-mem 8192) × 4 processes at once"
        ),
        "{output}"
    );
    assert!(output.contains("ok      tpa: /bin/true"), "{output}");
}

#[test]
fn tpa_and_fperf_are_not_required_where_the_embedded_client_measures() {
    let sandbox = Sandbox::new();
    real_testbed(&sandbox);
    fake(&sandbox, "ping", "exit 0");
    // Named but empty `fperf`: the profile measures with the embedded client, so neither tool nor hugepages
    // are needed.
    let profile =
        std::fs::read_to_string(sandbox.path().join("hw/testbeds/board.yaml")).expect("profile");
    sandbox.write(
        "hw/testbeds/board.yaml",
        &format!("{profile}client:\n  tpa: /nonexistent/tpa\n  fperf: \"\"\n"),
    );
    let run = check(&sandbox, "board");
    let output = text(&run);
    assert_eq!(run.status.code(), Some(0), "{output}");
    assert!(
        !output.contains("tpa") && !output.contains("hugepages"),
        "{output}"
    );
}
