//! The spawner: how the engine starts node commands. One small process per engine (`fracflow-exec __spawner
//! ENGINE_PID`, started the first time a command runs) forks supervisors ([`crate::supervisor`]) and hands
//! each to the engine, which then sends it commands itself. A supervisor serves one command at a time and many
//! in its life, so a run forks about as many supervisors as it runs commands at once: a fork and an exit per
//! command were a seventh of the machine's CPU on a first run of 10 000 trivial nodes, and before the
//! supervisors a `posix_spawn` and an exec of a trampoline binary per node cost about a millisecond more.
//!
//! The engine's supervisors. The engine keeps the supervisors it let go of, each with its end of a socket pair
//! of its own. A command goes to one that is free: one the spawner just handed over, or one whose last
//! command's ending the engine has read on that socket, an ending that also says whether the supervisor takes
//! another command. The engine sends no signal about a command once it has let go of it (put its supervisor
//! back among its own), so when the next command comes, every signal meant for the last one (a stop that
//! crossed its end) is pending at the supervisor, which discards them before it starts the next: a signal meant
//! for one command never reaches the next. When none is free, the engine asks the spawner for another. The
//! spawner keeps one *standby* forked ahead of the question and forks the next after answering, so that
//! question waits for no fork; the engine keeps at most [`MAX_SUPERVISORS`] it is not using, and closes the
//! socket of any beyond, which ends that one. Before, every command went through the spawner, which passed it
//! on to a supervisor and answered the engine: two more processes woken on each node's path, and on a
//! 3 000-node fan-in's first run about 17 context switches a node against ninja's 3.
//!
//! Lifetimes. The spawner dies with the engine (`PR_SET_PDEATHSIG=SIGKILL`, and it checks that its parent is
//! still the engine). Each supervisor is a child of the spawner and a child subreaper with
//! `PR_SET_PDEATHSIG=STOP_ALL` on it, so when the engine dies, the spawner dies, and every supervisor kills
//! its command's whole tree; a free one sees its socket close and exits. The engine signals a supervisor
//! through a pidfd, so a pid reused after it ended is never signalled. The spawner reaps the supervisors that
//! ended.
//!
//! Protocol. The engine asks the spawner for a supervisor with one byte on a Unix stream socket that is the
//! spawner's stdin; the answer is a header of eight bytes (0 and the supervisor's pid, with a pidfd of it and
//! the engine's end of its socket in `SCM_RIGHTS`; or 1 and the length of a message that follows). A command
//! goes to a supervisor on its socket as a header (the body's length, u32 little-endian) carrying three
//! descriptors in `SCM_RIGHTS` (the command's stdin, stdout and stderr), then the body: program, working
//! directory, the arguments and the environment (`KEY=VALUE`), each a count or a length (u32) and bytes. The
//! supervisor answers on the same socket with how the command ended, six bytes (see [`ENDING_BYTES`]); a socket
//! that closes before that means the supervisor was killed. A status pipe per command, and a byte saying the
//! supervisor was free, cost a `pipe2`, three `close`s and a `recv` a node.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

use crate::supervisor::{self, Ended as Ending};

/// The argument that makes `fracflow-exec` (or `fracflow`) act as the spawner.
pub const SPAWNER_VERB: &str = "__spawner";

/// The largest request body the spawner reads: far above any real command line and environment, a bound on
/// what a corrupted stream could make it allocate.
const MAX_REQUEST: u32 = 64 << 20;

/// How often the spawner reaps supervisors that ended while no request came.
const REAP_EVERY: Duration = Duration::from_millis(500);

/// A command to start: what `execve` needs, and the descriptors it gets as stdin, stdout and stderr.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub program: &'a OsStr,
    pub args: &'a [String],
    pub env: &'a [(&'a OsStr, &'a OsStr)],
    pub cwd: &'a Path,
    pub stdin: BorrowedFd<'a>,
    pub stdout: BorrowedFd<'a>,
    pub stderr: BorrowedFd<'a>,
}

/// A command a supervisor started: the supervisor, held until the command is let go of, on whose channel the
/// command's ending comes.
#[derive(Debug)]
pub(crate) struct Supervised {
    pub pid: u32,
    /// Given back to the engine's supervisors when this is dropped (an `Option` only for that).
    supervisor: Option<Supervisor>,
    ended: std::cell::Cell<Option<Ending>>,
}

