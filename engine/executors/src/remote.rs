//! Other hosts of a testbed, reached with `ssh -o BatchMode=yes` (a missing key fails at once instead of
//! waiting for a password), and the CPU baseline server a run starts on the server host for each point.
//!
//! The server follows the artifact's procedure (`docs/frac.md` §6.1) with our own marking: it is started
//! as `fracflow cpu-server … --token fracflow-<run>-<engine pid>-<n>`, the engine waits until it accepts TCP,
//! and it is stopped by the pid its launcher printed, after checking that this pid's argv still carries the
//! token (a recycled pid is never signalled). A failed start is retried once. A start is refused while a
//! process carrying any `--token fracflow-…` runs on that host: a leftover of ours would hold the port or
//! the cores and skew the point.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fracflow_core::Cancel;

use crate::process::{self, Background, Ending, Grace, Spawn};

/// The start of every server token; leftovers are found by it.
pub const TOKEN_PREFIX: &str = "fracflow-";
/// What the launcher prints before it becomes the server: `fracflow-server-pid <pid>`.
const PID_MARK: &str = "fracflow-server-pid";
/// ssh's own connection timeout, so an unreachable host fails a step instead of hanging it.
const CONNECT_TIMEOUT_S: u32 = 10;
/// Upper bound of a short remote command (a leftover check, a kill).
const REMOTE_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause before the one retry of a failed start (the artifact waits 5 s; a port in TIME_WAIT clears sooner).
const RETRY_PAUSE: Duration = Duration::from_secs(2);
/// How long a server gets to exit after SIGINT, then after SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// A host reached over ssh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    /// `user@host` or an alias of `~/.ssh/config`.
    pub destination: String,
    /// Extra ssh options before the destination (`-p 2222`, `-i key`, `-o …`).
    pub options: Vec<String>,
}

/// Whether an ssh command may start the shared connection later commands to the host reuse. A handshake costs
/// about 0.45 s on a loaded 2-core machine and a point needs three commands (leftover check, launch, stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mux {
    /// A short command: it may become the shared connection, which stays up `CONTROL_PERSIST_S` after its
    /// last session.
    Start,
    /// The server's launch: it uses the shared connection when there is one but never becomes it, since a
    /// backgrounded master keeps its argv, and this one's names the server's token.
    Join,
}

/// How long an idle shared connection stays up.
const CONTROL_PERSIST_S: u32 = 60;

impl SshHost {
    /// ssh's arguments for running `remote` (one shell command line) on the host. The profile's options come
    /// before the connection-sharing defaults, so they override them (ssh keeps an option's first value);
    /// `BatchMode` comes first and cannot be overridden.
    pub fn args(&self, remote: &str, mux: Mux) -> Vec<String> {
        let mut args = vec![
            "-o".to_owned(),
            "BatchMode=yes".to_owned(),
            "-o".to_owned(),
            format!("ConnectTimeout={CONNECT_TIMEOUT_S}"),
        ];
        args.extend(self.options.iter().cloned());
        args.extend([
            "-o".to_owned(),
            match control_dir() {
                // %C: a hash of this user, host, port and remote user; short, so the socket path fits.
                Some(dir) => format!("ControlPath={}/%C", dir.display()),
                None => "ControlPath=none".to_owned(),
            },
            "-o".to_owned(),
            match mux {
                Mux::Start => "ControlMaster=auto".to_owned(),
                Mux::Join => "ControlMaster=no".to_owned(),
            },
            "-o".to_owned(),
            format!("ControlPersist={CONTROL_PERSIST_S}"),
        ]);
        args.push(self.destination.clone());
        args.push("--".to_owned());
        args.push(remote.to_owned());
        args
    }

    /// The process that runs `remote` there; its stderr goes to `log`.
    pub fn spawn(
        &self,
        remote: &str,
        mux: Mux,
        log: &Path,
        cwd: &Path,
        timeout: Option<Duration>,
    ) -> Spawn {
        Spawn {
            program: PathBuf::from("ssh"),
            args: self.args(remote, mux),
            env: Vec::new(),
            cwd: cwd.to_owned(),
            log: log.to_owned(),
            timeout,
            grace: Grace {
                after_interrupt: Duration::from_secs(2),
                after_terminate: Duration::from_secs(2),
            },
        }
    }

