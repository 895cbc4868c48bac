//! The spawner: how the engine starts node commands. One small process per engine (`fracflow-exec __spawner
//! ENGINE_PID`, started the first time a command runs) hands each command to a supervisor
//! ([`crate::supervisor`]) it forked. A supervisor serves one command at a time and many in its life, so a
//! run forks about as many supervisors as it runs commands at once: a fork and an exit per command were a
//! seventh of the machine's CPU on a first run of 10 000 trivial nodes, and before the supervisors a
//! `posix_spawn` and an exec of a trampoline binary per node cost about a millisecond more.
//!
//! The pool. The spawner keeps its supervisors, each waiting on a socket pair of its own. A request is passed
//! on (the same header, descriptors and body) to one that is free: a *standby*, forked before any command was
//! known, or one that finished its last command and said so with one byte on its socket. A supervisor says it
//! is free only once the engine has closed its end of the last command's status pipe (the engine then sends
//! nothing more about that command) and it has discarded the signals still pending for it (a stop that
//! crossed the command's end), so a signal meant for one command never reaches the next. After each answer,
//! when no supervisor is free, a standby is forked, so a chain's next node does not wait for a fork on its
//! critical path. When none is free at a request (or the pool holds [`MAX_SUPERVISORS`]), the spawner forks a
//! supervisor for that command alone.
//!
//! Lifetimes. The spawner dies with the engine (`PR_SET_PDEATHSIG=SIGKILL`, and it checks that its parent is
//! still the engine). Each supervisor is a child subreaper with `PR_SET_PDEATHSIG=STOP_ALL` on the
//! spawner, so when the engine dies, the spawner dies, and every supervisor kills its command's whole tree; a
//! free one sees its socket close and exits. The engine signals a supervisor through a pidfd, so a pid reused
//! after it ended is never signalled.
//!
//! Protocol, on a Unix stream socket that is the spawner's stdin. A request is a header (the body's length,
//! u32 little-endian) carrying four descriptors in `SCM_RIGHTS` (the command's stdin, stdout, stderr, and the
//! write end of its status pipe), then the body: program, working directory, the arguments and the
//! environment (`KEY=VALUE`), each a count or a length (u32) and bytes. The answer is a header of eight bytes
//! (0 and the supervisor's pid, with a pidfd of it in `SCM_RIGHTS`; or 1 and the length of a message that
//! follows). The supervisor writes how the command ended to its status pipe (one byte: 0 exited, 1 killed by
//! a signal, 2 could not be started; then a u32: the code or the signal).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
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
    pub env: &'a [(OsString, OsString)],
    pub cwd: &'a Path,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// A command the spawner started: its supervisor's pid and pidfd, and the read end of its status pipe.
#[derive(Debug)]
pub(crate) struct Supervised {
    pub pid: u32,
    pidfd: OwnedFd,
    status: File,
    ended: std::cell::Cell<Option<Ending>>,
}

impl Supervised {
    /// Sends `signal` to the supervisor, which passes stop signals on to the command's group and takes
    /// `STOP_ALL` as the order to kill the whole tree. Nothing is sent once it has ended.
    pub fn signal(&self, signal: libc::c_int) {
        if self.ended.get().is_some() {
            return;
        }
        if let Some(signal) = rustix::process::Signal::from_named_raw(signal) {
            let _ = rustix::process::pidfd_send_signal(&self.pidfd, signal);
        }
    }

    /// How the command ended, waiting at most `limit` for it (`None`: still running).
    pub fn wait_timeout(&self, limit: Duration) -> io::Result<Option<Ending>> {
        if self.ended.get().is_none() && readable(&self.status, limit)? {
            self.ended.set(Some(read_ending(&self.status)?));
        }
        Ok(self.ended.get())
    }