impl Supervised {
    /// Sends `signal` to the supervisor, which passes stop signals on to the command's group and takes
    /// `STOP_ALL` as the order to kill the whole tree. Nothing is sent once it has ended.
    pub fn signal(&self, signal: libc::c_int) {
        if self.ended.get().is_some() {
            return;
        }
        if let (Some(supervisor), Some(signal)) = (
            &self.supervisor,
            rustix::process::Signal::from_named_raw(signal),
        ) {
            let _ = rustix::process::pidfd_send_signal(&supervisor.pidfd, signal);
        }
    }

    /// How the command ended, waiting at most `limit` for it (`None`: still running).
    pub fn wait_timeout(&self, limit: Duration) -> io::Result<Option<Ending>> {
        if self.ended.get().is_some() {
            return Ok(self.ended.get());
        }
        let Some(supervisor) = &self.supervisor else {
            return Ok(None);
        };
        if readable(&supervisor.channel, limit)? {
            let (ending, next) = read_ending(&supervisor.channel)?;
            self.ended.set(Some(ending));
            supervisor.free.set(next);
        }
        Ok(self.ended.get())
    }

    /// Where the ending comes (the supervisor's socket), for a caller that polls it beside other descriptors;
    /// `None` only once this is being dropped.
    pub fn ending_fd(&self) -> Option<BorrowedFd<'_>> {
        self.supervisor
            .as_ref()
            .map(|supervisor| supervisor.channel.as_fd())
    }
}

impl Drop for Supervised {
    /// The engine lets go of the command: it sends nothing more about it, and the supervisor takes the next
    /// command once it has said how this one ended (at once, when the engine has read that).
    fn drop(&mut self) {
        if let Some(supervisor) = self.supervisor.take() {
            // One whose ending said it takes no other command is on its way out.
            if self.ended.get().is_none() || supervisor.free.get() {
                give_back(supervisor);
            }
        }
    }
}