    /// Runs a short command there to its end (bounded) and returns its exit code and stdout.
    pub fn run(
        &self,
        remote: &str,
        log: &Path,
        cwd: &Path,
        cancel: &Cancel,
    ) -> Result<(i32, String), String> {
        let spawn = self.spawn(remote, Mux::Start, log, cwd, Some(REMOTE_COMMAND_TIMEOUT));
        let finished = process::run(&spawn, cancel)
            .map_err(|e| format!("cannot run ssh to {}: {e}", self.destination))?;
        let stdout = String::from_utf8_lossy(&finished.stdout).into_owned();
        match finished.ending {
            // ssh's own failures (no route, key refused) are 255.
            Ending::Exited(255) => Err(format!(
                "ssh to {} failed (exit 255: unreachable, or the key is refused under BatchMode); see the log",
                self.destination
            )),
            Ending::Exited(code) => Ok((code, stdout)),
            other => Err(format!(
                "ssh to {} running `{remote}` ended with {other:?}",
                self.destination
            )),
        }
    }
}

/// The folder of this user's shared ssh connections, `$XDG_RUNTIME_DIR/fracflow-ssh` or else
/// `/tmp/fracflow-ssh-UID`; `None` (no sharing: a handshake per command) when neither is a private folder of this
/// user. A connection's socket in a folder others can write could be one another user put there, and ssh would
/// run our commands through it and report whatever it answers.
fn control_dir() -> Option<&'static Path> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let uid = rustix::process::getuid().as_raw();
        let runtime = std::env::var_os("XDG_RUNTIME_DIR")
            .map(|dir| PathBuf::from(dir).join("fracflow-ssh"))
            .filter(|dir| fits_a_socket(dir));
        runtime
            .into_iter()
            .chain([PathBuf::from(format!("/tmp/fracflow-ssh-{uid}"))])
            .find(|dir| private_dir(dir, uid).is_ok())
    })
    .as_deref()
}

/// Whether `dir/%C` fits a Unix socket's path (108 bytes), with the 40 characters of `%C` and the 17 of the
/// temporary name ssh binds first.
fn fits_a_socket(dir: &Path) -> bool {
    dir.as_os_str().len() + 1 + 40 + 17 < 108
}

/// Makes `dir` (mode 0700) unless it exists, and checks that it is a folder, not a link, owned by `uid`, that
/// nobody else may enter.
fn private_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        made => made?,
    }
    let metadata = std::fs::symlink_metadata(dir)?;
    if !metadata.is_dir() || metadata.uid() != uid || metadata.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a private folder of this user",
            dir.display()
        )));
    }
    Ok(())
}

