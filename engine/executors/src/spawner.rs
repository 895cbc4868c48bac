//! The spawner: how the engine starts node commands. One small process per engine (`fracflow-exec __spawner
//! ENGINE_PID`, started the first time a command runs) forks a supervisor for each command
//! ([`crate::supervisor`]). Starting a node thus costs a fork of a small process, where it used to cost a
//! `posix_spawn` and an exec of a trampoline binary per node (about a millisecond more per node: most of a
//! chain's per-node cost beyond the command itself).
//!
//! The fork is made ahead of the request: the spawner keeps one *standby*, a supervisor forked before any
//! command is known and waiting on a socket pair of its own. A request is passed on to it (the same header,
//! descriptors and body) and a new standby is forked once the engine has its answer, so a chain's next node
//! does not wait for a fork on its critical path. When no standby is there (it died, or could not be
//! forked), the spawner forks the supervisor as the request arrives.
//!
//! Lifetimes. The spawner dies with the engine (`PR_SET_PDEATHSIG=SIGKILL`, and it checks that its parent is
//! still the engine). Each supervisor is a child subreaper with `PR_SET_PDEATHSIG=STOP_ALL` on the
//! spawner, so when the engine dies, the spawner dies, and every supervisor kills its command's whole tree.
//! The engine signals a supervisor through a pidfd, so a pid reused after it ended is never signalled.
//!
//! Protocol, on a Unix stream socket that is the spawner's stdin. A request is a header (the body's length,
//! u32 little-endian) carrying four descriptors in `SCM_RIGHTS` (the command's stdin, stdout, stderr, and the
//! write end of its status pipe), then the body: program, working directory, the arguments and the
//! environment (`KEY=VALUE`), each a count or a length (u32) and bytes. The answer is a header of eight bytes
//! (0 and the supervisor's pid, with a pidfd of it in `SCM_RIGHTS`; or 1 and the length of a message that
//! follows). The supervisor writes how the command ended to its status pipe (one byte: 0 exited, 1 killed by
//! a signal, 2 could not be started; then a u32: the code or the signal) and exits.

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
    let timeout = rustix::event::Timespec {
        tv_sec: limit.as_secs() as i64,
        tv_nsec: i64::from(limit.subsec_nanos()),
    };
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(ready) => Ok(ready > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
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
    // Without a standby, requests are served by forking as they come.
    let mut standby = Standby::fork(&[]).ok();
    loop {
        reap_supervisors();
        match readable(&socket, REAP_EVERY) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => return ExitCode::from(1),
        }
        let served = match serve_one(&socket, standby.take()) {
            Ok(Some(body)) => body,
            // The engine closed the socket: it is done with commands.
            Ok(None) => return ExitCode::SUCCESS,
            Err(_) => return ExitCode::from(1),
        };
        // After the answer, off the next request's path.
        standby = Standby::fork(&served).ok();
        // The fork made the spawner's own pages copy-on-write again: it takes its copies now, as its standby
        // does (see `standby_in_child`), rather than while it serves the next request.
        drop(std::hint::black_box(decode(&served)));
        touch_stack();
    }
}

/// A supervisor forked ahead of its command, waiting for it on `channel` (see the module's documentation).
struct Standby {
    pid: u32,
    pidfd: OwnedFd,
    channel: UnixStream,
}

impl Standby {
    /// `rehearsal`: the last request's body, which the standby decodes while it waits (see
    /// [`standby_in_child`]).
    fn fork(rehearsal: &[u8]) -> io::Result<Standby> {
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
            let code = standby_in_child(spawner, theirs, rehearsal);
            // SAFETY: ends the child at once, without running the spawner's exit handlers.
            unsafe { libc::_exit(code) };
        }
        drop(theirs);
        let pidfd = pidfd_of(pid)?;
        Ok(Standby {
            pid: pid as u32,
            pidfd,
            channel: ours,
        })
    }

    /// Passes a request on to the standby, which becomes its command's supervisor; answers its pid and
    /// pidfd. An error (the standby died) leaves the request to be forked for.
    fn hand_over(self, body: &[u8], fds: &[OwnedFd; 4]) -> io::Result<(u32, OwnedFd)> {
        let fds = [
            fds[0].as_fd(),
            fds[1].as_fd(),
            fds[2].as_fd(),
            fds[3].as_fd(),
        ];
        let sent = send_request(&self.channel, body, fds);
        if sent.is_err() {
            // It may be alive but stuck: it must not become a second supervisor of this command later.
            let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
        }
        sent.map(|()| (self.pid, self.pidfd))
    }
}

/// The standby's life: it waits for its request, then supervises it as a freshly forked supervisor would.
///
/// Its first writes to a page it shares with the spawner copy the page (a forked child's memory is
/// copy-on-write): about thirty faults per supervisor, measured with perf's `page_fault_user`. It takes most
/// of them while it waits rather than after its request came: it decodes the last request, which touches the
/// allocator's pages a request like it will use, and writes the stack it will run on.
fn standby_in_child(spawner: u32, channel: UnixStream, rehearsal: &[u8]) -> libc::c_int {
    // SAFETY: prctl, getppid, open and dup2 on descriptors this process owns. fd 0 is the engine's socket:
    // a standby must not keep the spawner's end open, or an engine would not see a dead spawner's socket
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
    let (body, fds) = match receive_request(&channel) {
        Ok(Some(request)) => request,
        // The spawner ended (the engine is done with commands) or sent garbage: nothing to supervise.
        Ok(None) | Err(_) => return 0,
    };
    drop(channel);
    match (decode(&body), <[OwnedFd; 4]>::try_from(fds)) {
        (Ok(request), Ok(fds)) => supervise_in_child(spawner, request, fds),
        _ => 1,
    }
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

/// Reads one request and starts its supervisor: `standby` if there is one and it takes it, else a fork.
/// Answers the request's body, or `None` at the end of the stream.
fn serve_one(socket: &UnixStream, standby: Option<Standby>) -> io::Result<Option<Vec<u8>>> {
    let Some((body, fds)) = receive_request(socket)? else {
        return Ok(None);
    };
    let answer = match (decode(&body), <[OwnedFd; 4]>::try_from(fds)) {
        (Ok(request), Ok(fds)) => match standby.map(|standby| standby.hand_over(&body, &fds)) {
            Some(Ok(started)) => Ok(started),
            None | Some(Err(_)) => fork_supervisor(request, fds),
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

/// The supervisor: its descriptors in place, it runs the command under [`supervisor::supervise`] and writes
/// how it ended to the status pipe.
fn supervise_in_child(spawner: u32, request: Decoded, fds: [OwnedFd; 4]) -> libc::c_int {
    let [stdin, stdout, stderr, status] = fds;
    // SAFETY: setpgid and dup2 on descriptors this process owns; 0 (the socket) is replaced, so the command
    // never holds the spawner's socket.
    unsafe {
        libc::setpgid(0, 0);
        for (fd, target) in [(&stdin, 0), (&stdout, 1), (&stderr, 2)] {
            if libc::dup2(fd.as_raw_fd(), target) < 0 {
                return 1;
            }
        }
    }
    drop((stdin, stdout, stderr));
    let command = supervisor::Program {
        program: &request.program,
        args: &request.args,
        env: &request.env,
        cwd: &request.cwd,
    };
    let ending = match supervisor::supervise(spawner, &command) {
        Ok(ending) => ending,
        Err(error) => {
            let _ = writeln!(
                io::stderr(),
                "error: cannot run {}\ncaused by: {error}",
                request.program.to_string_lossy()
            );
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
    let _ = File::from(status).write_all(&record);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

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