/// Whether `file` has something to read (or is at its end) within `limit`.
pub(crate) fn readable(file: &impl AsFd, limit: Duration) -> io::Result<bool> {
    let mut fds = [rustix::event::PollFd::new(
        file,
        rustix::event::PollFlags::IN,
    )];
    let timeout = poll_limit(limit);
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(ready) => Ok(ready > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `limit` as `poll`'s timeout.
pub(crate) fn poll_limit(limit: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: limit.as_secs() as i64,
        tv_nsec: i64::from(limit.subsec_nanos()),
    }
}

/// How the command ended, as its supervisor wrote it on its channel, and whether the supervisor takes another
/// command; a channel closed before that means the supervisor itself was killed.
fn read_ending(mut channel: &UnixStream) -> io::Result<(Ending, bool)> {
    let mut record = [0u8; ENDING_BYTES];
    let mut got = 0;
    while got < record.len() {
        match channel.read(&mut record[got..]) {
            Ok(0) => return Ok((Ending::Signalled(libc::SIGKILL), false)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(decode_ending(record))
}

/// The record a supervisor writes once its command ended: how (0 exited, 1 killed by a signal, 2 could not be
/// started), the code or the signal (u32, little-endian), and 1 when it takes another command.
const ENDING_BYTES: usize = 6;

fn encode_ending(ending: Ending, next: bool) -> [u8; ENDING_BYTES] {
    let (kind, value): (u8, u32) = match ending {
        Ending::Exited(code) => (0, code as u32),
        Ending::Signalled(signal) => (1, signal as u32),
        Ending::NotStarted => (2, 127),
    };
    let mut record = [kind, 0, 0, 0, 0, u8::from(next)];
    record[1..5].copy_from_slice(&value.to_le_bytes());
    record
}

fn decode_ending(record: [u8; ENDING_BYTES]) -> (Ending, bool) {
    let value = u32::from_le_bytes([record[1], record[2], record[3], record[4]]);
    let ending = match record[0] {
        0 => Ending::Exited(value as i32),
        1 => Ending::Signalled(value as i32),
        _ => Ending::NotStarted,
    };
    (ending, record[5] == 1)
}

/// The engine's connection to its spawner, started on first use.
#[derive(Debug)]
struct Connection {
    socket: UnixStream,
    process: std::process::Child,
}

static SPAWNER: Mutex<Option<Connection>> = Mutex::new(None);

/// The supervisors the engine is not using: free, or about to say so once their last command has ended.
static IDLE: Mutex<Vec<Supervisor>> = Mutex::new(Vec::new());

/// The byte that asks the spawner for a supervisor.
const ASK: u8 = 1;

/// How many new supervisors from the spawner a command is offered to before its start fails. The free ones the
/// engine holds are all tried first, however many: one that fails to take the command has died since it said
/// it was free (all of them, when the spawner died), and is dropped.
const OFFERS: usize = 4;

impl Connection {
    fn start(binary: &Path) -> io::Result<Connection> {
        let (ours, theirs) = UnixStream::pair()?;
        // Its own process group, as every command's: a terminal's Ctrl-C reaches commands only through the
        // engine's escalation. posix_spawn does this, so the engine is not forked.
        let mut command = std::process::Command::new(binary);
        command
            .arg(SPAWNER_VERB)
            .arg(std::process::id().to_string())
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // Started from a thread that lives as long as the engine: the spawner's parent-death signal fires when
        // the *thread* that started it ends, and a node's thread ends with its node.
        let (started, take) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("fracflow-spawner".into())
            .spawn(move || {
                let spawned = command.spawn();
                // The command holds the spawner's end of the socket: kept, a dead spawner's socket would never
                // close, and the engine would wait on it forever instead of starting a new one.
                drop(command);
                let _ = started.send(spawned);
                loop {
                    std::thread::park();
                }
            })?;
        let process = take
            .recv()
            .map_err(|_| io::Error::other("the spawner's thread ended"))??;
        Ok(Connection {
            socket: ours,
            process,
        })
    }

    /// Asks for a supervisor; answers it, or why the spawner could not fork one.
    fn supervisor(&mut self) -> io::Result<Result<Supervisor, String>> {
        self.socket.write_all(&[ASK])?;
        let mut answer = [0u8; 8];
        let fds = receive_with_fds(&self.socket, &mut answer)?
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let kind = u32::from_le_bytes([answer[0], answer[1], answer[2], answer[3]]);
        let value = u32::from_le_bytes([answer[4], answer[5], answer[6], answer[7]]);
        if kind != 0 {
            let mut message = vec![0u8; value.min(64 * 1024) as usize];
            self.socket.read_exact(&mut message)?;
            return Ok(Err(String::from_utf8_lossy(&message).into_owned()));
        }
        let [pidfd, channel] = <[OwnedFd; 2]>::try_from(fds)
            .map_err(|_| io::Error::other("the spawner sent no pidfd and socket"))?;
        Ok(Ok(Supervisor {
            pid: value,
            pidfd,
            channel: UnixStream::from(channel),
            free: std::cell::Cell::new(true),
        }))
    }
}

/// A new supervisor from the spawner of this engine (started from `binary` the first time, and again if it
/// died).
fn new_supervisor(binary: &Path) -> io::Result<Supervisor> {
    let mut guard = SPAWNER.lock().unwrap_or_else(|p| p.into_inner());
    for attempt in 0..2 {
        if guard.is_none() {
            *guard = Some(Connection::start(binary)?);
        }
        let Some(connection) = guard.as_mut() else {
            continue;
        };
        match connection.supervisor() {
            Ok(Ok(supervisor)) => return Ok(supervisor),
            Ok(Err(message)) => return Err(io::Error::other(message)),
            // The spawner died (killed by hand, or it failed): one fresh one is tried.
            Err(_) if attempt == 0 => {
                if let Some(mut dead) = guard.take() {
                    let _ = dead.process.kill();
                    let _ = dead.process.wait();
                }
            }
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::other("the spawner could not be started"))
}

/// A free supervisor the engine holds, if it has one; those that died are dropped on the way.
fn take_free() -> Option<Supervisor> {
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    let mut at = 0;
    while at < idle.len() {
        match idle[at].heard_free() {
            Some(true) => return Some(idle.swap_remove(at)),
            Some(false) => at += 1,
            None => idle.swap_remove(at).kill(),
        }
    }
    None
}

/// Keeps a supervisor the engine let go of for a later command; beyond [`MAX_SUPERVISORS`], its socket is
/// closed, which ends it once its command has.
fn give_back(supervisor: Supervisor) {
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    if idle.len() < MAX_SUPERVISORS {
        idle.push(supervisor);
    }
}

/// Starts `request` under a free supervisor of this engine, or a new one from its spawner (started from
/// `binary` the first time, and again if it died). An error is an error of starting; a command that cannot be
/// run is started and ends as [`Ending::NotStarted`], with the reason on its stderr.
pub(crate) fn start(binary: &Path, request: Request<'_>) -> io::Result<Supervised> {
    let body = encode(&request)?;
    let mut offers = 0;
    loop {
        let supervisor = match take_free() {
            Some(supervisor) => supervisor,
            None if offers < OFFERS => {
                offers += 1;
                new_supervisor(binary)?
            }
            None => return Err(io::Error::other("no supervisor took the command")),
        };
        let fds = [request.stdin, request.stdout, request.stderr];
        if send_request(&supervisor.channel, &body, fds).is_ok() {
            supervisor.free.set(false);
            return Ok(Supervised {
                pid: supervisor.pid,
                supervisor: Some(supervisor),
                ended: std::cell::Cell::new(None),
            });
        }
        // It died while free, or may be alive but stuck: it must not become a second supervisor of this
        // command later.
        supervisor.kill();
    }
}

/// Appends a string of the request; one with a NUL inside is refused here, with the reason, as no command could
/// be given it.
fn put_bytes(body: &mut Vec<u8>, parts: &[&[u8]]) -> io::Result<()> {
    if parts.iter().any(|part| part.contains(&0)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in a program name, argument, environment variable or directory",
        ));
    }
    let length = u32::try_from(parts.iter().map(|part| part.len()).sum::<usize>())
        .map_err(|_| io::Error::other("a field is too long"))?;
    body.extend_from_slice(&length.to_le_bytes());
    for part in parts {
        body.extend_from_slice(part);
    }
    Ok(())
}

fn encode(request: &Request<'_>) -> io::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(4096);
    put_bytes(&mut body, &[request.program.as_bytes()])?;
    put_bytes(&mut body, &[request.cwd.as_os_str().as_bytes()])?;
    body.extend_from_slice(&(request.args.len() as u32).to_le_bytes());
    for arg in request.args {
        put_bytes(&mut body, &[arg.as_bytes()])?;
    }
    body.extend_from_slice(&(request.env.len() as u32).to_le_bytes());
    for (key, value) in request.env {
        put_bytes(&mut body, &[key.as_bytes(), b"=", value.as_bytes()])?;
    }
    if body.len() > MAX_REQUEST as usize {
        return Err(io::Error::other(
            "the command line and environment are too large",
        ));
    }
    Ok(body)
}

/// A request's fields in order, as a supervisor reads them: counts and lengths (u32, little-endian), and the
/// bytes a length measures.
struct Fields<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn number(&mut self) -> Result<usize, String> {
        let bytes = self
            .body
            .get(self.at..self.at + 4)
            .ok_or_else(|| "the request ends early".to_owned())?;
        self.at += 4;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let length = self.number()?;
        let bytes = self
            .body
            .get(self.at..self.at + length)
            .ok_or_else(|| "a field runs past the request".to_owned())?;
        self.at += length;
        Ok(bytes)
    }
}

/// The command a request's body holds; garbage (a field cut short, bytes after the last, a NUL inside a string,
/// a variable without `=`) is refused.
fn decode(body: &[u8]) -> Result<supervisor::Program, String> {
    let mut fields = Fields { body, at: 0 };
    let program = fields.bytes()?;
    let cwd = fields.bytes()?;
    let mut command =
        supervisor::Program::new(program, cwd, body.len()).map_err(|e| e.to_string())?;
    for _ in 0..fields.number()? {
        command.arg(fields.bytes()?).map_err(|e| e.to_string())?;
    }
    for _ in 0..fields.number()? {
        command.var(fields.bytes()?).map_err(|e| e.to_string())?;
    }
    if fields.at != body.len() {
        return Err("bytes after the request".into());
    }
    Ok(command)
}

/// `fracflow-exec __spawner ENGINE_PID`: hands the engine a supervisor each time it asks, until it closes its
/// socket (stdin) or dies.
pub fn serve(args: &[String]) -> ExitCode {
    let Some(engine) = args.first().and_then(|p| p.parse::<u32>().ok()) else {
        eprintln!("error: usage: fracflow-exec __spawner ENGINE_PID (internal)");
        return ExitCode::from(2);
    };
    // SAFETY: prctl and getppid have no memory effects.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            || libc::getppid() as u32 != engine
        {
            return ExitCode::from(1);
        }
    }
    // SAFETY: fd 0 is the socket the engine gave us as stdin; we own it from here.
    let socket = unsafe { UnixStream::from_raw_fd(0) };
    let mut standby = Supervisor::fork().ok();
    loop {
        reap_supervisors();
        match readable(&socket, REAP_EVERY) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => return ExitCode::from(1),
        }
        let mut asked = [0u8; 1];
        match (&socket).read(&mut asked) {
            // The engine closed the socket: it is done with commands.
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) if asked[0] == ASK => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(_) | Err(_) => return ExitCode::from(1),
        }
        // A standby killed while it waited is replaced by a fork now.
        let handed = match standby.take().filter(Supervisor::alive) {
            Some(supervisor) => Ok(supervisor),
            None => Supervisor::fork().map_err(|e| format!("fork failed: {e}")),
        };
        if answer(&socket, handed).is_err() {
            return ExitCode::from(1);
        }
        // Off the next question's path.
        standby = Supervisor::fork().ok();
    }
}