/// `text` as one word for a POSIX shell.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A token no other server of this engine or any other run carries: run id, engine pid and a counter.
pub fn server_token(run_id: &str) -> String {
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let run: String = run_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!(
        "{TOKEN_PREFIX}{run}-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    )
}

/// How to start one CPU baseline server on a remote host.
#[derive(Debug, Clone)]
pub struct ServerLaunch {
    pub host: SshHost,
    /// The `fracflow` program on that host.
    pub fracflow: String,
    /// The address the server binds.
    pub listen: SocketAddr,
    /// The address clients (and the readiness probe) connect to.
    pub connect: SocketAddr,
    pub workers: usize,
    pub start_cpu: Option<u32>,
    pub token: String,
    /// How long the server gets to accept a TCP connection.
    pub start_timeout: Duration,
}

impl ServerLaunch {
    /// The remote command line: print our pid, then become the server (so the pid is the server's).
    fn remote_command(&self) -> String {
        let mut server = format!(
            "exec {} cpu-server --listen {} -n {}",
            quote(&self.fracflow),
            self.listen,
            self.workers
        );
        if let Some(cpu) = self.start_cpu {
            server.push_str(&format!(" -S {cpu}"));
        }
        server.push_str(&format!(" --token {}", quote(&self.token)));
        format!("sh -c {}", quote(&format!("echo {PID_MARK} $$; {server}")))
    }

    /// `host:port` resolved.
    pub fn resolve(addr: &str, port: u16) -> Result<SocketAddr, String> {
        (addr, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut found| found.next())
            .ok_or_else(|| format!("server address `{addr}` does not resolve"))
    }
}

/// A running remote server and the ssh session that started it.
#[derive(Debug)]
pub struct RemoteServer {
    launch: ServerLaunch,
    session: Background,
    pid: u32,
    /// What happened, for the node log.
    pub notes: Vec<String>,
}

impl RemoteServer {
    /// Starts the server and waits until it accepts TCP; retries a failed start once. `work` receives the
    /// launcher's stdout (`server-<attempt>.out`); ssh's and the server's stderr go to `log`.
    pub fn start(
        launch: &ServerLaunch,
        work: &Path,
        log: &Path,
        cancel: &Cancel,
    ) -> Result<RemoteServer, String> {
        refuse_leftovers(&launch.host, work, log, cancel)?;
        let first = match start_once(launch, work, log, 1, cancel) {
            Ok(server) => return Ok(server),
            Err(why) => why,
        };
        if cancel.is_cancelled() {
            return Err(first);
        }
        std::thread::sleep(RETRY_PAUSE);
        let mut server = start_once(launch, work, log, 2, cancel).map_err(|second| {
            format!("the CPU server did not start twice: {second} (first attempt: {first})")
        })?;
        server.notes.insert(
            0,
            format!("first start failed ({first}); the retry started"),
        );
        Ok(server)
    }

    pub fn addr(&self) -> SocketAddr {
        self.launch.connect
    }

    /// The server's pid on its host.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// True while the ssh session, and so the server it runs, is up.
    pub fn running(&self) -> bool {
        matches!(self.session.ended(), Ok(None))
    }

    /// SIGINT to its pid (checked against the token), SIGKILL when it does not exit in time, then the ssh
    /// session ends by itself or is stopped. Tells whether the server had died by itself: it was gone before
    /// the stop, or it ended with a failure before any SIGKILL of ours (a server stopped by SIGINT exits 0).
    pub fn stop(self, work: &Path, log: &Path) -> Result<Stopped, String> {
        let host = &self.launch.host;
        if let Ok(Some(ending)) = self.session.ended() {
            return Ok(Stopped { died: true, ending });
        }
        let mut killed = false;
        for signal in ["INT", "KILL"] {
            if !self.running() {
                break;
            }
            killed = signal == "KILL";
            signal_checked(host, self.pid, &self.launch.token, signal, work, log)?;
            if self
                .session
                .wait_for(STOP_WAIT)
                .map_err(|e| format!("waiting for the server's ssh session: {e}"))?
                .is_some()
            {
                break;
            }
        }
        let ending = self
            .session
            .stop()
            .map_err(|e| format!("stopping the server's ssh session: {e}"))?;
        Ok(Stopped {
            died: !killed && ending != Ending::Exited(0),
            ending,
        })
    }
}

/// How a stopped server ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// It ended by itself (crashed, killed by someone else) rather than because we stopped it.
    pub died: bool,
    /// How its ssh session ended (ssh exits with the remote command's status).
    pub ending: Ending,
}

