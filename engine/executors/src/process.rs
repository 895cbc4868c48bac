//! The one place fracflow starts processes: own process group, its whole tree dies with the engine (through
//! [`crate::trampoline`]), stderr to the node's log, stdout captured, timeout and cancellation with SIGINT →
//! SIGTERM → SIGKILL escalation.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fracflow_core::Cancel;

/// Grace periods between the stop signals, as the artifact's `run.py` uses them.
#[derive(Debug, Clone, Copy)]
pub struct Grace {
    pub after_interrupt: Duration,
    pub after_terminate: Duration,
}

impl Default for Grace {
    fn default() -> Grace {
        Grace {
            after_interrupt: Duration::from_secs(20),
            after_terminate: Duration::from_secs(10),
        }
    }
}

/// The argument that makes the `fracflow` binary act as the trampoline (see [`crate::trampoline`]).
pub const TRAMPOLINE_VERB: &str = "__exec";

static TRAMPOLINE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Starts every later child through `binary __exec PPID PROGRAM ARGS…` (`binary` is the small `fracflow-exec`
/// when it was built beside `fracflow`, else `fracflow` itself), the supervisor in [`crate::trampoline`]
/// that kills the child's whole process tree when the engine dies. Without it (a library user), children are
/// started directly and may outlive a killed engine. A trampoline, rather than a `pre_exec` hook, because a hook
/// forces `fork()`, which copies the engine's page tables on every spawn: 15 ms per node with 10 000 nodes
/// loaded, against posix_spawn's constant cost.
pub fn use_trampoline(binary: PathBuf) {
    let _ = TRAMPOLINE.set(binary);
}

/// How long the trampoline gets to kill its tree after [`crate::trampoline::STOP_ALL`] before the engine
/// SIGKILLs it; killing and reaping a tree takes milliseconds.
const STOP_ALL_GRACE: Duration = Duration::from_secs(5);

/// How often a waiting node looks at its cancel flag; the child's exit itself wakes the wait at once.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// How a finished process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    Cancelled,
}

/// How a process ended and what it printed on stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub ending: Ending,
    pub stdout: Vec<u8>,
}

/// A process to run.
#[derive(Debug, Clone)]
pub struct Spawn {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// stderr is appended here as it happens.
    pub log: PathBuf,
    pub timeout: Option<Duration>,
    pub grace: Grace,
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A short command's exit code (`None` when a signal ended it) and its stdout and stderr together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub code: Option<i32>,
    pub text: String,
}

/// Runs a short query (`ip route get`, `scontrol show job`) to its end, stdin closed, and returns what it
/// answered. Bounded by the tool's own timeouts; not for node commands, which go through [`run`].
pub fn ask(program: &str, args: &[&str]) -> Result<Answer, String> {
    duct::cmd(program, args)
        .stdin_null()
        .stderr_to_stdout()
        .stdout_capture()
        .unchecked()
        .run()
        .map(|out| Answer {
            code: out.status.code(),
            text: String::from_utf8_lossy(&out.stdout).into_owned(),
        })
        .map_err(|e| format!("cannot run {program}: {e}"))
}

/// The process as a duct expression: the trampoline, the full environment, stdin closed, stderr appended to
/// the log, its own process group. Stdout is the caller's choice.
fn expression(spawn: &Spawn) -> io::Result<duct::Expression> {
    // An OsString, not a PathBuf: duct runs a relative *path* from the working directory (`make` would become
    // `./make`), while a plain name is looked up on PATH as a shell would.
    let (program, args): (std::ffi::OsString, Vec<String>) = match TRAMPOLINE.get() {
        Some(trampoline) => {
            let mut args = vec![TRAMPOLINE_VERB.to_owned(), std::process::id().to_string()];
            args.push(spawn.program.display().to_string());
            args.extend(spawn.args.iter().cloned());
            (trampoline.clone().into_os_string(), args)
        }
        None => (spawn.program.clone().into_os_string(), spawn.args.clone()),
    };
    // One full environment, not one `.env()` per variable: each `.env()` wraps the expression once more, and a
    // node with thousands of variables overflowed a thread's stack starting that nested expression.
    let mut environment: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString> =
        std::env::vars_os().collect();
    environment.extend(spawn.env.iter().map(|(k, v)| (k.into(), v.into())));
    let expression = duct::cmd(&program, &args)
        .dir(&spawn.cwd)
        .stdin_null()
        .stderr_file(append(&spawn.log)?)
        .unchecked()
        .full_env(environment);
    Ok(expression.before_spawn(|command| {
        // Own process group: stop signals reach a whole pipeline, and a terminal's Ctrl-C reaches it only
        // through us, so the escalation below is the one policy. (posix_spawn supports this, so no fork.)
        command.process_group(0);
        Ok(())
    }))
}

