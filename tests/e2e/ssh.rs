//! The CPU baseline server on a "server host" reached over ssh: a throwaway OpenSSH server the test starts on
//! 127.0.0.1 with keys it generates, stopped by pid at the end. `scalability_cpu --smoke` runs its points
//! against `fracflow cpu-server` started there for each point.
//!
//! The profile's `server.fracflow` is a wrapper around the real binary that can make a start fail once or
//! make a 4-core server die a second after it accepted connections, so the test sees the retry, a point
//! whose server dies mid-run (that point fails, the others are kept) and the refusal to start while a
//! leftover server of ours runs.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::figures::figures_project;
use crate::support::{Sandbox, text};

/// An sshd on 127.0.0.1, killed by pid when dropped.
struct Sshd {
    child: Child,
    port: u16,
    client_key: PathBuf,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn sshd_program() -> PathBuf {
    let path = PathBuf::from("/usr/sbin/sshd");
    assert!(
        path.is_file(),
        "this test starts a real OpenSSH server: install it with `apt-get install -y openssh-server` \
         (.ci/run does)"
    );
    path
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen (openssh-client)");
    assert!(status.success(), "ssh-keygen failed");
}

fn start_sshd(dir: &Path) -> Sshd {
    let program = sshd_program();
    std::fs::create_dir_all(dir).expect("sshd dir");
    keygen(&dir.join("host_key"));
    keygen(&dir.join("client_key"));
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys"))
        .expect("authorized_keys");
    // sshd refuses to start without its privilege-separation directory (normally made by the service unit).
    std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
    let port = free_port();
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\nAuthorizedKeysFile {dir}/authorized_keys\n\
             PidFile {dir}/sshd.pid\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PermitRootLogin prohibit-password\nUsePAM no\n",
            dir = dir.display()
        ),
    )
    .expect("sshd_config");
    let child = Command::new(program)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(dir.join("sshd.log")).expect("sshd.log"))
        .spawn()
        .expect("start sshd");
    let sshd = Sshd {
        child,
        port,
        client_key: dir.join("client_key"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "sshd did not listen on {port}: {}",
            std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sshd
}

fn user() -> String {
    let out = Command::new("id").arg("-un").output().expect("id -un");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The server host's `fracflow`: the real binary, except when the test's flag files say otherwise.
fn server_wrapper(sandbox: &Sandbox) -> PathBuf {
    let flags = sandbox.path().join("flags");
    std::fs::create_dir_all(&flags).expect("flags");
    let real = env!("CARGO_BIN_EXE_fracflow");
    let script = format!(
        r#"#!/bin/sh
echo "$*" >> "{flags}/starts"
if [ -e "{flags}/fail-once" ]; then rm -f "{flags}/fail-once"; echo "refusing this start" >&2; exit 1; fi
case " $* " in
  *" -n 4 "*)
    if [ -e "{flags}/die" ]; then
      "{real}" "$@" & child=$!
      sleep 1
      kill -9 $child
      wait $child
      exit 1
    fi ;;
esac
exec "{real}" "$@"
"#,
        flags = flags.display()
    );
    let path = sandbox.path().join("server-host/fracflow");
    sandbox.write("server-host/fracflow", &script);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn servers_of_ours() -> String {
    let out = Command::new("pgrep")
        .args(["-af", "--", "--token [f]racflow-"])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn node_logs(sandbox: &Sandbox) -> String {
    let logs = sandbox
        .latest_on("scalability_cpu", Some("smoke"), "ssh-server")
        .join("logs");
    let mut all = String::new();
    for entry in std::fs::read_dir(&logs).expect("logs").flatten() {
        all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    all
}

#[test]
fn cpu_servers_start_over_ssh_and_a_server_that_dies_fails_only_its_point() {
    let sandbox = figures_project();
    let sshd = start_sshd(&sandbox.path().join("sshd"));
    let wrapper = server_wrapper(&sandbox);
    let flags = sandbox.path().join("flags");
    let emulated = std::fs::read_to_string(sandbox.path().join("hw/testbeds/emulated.yaml"))
        .expect("emulated profile");
    sandbox.write(
        "hw/testbeds/ssh-server.yaml",
        &format!(
            "{emulated}\nserver:\n  host: {user}@127.0.0.1\n  addr: 127.0.0.1\n  port: {port}\n  sudo: \"\"\n  \
             fracflow: {wrapper}\n  start_timeout_s: 10\n  ssh_options: [-p, \"{ssh_port}\", -i, {key}, -o, \
             StrictHostKeyChecking=no, -o, UserKnownHostsFile=/dev/null, -o, LogLevel=ERROR]\n",
            user = user(),
            port = free_port(),
            wrapper = wrapper.display(),
            ssh_port = sshd.port,
            key = sshd.client_key.display(),
        )
        .replace("kind: emulated\n", "kind: emulated\n# the CPU server runs on a throwaway sshd's host\n"),
    );
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "cpu",
            "--smoke",
            "--testbed",
            "ssh-server",
            "--keep-going",
        ];
        args.extend(extra);
        sandbox.run(&args)
    };

    // Run 1: the first start fails once and is retried; the 4-core server dies mid-point.
    std::fs::write(flags.join("fail-once"), "").expect("flag");
    std::fs::write(flags.join("die"), "").expect("flag");
    let first = run(&[]);
    let output = text(&first);
    assert_ne!(first.status.code(), Some(0), "{output}");
    assert!(
        output.contains("exited during the run"),
        "the dead server's point must say why it failed:\n{output}"
    );
    let logs = node_logs(&sandbox);
    assert!(
        logs.contains("first start failed") && logs.contains("the retry started"),
        "{logs}"
    );
    assert!(logs.contains("accepts connections on 127.0.0.1:"), "{logs}");
    let nodes = sandbox
        .latest_on("scalability_cpu", Some("smoke"), "ssh-server")
        .join("nodes");
    let summaries: Vec<String> = std::fs::read_dir(&nodes)
        .expect("nodes")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("summary.json")).ok())
        .collect();
    assert_eq!(
        summaries.len(),
        2,
        "the two 1-core points are kept, the 4-core ones are not:\n{output}"
    );
    for summary in &summaries {
        assert!(summary.contains("over ssh"), "{summary}");
        assert!(summary.contains("\"k\":1"), "{summary}");
    }
    assert_eq!(servers_of_ours(), "", "every server was stopped");
    let starts = std::fs::read_to_string(flags.join("starts")).expect("starts");
    assert!(
        starts.lines().all(|l| l.contains("--token fracflow-")),
        "{starts}"
    );

    // Run 2: a leftover server of ours on the host: the run refuses to start another (and starts none).
    let starts_before = std::fs::read_to_string(flags.join("starts"))
        .expect("starts")
        .lines()
        .count();
    let mut leftover = Command::new("sh")
        .args([
            "-c",
            // Two commands, so the shell stays (a lone command may be exec'd, dropping the token from argv).
            "sleep 60; true",
            "leftover",
            "--token",
            "fracflow-leftover-from-a-crash",
        ])
        .spawn()
        .expect("leftover");
    std::fs::remove_file(flags.join("die")).expect("flag");
    let refused = run(&[]);
    let _ = leftover.kill();
    let _ = leftover.wait();
    let output = text(&refused);
    assert_ne!(refused.status.code(), Some(0), "{output}");
    assert!(
        output.contains("still runs on") && output.contains("fracflow-leftover-from-a-crash"),
        "{output}"
    );

    assert_eq!(
        std::fs::read_to_string(flags.join("starts"))
            .expect("starts")
            .lines()
            .count(),
        starts_before,
        "no server started beside the leftover"
    );

    // Run 3: only the failed points run; the kept ones are cache hits.
    let last = run(&[]);
    let output = text(&last);
    assert!(matches!(last.status.code(), Some(0 | 5)), "{output}");
    let starts_after = std::fs::read_to_string(flags.join("starts"))
        .expect("starts")
        .lines()
        .count();
    assert_eq!(
        starts_after - starts_before,
        2,
        "only the two 4-core points start a server; the kept 1-core points are cache hits"
    );
    assert_eq!(servers_of_ours(), "");
}