/// The most supervisors the engine keeps while it does not use them; more may run at once.
const MAX_SUPERVISORS: usize = 64;

/// A supervisor forked ahead of its commands, taking them on `channel` (see the module's documentation): the
/// spawner's standby, or one the engine holds.
#[derive(Debug)]
struct Supervisor {
    pid: u32,
    pidfd: OwnedFd,
    channel: UnixStream,
    /// Waiting for a command: a standby that never had one, or one that wrote its last command's ending
    /// (saying it takes another) and the engine read it.
    free: std::cell::Cell<bool>,
}

impl Supervisor {
    fn fork() -> io::Result<Supervisor> {
        let (ours, theirs) = UnixStream::pair()?;
        // SAFETY: getpid has no preconditions.
        let spawner = unsafe { libc::getpid() } as u32;
        // SAFETY: the spawner is single-threaded (it starts no thread, and std starts none for it), so the
        // child may run ordinary code, allocation included, until it exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(ours);
            let code = supervisor_in_child(spawner, theirs);
            // SAFETY: ends the child at once, without running the spawner's exit handlers.
            unsafe { libc::_exit(code) };
        }
        drop(theirs);
        let pidfd = pidfd_of(pid)?;
        Ok(Supervisor {
            pid: pid as u32,
            pidfd,
            channel: ours,
            free: std::cell::Cell::new(true),
        })
    }

    /// Whether it has not exited: its pidfd reads as ready once it has.
    fn alive(&self) -> bool {
        !readable(&self.pidfd, Duration::ZERO).unwrap_or(true)
    }

    /// Whether it is free, taking in the ending of the command it was let go of with, without waiting; `None`
    /// when it is gone (its channel closed: it exited, or was killed), is going (it said it takes no other
    /// command), or said something else.
    fn heard_free(&self) -> Option<bool> {
        if self.free.get() {
            return Some(true);
        }
        let mut record = [0u8; ENDING_BYTES];
        match rustix::net::recv(&self.channel, &mut record, RecvFlags::DONTWAIT) {
            Ok((ENDING_BYTES, _)) if decode_ending(record).1 => {
                self.free.set(true);
                Some(true)
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => Some(false),
            _ => None,
        }
    }

    fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
    }
}