fn start_once(
    launch: &ServerLaunch,
    work: &Path,
    log: &Path,
    attempt: u32,
    cancel: &Cancel,
) -> Result<RemoteServer, String> {
    let stdout = work.join(format!("server-{attempt}.out"));
    let spawn = launch
        .host
        .spawn(&launch.remote_command(), Mux::Join, log, work, None);
    let session = Background::start(&spawn, &stdout).map_err(|e| format!("cannot run ssh: {e}"))?;
    let deadline = Instant::now() + launch.start_timeout;
    let mut pid = None;
    let failed = |session: Background, pid: Option<u32>, why: String| {
        if let Some(pid) = pid {
            let _ = signal_checked(&launch.host, pid, &launch.token, "KILL", work, log);
        }
        let _ = session.stop();
        Err(why)
    };
    loop {
        if pid.is_none() {
            pid = read_pid(&stdout);
        }
        match session.ended() {
            Ok(Some(ending)) => {
                return Err(format!(
                    "the server on {} exited before it accepted connections ({ending:?}); see the node log",
                    launch.host.destination
                ));
            }
            Ok(None) => {}
            Err(e) => return failed(session, pid, format!("watching the ssh session: {e}")),
        }
        if let Some(pid) = pid
            && TcpStream::connect_timeout(&launch.connect, Duration::from_secs(1)).is_ok()
        {
            return Ok(RemoteServer {
                launch: launch.clone(),
                session,
                pid,
                notes: vec![format!(
                    "cpu-server pid {pid} on {} accepts connections on {} (token {})",
                    launch.host.destination, launch.connect, launch.token
                )],
            });
        }
        if cancel.is_cancelled() {
            return failed(session, pid, "interrupted".to_owned());
        }
        if Instant::now() >= deadline {
            return failed(
                session,
                pid,
                format!(
                    "the server on {} did not accept connections on {} within {:?}",
                    launch.host.destination, launch.connect, launch.start_timeout
                ),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read_pid(stdout: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(stdout).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(PID_MARK))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Signals `pid` on the host only if its argv still carries `token`.
fn signal_checked(
    host: &SshHost,
    pid: u32,
    token: &str,
    signal: &str,
    work: &Path,
    log: &Path,
) -> Result<(), String> {
    let remote = format!(
        "if tr '\\000' ' ' < /proc/{pid}/cmdline 2>/dev/null | grep -q -- {}; then kill -{signal} {pid}; fi",
        quote(token)
    );
    host.run(&remote, log, work, &Cancel::new()).map(|_| ())
}

/// Fails when a process carrying one of our tokens runs on the host.
fn refuse_leftovers(
    host: &SshHost,
    work: &Path,
    log: &Path,
    cancel: &Cancel,
) -> Result<(), String> {
    // `[f]racflow` matches `fracflow` in a server's argv but not in the shell running this very pgrep.
    let pattern = format!("--token [{}]{}", &TOKEN_PREFIX[..1], &TOKEN_PREFIX[1..]);
    let (code, found) = host.run(
        &format!("pgrep -af -- {}", quote(&pattern)),
        log,
        work,
        cancel,
    )?;
    match code {
        0 => Err(format!(
            "a CPU server of an earlier fracflow run still runs on {}; stop it first (kill PID there):\n{}",
            host.destination,
            found.trim_end()
        )),
        1 => Ok(()),
        other => Err(format!(
            "checking {} for leftover servers: pgrep exited {other}",
            host.destination
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes_and_tokens_are_shell_safe() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        let token = server_token("2026-11-30T05:30:00 smoke");
        assert!(token.starts_with(TOKEN_PREFIX));
        assert!(
            token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{token}"
        );
        assert_ne!(token, server_token("2026-11-30T05:30:00 smoke"));
    }

    #[test]
    fn the_launcher_prints_its_pid_then_becomes_the_server() {
        let launch = ServerLaunch {
            host: SshHost {
                destination: "root@server".into(),
                options: vec!["-p".into(), "2222".into()],
            },
            fracflow: "/opt/fracflow bin/fracflow".into(),
            listen: "10.0.0.2:4096".parse().expect("addr"),
            connect: "10.0.0.2:4096".parse().expect("addr"),
            workers: 4,
            start_cpu: Some(2),
            token: "fracflow-run-1-0".into(),
            start_timeout: Duration::from_secs(5),
        };
        assert_eq!(
            launch.remote_command(),
            "sh -c 'echo fracflow-server-pid $$; exec '\\''/opt/fracflow bin/fracflow'\\'' cpu-server \
             --listen 10.0.0.2:4096 -n 4 -S 2 --token '\\''fracflow-run-1-0'\\'''"
        );
        let args = launch.host.args("true", Mux::Join);
        assert_eq!(&args[..2], ["-o", "BatchMode=yes"]);
        assert_eq!(&args[args.len() - 3..], ["root@server", "--", "true"]);
        let profile_first = args.iter().position(|a| a == "2222");
        let sharing = args.iter().position(|a| a == "ControlMaster=no");
        assert!(
            profile_first < sharing,
            "the profile's options win: {args:?}"
        );
    }

    #[test]
    fn shared_connections_live_only_in_a_private_folder_of_this_user() -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir()?;
        let uid = rustix::process::getuid().as_raw();
        let made = tmp.path().join("made");
        private_dir(&made, uid)?;
        assert_eq!(
            std::fs::metadata(&made)?.permissions().mode() & 0o777,
            0o700
        );
        private_dir(&made, uid)?;
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared)?;
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777))?;
        assert!(private_dir(&shared, uid).is_err(), "others may enter it");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&made, &link)?;
        assert!(
            private_dir(&link, uid).is_err(),
            "a link to a private folder"
        );
        assert!(
            private_dir(&made, uid.wrapping_add(1)).is_err(),
            "another user's"
        );
        let file = tmp.path().join("file");
        std::fs::write(&file, "")?;
        assert!(private_dir(&file, uid).is_err(), "a file");
        assert!(fits_a_socket(Path::new("/run/user/1000/fracflow-ssh")));
        assert!(!fits_a_socket(&Path::new("/").join("x".repeat(60))));
        Ok(())
    }
}
