//! The one place fracflow starts processes: own process group, its whole tree dies with the engine (each
//! command runs under a supervisor the engine's spawner forks, see [`crate::spawner`] and
//! [`crate::supervisor`]), stderr to the node's log, stdout captured, timeout and cancellation with SIGINT →
//! SIGTERM → SIGKILL escalation.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fracflow_core::Cancel;

use crate::spawner::{self, Supervised};
use crate::supervisor::{Ended, STOP_ALL};

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

static SPAWNER_BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Starts every later command under a supervisor forked by a spawner started from `binary` (`binary
/// __spawner PID`: the small `fracflow-exec` when it was built beside `fracflow`, else `fracflow` itself), so
/// that the command's whole process tree dies with the engine. Without it (a library user), commands are
/// started directly and may outlive a killed engine. Not a `pre_exec` hook: a hook forces `fork()` of the
/// engine, which copies its page tables on every spawn (15 ms per node with 10 000 nodes loaded); the spawner
/// forks itself, a small process, instead.
pub fn use_spawner(binary: PathBuf) {
    let _ = SPAWNER_BINARY.set(binary);
}

/// How long the supervisor gets to kill its tree after [`STOP_ALL`] before the engine SIGKILLs it; killing
/// and reaping a tree takes milliseconds.
const STOP_ALL_GRACE: Duration = Duration::from_secs(5);

/// How often a waiting node looks at its cancel flag; the child's exit itself wakes the wait at once.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// How long output still arriving after the command ended is read: its tree is dead by then, so the pipe
/// closes at once unless a process escaped it.
const DRAIN_AFTER_END: Duration = Duration::from_secs(2);

/// How a finished process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    Cancelled,
}

impl From<Ended> for Ending {
    fn from(ended: Ended) -> Ending {
        match ended {
            Ended::Exited(code) => Ending::Exited(code),
            Ended::Signalled(signal) => Ending::Signalled(signal),
            // The shell's code for a command that could not be run.
            Ended::NotStarted => Ending::Exited(127),
        }
    }
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

/// The process's full environment: the engine's, with the spawn's own variables over it, sorted by name. One
/// list, not one `.env()` per variable: each `.env()` wraps a duct expression once more, and a node with
/// thousands of variables overflowed a thread's stack starting that nested expression.
fn environment(spawn: &Spawn) -> Vec<(&OsStr, &OsStr)> {
    let own: BTreeMap<&OsStr, &OsStr> = spawn
        .env
        .iter()
        .map(|(name, value)| (OsStr::new(name), OsStr::new(value)))
        .collect();
    let mut environment: Vec<(&OsStr, &OsStr)> = engine_environment()
        .iter()
        .map(|(name, value)| (name.as_os_str(), value.as_os_str()))
        .filter(|(name, _)| !own.contains_key(name))
        .chain(own.iter().map(|(&name, &value)| (name, value)))
        .collect();
    environment.sort_unstable_by_key(|&(name, _)| name);
    environment
}

/// The engine's own environment, read once: nothing in the engine changes it, and reading it for every
/// command (the environment's lock, two allocations a variable, a sorted map of them) was a tenth of a node
/// thread's allocations on a first run of small commands.
fn engine_environment() -> &'static [(OsString, OsString)] {
    static ENVIRONMENT: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();
    ENVIRONMENT.get_or_init(|| {
        // The last of two variables of one name wins, as it did in a map.
        let by_name: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        by_name.into_iter().collect()
    })
}

/// `/dev/null`, opened once, as every supervised command's stdin.
fn null_device() -> io::Result<BorrowedFd<'static>> {
    static NULL: OnceLock<File> = OnceLock::new();
    if let Some(null) = NULL.get() {
        return Ok(null.as_fd());
    }
    let opened = File::open("/dev/null")?;
    Ok(NULL.get_or_init(|| opened).as_fd())
}

/// A started process: under a supervisor of the spawner, or (without one) a direct child.
enum Child {
    Supervised(Supervised),
    Direct(Box<duct::Handle>),
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Child::Supervised(supervised) => write!(f, "Supervised({})", supervised.pid),
            Child::Direct(handle) => write!(f, "Direct({:?})", handle.pids()),
        }
    }
}

impl Child {
    /// Starts `spawn` with its stderr appended to its log, and its stdout to `stdout`, or to the log too.
    fn start(spawn: &Spawn, stdout: Option<OwnedFd>) -> io::Result<Child> {
        let environment = environment(spawn);
        let stderr = append(&spawn.log)?;
        match SPAWNER_BINARY.get() {
            Some(binary) => {
                let request = spawner::Request {
                    program: spawn.program.as_os_str(),
                    args: &spawn.args,
                    env: &environment,
                    cwd: &spawn.cwd,
                    stdin: null_device()?,
                    stdout: stdout.as_ref().map_or(stderr.as_fd(), |out| out.as_fd()),
                    stderr: stderr.as_fd(),
                };
                spawner::start(binary, request).map(Child::Supervised)
            }
            None => {
                // An OsString, not a PathBuf: duct runs a relative *path* from the working directory (`make`
                // would become `./make`), while a plain name is looked up on PATH as a shell would.
                let program = spawn.program.clone().into_os_string();
                let stdout = match stdout {
                    Some(stdout) => stdout,
                    None => stderr.as_fd().try_clone_to_owned()?,
                };
                let handle = duct::cmd(&program, &spawn.args)
                    .dir(&spawn.cwd)
                    .stdin_null()
                    .stdout_file(File::from(stdout))
                    .stderr_file(stderr)
                    .unchecked()
                    .full_env(environment)
                    .before_spawn(|command| {
                        // Own process group: stop signals reach a whole pipeline. (posix_spawn supports this,
                        // so no fork.)
                        std::os::unix::process::CommandExt::process_group(command, 0);
                        Ok(())
                    })
                    .start()?;
                Ok(Child::Direct(Box::new(handle)))
            }
        }
    }