/// Answers the engine's question: the supervisor's pid, with its pidfd and the engine's end of its socket
/// (the spawner keeps neither), or why none could be forked.
fn answer(socket: &UnixStream, handed: Result<Supervisor, String>) -> io::Result<()> {
    let mut writer = socket;
    match handed {
        Ok(supervisor) => {
            let mut header = [0u8; 8];
            header[4..].copy_from_slice(&supervisor.pid.to_le_bytes());
            let fds = [supervisor.pidfd.as_fd(), supervisor.channel.as_fd()];
            let sent = send_with_fds(socket, &[IoSlice::new(&header)], &fds)?;
            if sent < header.len() {
                writer.write_all(&header[sent..])?;
            }
        }
        Err(message) => {
            let mut header = vec![0u8; 8];
            header[..4].copy_from_slice(&1u32.to_le_bytes());
            header[4..].copy_from_slice(&(message.len() as u32).to_le_bytes());
            header.extend_from_slice(message.as_bytes());
            writer.write_all(&header)?;
        }
    }
    Ok(())
}

/// A supervisor's life: it waits for a request from the engine, supervises its command, and writes on its
/// channel how it ended and whether it takes another. It ends when the channel closes (the engine dropped it,
/// is done with commands, or died), or once its spawner died.
///
/// The engine may still signal a command after its ending was written (a stop that crossed the end), but never
/// once it has let go of it, which it does before it hands this supervisor another command. So the signals
/// meant for the last command are all pending when the next request comes, and are discarded then, before the
/// next command starts. Waiting instead for the engine to close the last command's status pipe before saying
/// it was free cost a sleep and a wake-up of the supervisor, and one of the engine's thread, a node.
///
/// Its first writes to a page it shares with the spawner copy the page (a forked child's memory is
/// copy-on-write). It writes the stack it will run on while it waits, so that the supervision takes no fault
/// there once a request came.
fn supervisor_in_child(spawner: u32, channel: UnixStream) -> libc::c_int {
    // SAFETY: prctl, getppid, setpgid, and open and dup2 on descriptors this process owns. fd 0 is the
    // engine's socket: a supervisor must not keep the spawner's end open, or an engine would not see a dead
    // spawner's socket close.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            || libc::getppid() as u32 != spawner
        {
            return 1;
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 || libc::dup2(null, 0) < 0 {
            return 1;
        }
        libc::close(null);
        // A group of its own, as each of its commands has.
        libc::setpgid(0, 0);
    }
    touch_stack();
    loop {
        let (command, fds) = match next_command(&channel, spawner) {
            Ok(next) => next,
            Err(code) => return code,
        };
        let ending = supervise_one(spawner, &command, fds);
        // Until its next command it dies with the spawner, as a standby does. The supervision set its
        // parent-death signal to STOP_ALL, which it keeps blocked; and the other end of its socket is the
        // engine's, which outlives a spawner killed by hand, so the socket would not close either. A
        // supervisor whose spawner is gone must not take a command: the supervision would refuse it.
        // SAFETY: prctl and getppid have no memory effects.
        let orphaned = unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                || libc::getppid() as u32 != spawner
        };
        let mut writer = &channel;
        if writer.write_all(&encode_ending(ending, !orphaned)).is_err() || orphaned {
            return 0;
        }
    }
}