/// A process left running (a server for the length of a measurement), its stdout going to a file.
#[derive(Debug)]
pub struct Background {
    handle: duct::Handle,
    grace: Grace,
}

impl Background {
    /// Starts `spawn` without waiting (its `timeout` is not applied); stdout is written to `stdout`.
    pub fn start(spawn: &Spawn, stdout: &Path) -> io::Result<Background> {
        let handle = expression(spawn)?.stdout_path(stdout).start()?;
        Ok(Background {
            handle,
            grace: spawn.grace,
        })
    }

    /// How it ended, once it has.
    pub fn ended(&self) -> io::Result<Option<Ending>> {
        Ok(self
            .handle
            .try_wait()?
            .map(|output| ending_of(output.status)))
    }

    /// Waits up to `limit` for it to end by itself.
    pub fn wait_for(&self, limit: Duration) -> io::Result<Option<Ending>> {
        Ok(self
            .handle
            .wait_timeout(limit)?
            .map(|output| ending_of(output.status)))
    }

    /// Stops it with the usual escalation (SIGINT, SIGTERM, SIGKILL to its group) unless it already ended.
    pub fn stop(self) -> io::Result<Ending> {
        if let Some(ending) = self.ended()? {
            return Ok(ending);
        }
        stop_group(&self.handle.pids(), self.grace, &self.handle)?;
        Ok(self.ended()?.unwrap_or(Ending::Cancelled))
    }
}

/// Runs the process to its end, a timeout or cancellation; never leaves it running.
pub fn run(spawn: &Spawn, cancel: &Cancel) -> io::Result<Finished> {
    let expression = expression(spawn)?.stdout_capture();
    let handle = expression.start()?;
    let started = Instant::now();
    loop {
        if let Some(output) = handle.wait_timeout(CANCEL_POLL)? {
            return Ok(Finished {
                ending: ending_of(output.status),
                stdout: output.stdout.clone(),
            });
        }
        let timed_out = spawn
            .timeout
            .is_some_and(|limit| started.elapsed() >= limit);
        if timed_out || cancel.is_cancelled() {
            let stdout = stop_group(&handle.pids(), spawn.grace, &handle)?;
            let ending = if timed_out {
                Ending::TimedOut
            } else {
                Ending::Cancelled
            };
            return Ok(Finished { ending, stdout });
        }
    }
}

fn ending_of(status: std::process::ExitStatus) -> Ending {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Ending::Exited(code),
        (None, Some(signal)) => Ending::Signalled(signal),
        (None, None) => Ending::Exited(-1),
    }
}

/// SIGINT, then SIGTERM, then SIGKILL to the children's process groups, each after its grace period;
/// returns what the process printed until it ended.
fn stop_group(pids: &[u32], grace: Grace, handle: &duct::Handle) -> io::Result<Vec<u8>> {
    let signal_all = |signal: i32| {
        for &pid in pids {
            // SAFETY: killpg only sends a signal; the group id is our own child's (process_group(0) above).
            unsafe {
                libc::killpg(pid as libc::pid_t, signal);
            }
        }
    };
    for (signal, wait) in [
        (libc::SIGINT, grace.after_interrupt),
        (libc::SIGTERM, grace.after_terminate),
    ] {
        signal_all(signal);
        if let Some(output) = handle.wait_timeout(wait)? {
            return Ok(output.stdout.clone());
        }
    }
    if TRAMPOLINE.get().is_some() {
        // SIGKILL would end the trampoline alone and leave what the command forked; this asks it to kill the
        // whole tree first.
        signal_all(crate::trampoline::STOP_ALL);
        if let Some(output) = handle.wait_timeout(STOP_ALL_GRACE)? {
            return Ok(output.stdout.clone());
        }
    }
    signal_all(libc::SIGKILL);
    Ok(handle.wait()?.stdout.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_program_name_is_found_on_path_without_the_trampoline() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let spawn = Spawn {
            program: PathBuf::from("echo"),
            args: vec!["found".into()],
            env: Vec::new(),
            cwd: dir.path().to_owned(),
            log: dir.path().join("log"),
            timeout: Some(Duration::from_secs(10)),
            grace: Grace::default(),
        };
        let finished = run(&spawn, &Cancel::new())?;
        assert_eq!(finished.ending, Ending::Exited(0));
        assert_eq!(finished.stdout, b"found\n");
        Ok(())
    }
}