    /// How it ended, waiting at most `limit`.
    fn wait_timeout(&self, limit: Duration) -> io::Result<Option<Ending>> {
        match self {
            Child::Supervised(supervised) => Ok(supervised.wait_timeout(limit)?.map(Ending::from)),
            Child::Direct(handle) => Ok(handle
                .wait_timeout(limit)?
                .map(|output| ending_of(output.status))),
        }
    }

    /// Sends a stop signal: to the supervisor, which passes it on (or, on [`STOP_ALL`], kills the tree), or to
    /// a direct child's process group.
    fn signal(&self, signal: libc::c_int) {
        match self {
            Child::Supervised(supervised) => supervised.signal(signal),
            Child::Direct(handle) => {
                for &pid in &handle.pids() {
                    // SAFETY: killpg only sends a signal; the group is our own child's (process_group(0)).
                    unsafe {
                        libc::killpg(pid as libc::pid_t, signal);
                    }
                }
            }
        }
    }

    fn supervised(&self) -> bool {
        matches!(self, Child::Supervised(_))
    }
}

/// A process and the read end of its stdout, read while it runs so that it never blocks on a full pipe.
#[derive(Debug)]
struct Running {
    child: Child,
    stdout: Option<File>,
    captured: Vec<u8>,
}

impl Running {
    /// Waits up to `limit` for the process to end, reading what it prints meanwhile.
    fn pump(&mut self, limit: Duration) -> io::Result<Option<Ending>> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(CANCEL_POLL);
            if self
                .stdout
                .as_ref()
                .map(|out| spawner::readable(out, Duration::ZERO))
                .transpose()?
                == Some(true)
            {
                self.read_some()?;
                continue;
            }
            let waited = match &self.stdout {
                // Both at once: output or the ending, whichever comes first.
                Some(out) => wait_either(&self.child, out, step)?,
                None => self.child.wait_timeout(step)?,
            };
            if let Some(ending) = waited {
                return Ok(Some(ending));
            }
            if left.is_zero() {
                return Ok(None);
            }
        }
    }

    /// Waits for the end, whatever it takes.
    fn wait(&mut self) -> io::Result<Ending> {
        loop {
            if let Some(ending) = self.pump(Duration::from_secs(3600))? {
                return Ok(ending);
            }
        }
    }

    /// What it printed, including what is still in the pipe once it ended.
    fn output(mut self) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + DRAIN_AFTER_END;
        while let Some(out) = &self.stdout {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !spawner::readable(out, left)? {
                break;
            }
            self.read_some()?;
        }
        Ok(self.captured)
    }

    /// Reads what is in the stdout pipe; at its end, forgets it.
    fn read_some(&mut self) -> io::Result<()> {
        let Some(out) = &mut self.stdout else {
            return Ok(());
        };
        let mut chunk = [0u8; 64 * 1024];
        match out.read(&mut chunk) {
            Ok(0) => self.stdout = None,
            Ok(n) => self.captured.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// SIGINT, then SIGTERM, then (under a supervisor) the order to kill the tree, then SIGKILL, each after its
    /// grace period; returns once the process has ended.
    fn stop(&mut self, grace: Grace) -> io::Result<()> {
        let mut steps = vec![
            (libc::SIGINT, grace.after_interrupt),
            (libc::SIGTERM, grace.after_terminate),
        ];
        if self.child.supervised() {
            // SIGKILL would end the supervisor alone and leave what the command forked; this asks it to kill
            // the whole tree first.
            steps.push((STOP_ALL, STOP_ALL_GRACE));
        }
        for (signal, wait) in steps {
            self.child.signal(signal);
            if self.pump(wait)?.is_some() {
                return Ok(());
            }
        }
        self.child.signal(libc::SIGKILL);
        self.wait().map(|_| ())
    }
}

/// Waits up to `limit` for output on `out` or for the child's end; the ending when it came.
fn wait_either(child: &Child, out: &File, limit: Duration) -> io::Result<Option<Ending>> {
    match child {
        Child::Supervised(supervised) => {
            let Some(ending) = supervised.ending_fd() else {
                return child.wait_timeout(limit);
            };
            let mut fds = [
                rustix::event::PollFd::new(out, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&ending, rustix::event::PollFlags::IN),
            ];
            let timeout = spawner::poll_limit(limit);
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if fds[1].revents().is_empty() {
                return Ok(None);
            }
            supervised
                .wait_timeout(Duration::ZERO)
                .map(|ended| ended.map(Ending::from))
        }
        Child::Direct(_) => {
            if spawner::readable(out, limit)? {
                return Ok(None);
            }
            child.wait_timeout(Duration::ZERO)
        }
    }
}

/// A pipe for a process's stdout: the read end (ours) and the write end (its).
fn stdout_pipe() -> io::Result<(File, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((File::from(read), write))
}

/// A process left running (a server for the length of a measurement), its stdout going to a file.
#[derive(Debug)]
pub struct Background {
    running: Running,
    grace: Grace,
}

impl Background {
    /// Starts `spawn` without waiting (its `timeout` is not applied); stdout is written to `stdout`.
    pub fn start(spawn: &Spawn, stdout: &Path) -> io::Result<Background> {
        let file = File::create(stdout)?;
        let child = Child::start(spawn, Some(file.as_fd().try_clone_to_owned()?))?;
        Ok(Background {
            running: Running {
                child,
                stdout: None,
                captured: Vec::new(),
            },
            grace: spawn.grace,
        })
    }

    /// How it ended, once it has.
    pub fn ended(&self) -> io::Result<Option<Ending>> {
        self.running.child.wait_timeout(Duration::ZERO)
    }

    /// Waits up to `limit` for it to end by itself.
    pub fn wait_for(&self, limit: Duration) -> io::Result<Option<Ending>> {
        self.running.child.wait_timeout(limit)
    }

    /// Stops it with the usual escalation (SIGINT, SIGTERM, SIGKILL to its group) unless it already ended.
    pub fn stop(mut self) -> io::Result<Ending> {
        if let Some(ending) = self.ended()? {
            return Ok(ending);
        }
        self.running.stop(self.grace)?;
        Ok(self.ended()?.unwrap_or(Ending::Cancelled))
    }
}

/// Runs the process to its end, a timeout or cancellation; never leaves it running.
pub fn run(spawn: &Spawn, cancel: &Cancel) -> io::Result<Finished> {
    run_with(spawn, cancel, true)
}

/// Runs the process as [`run`] does, with its stdout appended to its log beside its stderr as it comes rather
/// than captured ([`Finished::stdout`] is empty). For a command whose output nothing reads, this spares a pipe
/// and the engine's wake-up when the pipe closes, before the one for the process's end: on a first run of small
/// commands, a tenth of a node thread's system calls and one of its two sleeps.
pub fn run_to_log(spawn: &Spawn, cancel: &Cancel) -> io::Result<Finished> {
    run_with(spawn, cancel, false)
}

fn run_with(spawn: &Spawn, cancel: &Cancel, capture: bool) -> io::Result<Finished> {
    let (stdout, theirs) = if capture {
        let (ours, theirs) = stdout_pipe()?;
        (Some(ours), Some(theirs))
    } else {
        (None, None)
    };
    let child = Child::start(spawn, theirs)?;
    let mut running = Running {
        child,
        stdout,
        captured: Vec::new(),
    };
    let started = Instant::now();
    loop {
        if let Some(ending) = running.pump(CANCEL_POLL)? {
            return Ok(Finished {
                ending,
                stdout: running.output()?,
            });
        }
        let timed_out = spawn
            .timeout
            .is_some_and(|limit| started.elapsed() >= limit);
        if timed_out || cancel.is_cancelled() {
            running.stop(spawn.grace)?;
            let ending = if timed_out {
                Ending::TimedOut
            } else {
                Ending::Cancelled
            };
            return Ok(Finished {
                ending,
                stdout: running.output()?,
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_program_name_is_found_on_path_without_the_spawner() -> io::Result<()> {
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

    #[test]
    fn a_command_gets_the_engines_environment_with_its_own_variables_over_it() {
        let engine: Vec<OsString> = std::env::vars_os().map(|(name, _)| name).collect();
        let taken = engine.first().cloned().unwrap_or_default();
        let spawn = Spawn {
            program: PathBuf::from("true"),
            args: Vec::new(),
            env: vec![
                (taken.to_string_lossy().into_owned(), "first".into()),
                ("FRACFLOW_TEST_OWN".into(), "mine".into()),
                (taken.to_string_lossy().into_owned(), "over".into()),
            ],
            cwd: PathBuf::from("/"),
            log: PathBuf::from("/dev/null"),
            timeout: None,
            grace: Grace::default(),
        };
        let environment = environment(&spawn);
        let names: Vec<&OsStr> = environment.iter().map(|&(name, _)| name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "not sorted, or a name twice");
        let value = |name: &OsStr| {
            environment
                .iter()
                .find(|&&(n, _)| n == name)
                .map(|&(_, value)| value.to_owned())
        };
        assert_eq!(
            value(&taken),
            Some("over".into()),
            "the node's own value wins, its last"
        );
        assert_eq!(value(OsStr::new("FRACFLOW_TEST_OWN")), Some("mine".into()));
        for name in &engine {
            assert!(value(name).is_some(), "{name:?} of the engine is missing");
        }
    }
}