/// Waits for the engine's next command and its descriptors, and discards the signals still pending for the
/// last one (a supervision keeps them blocked), since none of them may reach the next; the code to exit with
/// when there is none: 0 once the channel closed (the engine let go of the supervisor, is done with commands
/// or died) or the spawner died, 1 for garbage.
fn next_command(
    channel: &UnixStream,
    spawner: u32,
) -> Result<(supervisor::Program, [OwnedFd; 3]), libc::c_int> {
    let (body, fds) = match receive_request(channel) {
        Ok(Some(request)) => request,
        Ok(None) | Err(_) => return Err(0),
    };
    if !discard_pending_signals(spawner) {
        return Err(0);
    }
    match (decode(&body), <[OwnedFd; 3]>::try_from(fds)) {
        (Ok(command), Ok(fds)) => Ok((command, fds)),
        _ => Err(1),
    }
}

/// Takes every pending signal; `false` if the spawner died (its parent-death signal, or a new parent).
fn discard_pending_signals(spawner: u32) -> bool {
    let all = supervisor::watched_signals();
    let none = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        // SAFETY: sigtimedwait writes only into `info`, which lives on this stack frame.
        let taken = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigtimedwait(&all, &mut info, &none)
        };
        if taken < 0 {
            break;
        }
    }
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() as u32 == spawner }
}

/// Reaps every supervisor that has ended.
fn reap_supervisors() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only `status`.
        if unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } <= 0 {
            return;
        }
    }
}

/// Writes the next `STACK_AHEAD` bytes of the stack below the caller, so that the supervision running on them
/// later takes no fault there.
#[inline(never)]
fn touch_stack() {
    const STACK_AHEAD: usize = 16 * 1024;
    std::hint::black_box(&mut [0u8; STACK_AHEAD]);
}