    /// The status pipe, for a caller that polls it beside other descriptors.
    pub fn status_fd(&self) -> RawFd {
        self.status.as_raw_fd()
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

/// Reads the ending the supervisor wrote; a pipe closed without one means the supervisor itself was killed.
fn read_ending(mut status: &File) -> io::Result<Ending> {
    let mut record = [0u8; 5];
    let mut got = 0;
    while got < record.len() {
        match status.read(&mut record[got..]) {
            Ok(0) => return Ok(Ending::Signalled(libc::SIGKILL)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let value = u32::from_le_bytes([record[1], record[2], record[3], record[4]]);
    Ok(match record[0] {
        0 => Ending::Exited(value as i32),
        1 => Ending::Signalled(value as i32),
        _ => Ending::NotStarted,
    })
}

/// The engine's connection to its spawner, started on first use.
#[derive(Debug)]
struct Connection {
    socket: UnixStream,
    process: std::process::Child,
}

static SPAWNER: Mutex<Option<Connection>> = Mutex::new(None);

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
                let _ = started.send(command.spawn());
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

    /// Sends `request`; answers the supervisor's pid, its pidfd and the read end of its status pipe, or why
    /// the spawner could not start it.
    fn request(
        &mut self,
        request: &Request<'_>,
    ) -> io::Result<Result<(u32, OwnedFd, OwnedFd), String>> {
        let body = encode(request)?;
        let (status_read, status_write) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let fds = [
            request.stdin.as_fd(),
            request.stdout.as_fd(),
            request.stderr.as_fd(),
            status_write.as_fd(),
        ];
        send_request(&self.socket, &body, fds)?;
        drop(status_write);
        let mut answer = [0u8; 8];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = recvmsg(
            &self.socket,
            &mut [IoSliceMut::new(&mut answer)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        let mut pidfd = None;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(mut fds) = message {
                pidfd = fds.next();
            }
        }
        if received.bytes < answer.len() {
            self.socket.read_exact(&mut answer[received.bytes..])?;
        }
        let kind = u32::from_le_bytes([answer[0], answer[1], answer[2], answer[3]]);
        let value = u32::from_le_bytes([answer[4], answer[5], answer[6], answer[7]]);
        if kind != 0 {
            let mut message = vec![0u8; value.min(64 * 1024) as usize];
            self.socket.read_exact(&mut message)?;
            return Ok(Err(String::from_utf8_lossy(&message).into_owned()));
        }
        let pidfd = pidfd.ok_or_else(|| io::Error::other("the spawner sent no pidfd"))?;
        Ok(Ok((value, pidfd, status_read)))
    }
}

/// Starts `request` through the spawner of this engine (started from `binary` the first time, and again if it
/// died). An error is an error of starting; a command that cannot be run is started and ends as
/// [`Ending::NotStarted`], with the reason on its stderr.
pub(crate) fn start(binary: &Path, request: Request<'_>) -> io::Result<Supervised> {
    let mut guard = SPAWNER.lock().unwrap_or_else(|p| p.into_inner());
    for attempt in 0..2 {
        if guard.is_none() {
            *guard = Some(Connection::start(binary)?);
        }
        let Some(connection) = guard.as_mut() else {
            continue;
        };
        match connection.request(&request) {
            Ok(Ok((pid, pidfd, status))) => {
                return Ok(Supervised {
                    pid,
                    pidfd,
                    status: File::from(status),
                    ended: std::cell::Cell::new(None),
                });
            }
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

fn put_bytes(body: &mut Vec<u8>, bytes: &[u8]) -> io::Result<()> {
    let length = u32::try_from(bytes.len()).map_err(|_| io::Error::other("a field is too long"))?;
    body.extend_from_slice(&length.to_le_bytes());
    body.extend_from_slice(bytes);
    Ok(())
}

fn encode(request: &Request<'_>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    put_bytes(&mut body, request.program.as_bytes())?;
    put_bytes(&mut body, request.cwd.as_os_str().as_bytes())?;
    body.extend_from_slice(&(request.args.len() as u32).to_le_bytes());
    for arg in request.args {
        put_bytes(&mut body, arg.as_bytes())?;
    }
    body.extend_from_slice(&(request.env.len() as u32).to_le_bytes());
    for (key, value) in request.env {
        let mut pair = key.as_bytes().to_vec();
        pair.push(b'=');
        pair.extend_from_slice(value.as_bytes());
        put_bytes(&mut body, &pair)?;
    }
    if body.len() > MAX_REQUEST as usize {
        return Err(io::Error::other(
            "the command line and environment are too large",
        ));
    }
    Ok(body)
}

/// A request as the spawner reads it.
#[derive(Debug, PartialEq)]
struct Decoded {
    program: OsString,
    cwd: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

fn decode(body: &[u8]) -> Result<Decoded, String> {
    let mut at = 0;
    let number = |at: &mut usize| -> Result<u32, String> {
        let bytes = body
            .get(*at..*at + 4)
            .ok_or_else(|| "the request ends early".to_owned())?;
        *at += 4;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    };
    let field = |at: &mut usize| -> Result<OsString, String> {
        let length = number(at)? as usize;
        let bytes = body
            .get(*at..*at + length)
            .ok_or_else(|| "a field runs past the request".to_owned())?;
        *at += length;
        Ok(OsString::from_vec(bytes.to_vec()))
    };
    let program = field(&mut at)?;
    let cwd = PathBuf::from(field(&mut at)?);
    let count = number(&mut at)?;
    let args = (0..count)
        .map(|_| field(&mut at))
        .collect::<Result<_, _>>()?;
    let count = number(&mut at)?;
    let env = (0..count)
        .map(|_| {
            let pair = field(&mut at)?.into_vec();
            let split = pair
                .iter()
                .position(|&b| b == b'=')
                .ok_or_else(|| "a variable without `=`".to_owned())?;
            Ok((
                OsString::from_vec(pair[..split].to_vec()),
                OsString::from_vec(pair[split + 1..].to_vec()),
            ))
        })
        .collect::<Result<_, String>>()?;
    if at != body.len() {
        return Err("bytes after the request".into());
    }
    Ok(Decoded {
        program,
        cwd,
        args,
        env,
    })
}

/// `fracflow-exec __spawner ENGINE_PID`: serves requests on stdin until the engine closes it or dies.
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
    let mut pool = Pool::default();
    // Without a free supervisor, requests are served by forking as they come.
    pool.fork_standby(&[]);
    loop {
        reap_supervisors();
        match readable(&socket, REAP_EVERY) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => return ExitCode::from(1),
        }
        let served = match serve_one(&socket, &mut pool) {
            Ok(Some(body)) => body,
            // The engine closed the socket: it is done with commands.
            Ok(None) => return ExitCode::SUCCESS,
            Err(_) => return ExitCode::from(1),
        };
        // After the answer, off the next request's path: a standby only when no supervisor is free.
        pool.collect_free();
        if !pool.has_free() {
            pool.fork_standby(&served);
            // The fork made the spawner's own pages copy-on-write again: it takes its copies now, as its
            // standby does (see `supervisor_in_child`), rather than while it serves the next request.
            drop(std::hint::black_box(decode(&served)));
            touch_stack();
        }
    }
}

/// The most supervisors the spawner keeps for reuse; a request that finds every one of them busy is served by
/// a supervisor forked for it alone.
const MAX_SUPERVISORS: usize = 64;

/// What a supervisor writes on its channel once it is free for another command.
const FREE: u8 = 1;

/// The supervisors the spawner can hand requests to. Each serves one command at a time and many in its life:
/// a fork and an exit per command were about a seventh of the machine's CPU time on a first run of 10 000
/// trivial nodes (`perf record -a`: `_Fork`, `dup_mmap`, copy-on-write faults and `do_exit`).
#[derive(Default)]
struct Pool {
    supervisors: Vec<Supervisor>,
}

/// A supervisor forked ahead of its commands, taking them on `channel` (see the module's documentation).
struct Supervisor {
    pid: u32,
    pidfd: OwnedFd,
    channel: UnixStream,
    /// Waiting for a command: a standby that never had one, or one that said so on its channel.
    free: bool,
}

impl Pool {
    /// Forks a standby, unless the pool is full. `rehearsal`: the last request's body, which the standby
    /// decodes while it waits (see [`supervisor_in_child`]).
    fn fork_standby(&mut self, rehearsal: &[u8]) {
        if self.supervisors.len() >= MAX_SUPERVISORS {
            return;
        }
        if let Ok(supervisor) = Supervisor::fork(rehearsal) {
            self.supervisors.push(supervisor);
        }
    }

    /// Takes in what busy supervisors said without waiting: free again, or gone (their channel closed).
    fn collect_free(&mut self) {
        self.supervisors.retain_mut(|supervisor| {
            if supervisor.free {
                return true;
            }
            let mut said = [0u8; 1];
            match rustix::net::recv(&supervisor.channel, &mut said, RecvFlags::DONTWAIT) {
                Ok((1, _)) if said[0] == FREE => {
                    supervisor.free = true;
                    true
                }
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => true,
                // Closed (it exited, or was killed) or garbage: it takes no more commands.
                _ => {
                    supervisor.kill();
                    false
                }
            }
        })
    }

    fn has_free(&self) -> bool {
        self.supervisors.iter().any(|supervisor| supervisor.free)
    }

    /// Hands a request to a free supervisor, which then supervises its command; answers its pid and a pidfd of
    /// it for the engine. `None` when no free supervisor took it (the caller forks one for it).
    fn hand_over(&mut self, body: &[u8], fds: &[OwnedFd; 4]) -> Option<(u32, OwnedFd)> {
        self.collect_free();
        while let Some(index) = self.supervisors.iter().position(|s| s.free) {
            let supervisor = &mut self.supervisors[index];
            if supervisor.send(body, fds).is_ok()
                && let Ok(pidfd) = supervisor.pidfd.try_clone()
            {
                supervisor.free = false;
                return Some((supervisor.pid, pidfd));
            }
            // It died, or may be alive but stuck: it must not become a second supervisor of this command later.
            self.supervisors.swap_remove(index).kill();
        }
        None
    }
}

impl Supervisor {
    fn fork(rehearsal: &[u8]) -> io::Result<Supervisor> {
        let (ours, theirs) = UnixStream::pair()?;
        // SAFETY: getpid has no preconditions.
        let spawner = unsafe { libc::getpid() } as u32;
        // SAFETY: the spawner is single-threaded (see `fork_supervisor`), so the child may run ordinary code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(ours);
            let code = supervisor_in_child(spawner, theirs, rehearsal);
            // SAFETY: ends the child at once, without running the spawner's exit handlers.
            unsafe { libc::_exit(code) };
        }
        drop(theirs);
        let pidfd = pidfd_of(pid)?;
        Ok(Supervisor {
            pid: pid as u32,
            pidfd,
            channel: ours,
            free: true,
        })
    }

    fn send(&self, body: &[u8], fds: &[OwnedFd; 4]) -> io::Result<()> {
        let fds = [
            fds[0].as_fd(),
            fds[1].as_fd(),
            fds[2].as_fd(),
            fds[3].as_fd(),
        ];
        send_request(&self.channel, body, fds)
    }

    fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
    }
}

/// A supervisor's life: it waits for a request, supervises its command as a freshly forked supervisor would,
/// and once the engine has let go of that command says on its channel that it is free for the next. It ends
/// when the channel closes (the spawner ended: the engine is done with commands, or died).
///
/// Its first writes to a page it shares with the spawner copy the page (a forked child's memory is
/// copy-on-write): about thirty faults per supervisor, measured with perf's `page_fault_user`. It takes most
/// of them while it waits rather than after its request came: it decodes the last request, which touches the
/// allocator's pages a request like it will use, and writes the stack it will run on.
fn supervisor_in_child(spawner: u32, channel: UnixStream, rehearsal: &[u8]) -> libc::c_int {
    // SAFETY: prctl, getppid, open and dup2 on descriptors this process owns. fd 0 is the engine's socket:
    // a supervisor must not keep the spawner's end open, or an engine would not see a dead spawner's socket
    // close.
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
    }
    drop(std::hint::black_box(decode(rehearsal)));
    touch_stack();
    loop {
        let (body, fds) = match receive_request(&channel) {
            Ok(Some(request)) => request,
            // The spawner ended (the engine is done with commands) or sent garbage: nothing to supervise.
            Ok(None) | Err(_) => return 0,
        };
        let (Ok(request), Ok(fds)) = (decode(&body), <[OwnedFd; 4]>::try_from(fds)) else {
            return 1;
        };
        let status = supervise_one(spawner, request, fds);
        if !let_go(&status, spawner) {
            return 0;
        }
        drop(status);
        // Signals the engine sent for the command just ended (a stop that crossed its end) are pending, as the
        // supervision keeps them blocked: they were sent before the engine let go, so they are all here now,
        // and none of them may reach the next command.
        if !discard_pending_signals(spawner) {
            return 0;
        }
        let mut writer = &channel;
        if writer.write_all(&[FREE]).is_err() {
            return 0;
        }
    }
}

/// Waits until the engine has closed its end of a command's status pipe, after which it sends nothing more
/// about that command; `false` if the spawner (and so the engine) died first. A pipe's write end polls as an
/// error once no reader is left.
fn let_go(status: &File, spawner: u32) -> bool {
    loop {
        let mut fds = [rustix::event::PollFd::new(
            status,
            rustix::event::PollFlags::empty(),
        )];
        let timeout = poll_limit(REAP_EVERY);
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
        if !fds[0].revents().is_empty() {
            return true;
        }
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } as u32 != spawner {
            return false;
        }
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

/// Sends one request (header, descriptors, body) on `socket`: the engine to the spawner, or the spawner to its
/// standby.
fn send_request(socket: &UnixStream, body: &[u8], fds: [BorrowedFd<'_>; 4]) -> io::Result<()> {
    let header = (body.len() as u32).to_le_bytes();
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    let sent = sendmsg(
        socket,
        &[IoSlice::new(&header)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != header.len() {
        return Err(io::Error::other("a header was taken in part"));
    }
    let mut written = 0;
    while written < body.len() {
        written += rustix::net::send(socket, &body[written..], SendFlags::NOSIGNAL)?;
    }
    Ok(())
}

/// Reads one request's body and descriptors; `None` at the end of the stream.
fn receive_request(socket: &UnixStream) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut header = [0u8; 4];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut header)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if received.bytes == 0 {
        return Ok(None);
    }
    let fds: Vec<OwnedFd> = control
        .drain()
        .flat_map(|message| match message {
            RecvAncillaryMessage::ScmRights(fds) => fds.collect(),
            _ => Vec::new(),
        })
        .collect();
    let mut reader = socket;
    if received.bytes < header.len() {
        reader.read_exact(&mut header[received.bytes..])?;
    }
    let length = u32::from_le_bytes(header);
    if length > MAX_REQUEST {
        return Err(io::Error::other("a request larger than any command"));
    }
    let mut body = vec![0u8; length as usize];
    reader.read_exact(&mut body)?;
    Ok(Some((body, fds)))
}

/// Reads one request and starts its supervisor: a free one of the pool if one takes it, else a fork.
/// Answers the request's body, or `None` at the end of the stream.
fn serve_one(socket: &UnixStream, pool: &mut Pool) -> io::Result<Option<Vec<u8>>> {
    let Some((body, fds)) = receive_request(socket)? else {
        return Ok(None);
    };
    let answer = match (decode(&body), <[OwnedFd; 4]>::try_from(fds)) {
        (Ok(request), Ok(fds)) => match pool.hand_over(&body, &fds) {
            Some(started) => Ok(started),
            None => fork_supervisor(request, fds),
        },
        (Err(why), _) => Err(why),
        (_, Err(_)) => Err("a request without its four descriptors".to_owned()),
    };
    let mut writer = socket;
    match answer {
        Ok((pid, pidfd)) => {
            let mut answer = [0u8; 8];
            answer[4..].copy_from_slice(&pid.to_le_bytes());
            let fd = [pidfd.as_fd()];
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fd));
            let sent = sendmsg(
                socket,
                &[IoSlice::new(&answer)],
                &mut control,
                SendFlags::NOSIGNAL,
            )?;
            if sent < answer.len() {
                writer.write_all(&answer[sent..])?;
            }
        }
        Err(message) => {
            let mut answer = vec![0u8; 8];
            answer[..4].copy_from_slice(&1u32.to_le_bytes());
            answer[4..].copy_from_slice(&(message.len() as u32).to_le_bytes());
            answer.extend_from_slice(message.as_bytes());
            writer.write_all(&answer)?;
        }
    }
    Ok(Some(body))
}

/// Forks the supervisor of one command; returns its pid and a pidfd of it.
fn fork_supervisor(request: Decoded, fds: [OwnedFd; 4]) -> Result<(u32, OwnedFd), String> {
    // SAFETY: getpid has no preconditions.
    let spawner = unsafe { libc::getpid() };
    // SAFETY: the spawner is single-threaded (it starts no thread, and std starts none for it), so the child
    // may run ordinary code, allocation included, until it exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork failed: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = supervise_in_child(spawner as u32, request, fds);
        // SAFETY: ends the child at once, without running the spawner's exit handlers.
        unsafe { libc::_exit(code) };
    }
    drop(fds);
    let pidfd = pidfd_of(pid).map_err(|e| format!("pidfd_open failed: {e}"))?;
    Ok((pid as u32, pidfd))
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

/// A supervisor forked for one command: it supervises it and exits.
fn supervise_in_child(spawner: u32, request: Decoded, fds: [OwnedFd; 4]) -> libc::c_int {
    drop(supervise_one(spawner, request, fds));
    0
}

/// One command under supervision: its descriptors in place, it runs under [`supervisor::supervise`], and how
/// it ended is written to the status pipe, whose write end is answered. The supervisor's own stdin, stdout and
/// stderr point at `/dev/null` again afterwards, whatever happened: it holds none of the command's.
fn supervise_one(spawner: u32, request: Decoded, fds: [OwnedFd; 4]) -> File {
    let [stdin, stdout, stderr, status] = fds;
    let status = File::from(status);
    // SAFETY: setpgid and dup2 on descriptors this process owns; 0 (the socket) is replaced, so the command
    // never holds the spawner's socket.
    let in_place = unsafe {
        libc::setpgid(0, 0);
        [(&stdin, 0), (&stdout, 1), (&stderr, 2)]
            .iter()
            .try_for_each(|(fd, target)| {
                if libc::dup2(fd.as_raw_fd(), *target) < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            })
    };
    drop((stdin, stdout, stderr));
    let command = supervisor::Program {
        program: &request.program,
        args: &request.args,
        env: &request.env,
        cwd: &request.cwd,
    };
    let ending = match in_place.and_then(|()| supervisor::supervise(spawner, &command)) {
        Ok(ending) => ending,
        Err(error) => {
            let _ = writeln!(
                io::stderr(),
                "error: cannot run {}\ncaused by: {error}",
                request.program.to_string_lossy()
            );
            // A supervision that ran released them once the command held its copies; one that failed holds
            // them still.
            supervisor::release_stdio();
            Ending::NotStarted
        }
    };
    let (kind, value): (u8, u32) = match ending {
        Ending::Exited(code) => (0, code as u32),
        Ending::Signalled(signal) => (1, signal as u32),
        Ending::NotStarted => (2, 127),
    };
    let mut record = [kind, 0, 0, 0, 0];
    record[1..].copy_from_slice(&value.to_le_bytes());
    let _ = (&status).write_all(&record);
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_supervisor_is_free_once_the_engine_closed_the_status_pipe() -> io::Result<()> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let write = File::from(write);
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(read);
        });
        assert!(let_go(&write, parent), "the reader's close was not seen");
        closer
            .join()
            .map_err(|_| io::Error::other("the closing thread panicked"))?;
        // A spawner that is not our parent (it died, and we were re-parented): no wait for a reader forever.
        let (_read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        assert!(!let_go(&File::from(write), parent + 1));
        Ok(())
    }

    #[test]
    fn a_stop_signal_meant_for_the_last_command_is_discarded_before_the_next() -> io::Result<()> {
        // Blocked in this thread as a supervisor blocks them, then sent to this thread alone (a signal sent to
        // the test process could be taken by another of its threads, whose default is to end the process).
        let watched = supervisor::watched_signals();
        // SAFETY: pthread_sigmask and pthread_kill act on this thread; sigpending writes only `pending`.
        unsafe {
            if libc::pthread_sigmask(libc::SIG_BLOCK, &watched, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::pthread_kill(libc::pthread_self(), libc::SIGTERM);
            libc::pthread_kill(libc::pthread_self(), supervisor::STOP_ALL);
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            assert_eq!(libc::sigismember(&pending, libc::SIGTERM), 1);
            assert!(discard_pending_signals(libc::getppid() as u32));
            libc::sigpending(&mut pending);
            let left =
                [libc::SIGTERM, supervisor::STOP_ALL].map(|s| libc::sigismember(&pending, s));
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &watched, std::ptr::null_mut());
            assert_eq!(left, [0, 0], "signals still pending");
        }
        Ok(())
    }

    #[test]
    fn a_request_decodes_to_what_was_encoded_and_garbage_is_refused() -> io::Result<()> {
        let env = vec![(OsString::from("A"), OsString::from("b=c"))];
        let args = vec!["-c".to_owned(), "echo é".to_owned()];
        let null = || File::open("/dev/null").map(OwnedFd::from);
        let request = Request {
            program: OsStr::new("/bin/sh"),
            args: &args,
            env: &env,
            cwd: Path::new("/tmp"),
            stdin: null()?,
            stdout: null()?,
            stderr: null()?,
        };
        let body = encode(&request)?;
        assert_eq!(
            decode(&body),
            Ok(Decoded {
                program: "/bin/sh".into(),
                cwd: "/tmp".into(),
                args: vec!["-c".into(), "echo é".into()],
                env: vec![("A".into(), "b=c".into())],
            })
        );
        for cut in 0..body.len() {
            assert!(decode(&body[..cut]).is_err(), "a request cut at {cut}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut lying = body;
        lying[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&lying).is_err());
        Ok(())
    }
}