/// Sends `parts` with `fds` (at most four) in `SCM_RIGHTS`, in one call; answers how many bytes were taken.
fn send_with_fds(
    socket: &UnixStream,
    parts: &[IoSlice<'_>],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    Ok(sendmsg(socket, parts, &mut control, SendFlags::NOSIGNAL)?)
}

/// Sends one request (header, descriptors, body) on a supervisor's `socket`: in one call when it fits, so that
/// the supervisor wakes once, to a whole request (sent as a header, then the body, it woke to the header,
/// preempting the engine's thread, and slept again until the body came).
fn send_request(socket: &UnixStream, body: &[u8], fds: [BorrowedFd<'_>; 3]) -> io::Result<()> {
    let header = (body.len() as u32).to_le_bytes();
    let sent = send_with_fds(socket, &[IoSlice::new(&header), IoSlice::new(body)], &fds)?;
    if sent < header.len() {
        return Err(io::Error::other("a header was taken in part"));
    }
    let mut written = sent - header.len();
    while written < body.len() {
        written += rustix::net::send(socket, &body[written..], SendFlags::NOSIGNAL)?;
    }
    Ok(())
}

/// Reads one request's body and descriptors; `None` at the end of the stream.
fn receive_request(socket: &UnixStream) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut header = [0u8; 4];
    let Some(fds) = receive_with_fds(socket, &mut header)? else {
        return Ok(None);
    };
    let length = u32::from_le_bytes(header);
    if length > MAX_REQUEST {
        return Err(io::Error::other("a request larger than any command"));
    }
    let mut body = vec![0u8; length as usize];
    (&*socket).read_exact(&mut body)?;
    Ok(Some((body, fds)))
}

/// Receives `header` whole, with the descriptors sent beside it (at most four, close-on-exec); `None` at the end
/// of the stream. The other side of [`send_with_fds`].
fn receive_with_fds(socket: &UnixStream, header: &mut [u8]) -> io::Result<Option<Vec<OwnedFd>>> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = recvmsg(
        socket,
        &mut [IoSliceMut::new(header)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let fds: Vec<OwnedFd> = control
        .drain()
        .flat_map(|message| match message {
            RecvAncillaryMessage::ScmRights(fds) => fds.collect(),
            _ => Vec::new(),
        })
        .collect();
    if received.bytes == 0 {
        return Ok(None);
    }
    if received.bytes < header.len() {
        (&*socket).read_exact(&mut header[received.bytes..])?;
    }
    Ok(Some(fds))
}

/// A pidfd of a child just forked. It cannot have been reaped yet (only the spawner's one thread reaps, and
/// not in between), so the pid names it.
fn pidfd_of(pid: libc::pid_t) -> io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| io::Error::other("fork returned no pid"))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// One command under supervision, with `stdio` as its stdin, stdout and stderr; how it ended. When it could not
/// be started, the reason goes to its stderr. The supervisor's own stdin, stdout and stderr stay `/dev/null`
/// throughout: the command's are put in place by its child before the exec (duplicated into the supervisor's
/// own and back to `/dev/null` after the start, they cost eight system calls a command).
fn supervise_one(spawner: u32, command: &supervisor::Program, stdio: [OwnedFd; 3]) -> Ending {
    let mut stdio = Some(stdio);
    match supervisor::supervise(spawner, command, &mut stdio) {
        Ok(ending) => ending,
        Err(error) => {
            if let Some([_, _, stderr]) = stdio {
                let _ = writeln!(
                    File::from(stderr),
                    "error: cannot run {}\ncaused by: {error}",
                    command.program().to_string_lossy()
                );
            }
            Ending::NotStarted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_signal_meant_for_the_last_command_is_discarded_when_the_next_comes() -> io::Result<()>
    {
        let (engine, channel) = UnixStream::pair()?;
        let null = File::open("/dev/null")?;
        let args = vec!["-c".to_owned(), "true".to_owned()];
        let body = encode(&Request {
            program: OsStr::new("/bin/sh"),
            args: &args,
            env: &[],
            cwd: Path::new("/"),
            stdin: null.as_fd(),
            stdout: null.as_fd(),
            stderr: null.as_fd(),
        })?;
        // Blocked in this thread as a supervisor blocks them, then sent to this thread alone (a signal sent to
        // the test process could be taken by another of its threads, whose default is to end the process):
        // stops the engine sent for the last command before it let go of it, and so before the next request.
        let watched = supervisor::watched_signals();
        // SAFETY: pthread_sigmask and pthread_kill act on this thread; sigpending writes only `pending`.
        let (before, next, left) = unsafe {
            if libc::pthread_sigmask(libc::SIG_BLOCK, &watched, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::pthread_kill(libc::pthread_self(), libc::SIGTERM);
            libc::pthread_kill(libc::pthread_self(), supervisor::STOP_ALL);
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            let before = libc::sigismember(&pending, libc::SIGTERM);
            let fd = null.as_fd();
            let sent = send_request(&engine, &body, [fd, fd, fd]);
            let next = sent.map(|()| next_command(&channel, libc::getppid() as u32));
            libc::sigpending(&mut pending);
            let left =
                [libc::SIGTERM, supervisor::STOP_ALL].map(|s| libc::sigismember(&pending, s));
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &watched, std::ptr::null_mut());
            (before, next?, left)
        };
        assert_eq!(before, 1, "SIGTERM was not pending");
        let (command, _fds) =
            next.map_err(|code| io::Error::other(format!("no command: {code}")))?;
        assert_eq!(command.program().to_bytes(), b"/bin/sh");
        assert_eq!(left, [0, 0], "signals still pending when the command came");
        // The engine let go of the supervisor: no command, and it exits cleanly.
        drop(engine);
        assert_eq!(
            next_command(&channel, unsafe { libc::getppid() } as u32).err(),
            Some(0)
        );
        Ok(())
    }

    #[test]
    fn an_ending_read_back_says_how_the_command_ended_and_whether_the_supervisor_takes_another()
    -> io::Result<()> {
        for ending in [
            Ending::Exited(0),
            Ending::Exited(3),
            Ending::Signalled(libc::SIGTERM),
            Ending::NotStarted,
        ] {
            for next in [true, false] {
                assert_eq!(decode_ending(encode_ending(ending, next)), (ending, next));
            }
        }
        // SAFETY: getpid has no preconditions.
        let pidfd = pidfd_of(unsafe { libc::getpid() })?;
        let (engine, supervisor_end) = UnixStream::pair()?;
        let busy = Supervisor {
            pid: 0,
            pidfd,
            channel: engine,
            free: std::cell::Cell::new(false),
        };
        // Still running its command: not free, and not gone.
        assert_eq!(busy.heard_free(), Some(false));
        (&supervisor_end).write_all(&encode_ending(Ending::Exited(0), true))?;
        assert_eq!(busy.heard_free(), Some(true));
        assert!(busy.free.get());
        // One that said it takes no other command is gone, as is one whose channel closed.
        busy.free.set(false);
        (&supervisor_end).write_all(&encode_ending(Ending::Exited(0), false))?;
        assert_eq!(busy.heard_free(), None);
        drop(supervisor_end);
        assert_eq!(busy.heard_free(), None);
        // The engine waiting on a command reads the same record, and a closed channel as a killed supervisor.
        let (engine, supervisor_end) = UnixStream::pair()?;
        (&supervisor_end).write_all(&encode_ending(Ending::Signalled(libc::SIGINT), true))?;
        assert_eq!(
            read_ending(&engine)?,
            (Ending::Signalled(libc::SIGINT), true)
        );
        drop(supervisor_end);
        assert_eq!(
            read_ending(&engine)?,
            (Ending::Signalled(libc::SIGKILL), false)
        );
        Ok(())
    }

    #[test]
    fn a_request_decodes_to_what_was_encoded_and_garbage_is_refused() -> io::Result<()> {
        let env = [(OsStr::new("A"), OsStr::new("b=c"))];
        let args = vec!["-c".to_owned(), "echo é".to_owned()];
        let null = File::open("/dev/null")?;
        let request = Request {
            program: OsStr::new("/bin/sh"),
            args: &args,
            env: &env,
            cwd: Path::new("/tmp"),
            stdin: null.as_fd(),
            stdout: null.as_fd(),
            stderr: null.as_fd(),
        };
        let body = encode(&request)?;
        let command = decode(&body).map_err(io::Error::other)?;
        assert_eq!(command.program().to_bytes(), b"/bin/sh");
        assert_eq!(command.cwd().to_bytes(), b"/tmp");
        assert_eq!(
            command.args_and_env(),
            [vec![&b"-c"[..], "echo é".as_bytes()], vec![&b"A=b=c"[..]]]
        );
        for cut in 0..body.len() {
            assert!(decode(&body[..cut]).is_err(), "a request cut at {cut}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut lying = body.clone();
        lying[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&lying).is_err());
        // A NUL inside a string, or a variable without `=`, is garbage no engine sends.
        let at = |needle: &[u8]| body.windows(needle.len()).position(|w| w == needle);
        let mut nul = body.clone();
        let echo = at(b"echo").ok_or_else(|| io::Error::other("no `echo` in the body"))?;
        nul[echo] = 0;
        assert!(decode(&nul).is_err());
        let mut no_equals = body.clone();
        let pair = at(b"A=b").ok_or_else(|| io::Error::other("no `A=b` in the body"))?;
        no_equals[pair + 1] = b'_';
        no_equals[pair + 3] = b'_';
        assert!(decode(&no_equals).is_err());
        // The engine refuses a NUL with the reason, rather than sending a request no supervisor takes.
        let args = vec!["-c".to_owned(), "true\0".to_owned()];
        let refused = encode(&Request {
            args: &args,
            ..request
        });
        assert_eq!(
            refused.map_err(|e| e.kind()).err(),
            Some(io::ErrorKind::InvalidInput)
        );
        Ok(())
    }
}
