//! The supervisor every node command runs under: forked by the spawner (see [`crate::spawner`]) and sent
//! commands by the engine, one after another, it makes each command's whole process tree die with the engine,
//! whatever it forks. It
//! - becomes a child subreaper, so every descendant orphaned below it (a compiler driver's `cc1plus`, a
//!   pipeline's members, a process that called `setsid`) is re-parented to it rather than to init;
//! - asks for [`STOP_ALL`] when its parent, the spawner, dies (`PR_SET_PDEATHSIG`) — the spawner dies with the
//!   engine — a signal it can catch, unlike SIGKILL;
//! - starts the program in a process group of its own and waits for it;
//! - forwards the engine's stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) to that group;
//! - on [`STOP_ALL`] (the engine died, or its last escalation step), or once the program has ended, kills the
//!   group and every descendant still alive, reaps them all, and reports how the program ended.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// What the supervisor is sent when the spawner, and so the engine, dies (its parent-death signal), and what
/// the engine sends as its last stop step: kill the command's whole tree now.
pub const STOP_ALL: libc::c_int = libc::SIGUSR1;

/// Stop signals the engine sends (or a user might) that the supervisor passes on to the command's group.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// How often the supervisor looks for an ended child even without a SIGCHLD (a backstop, not the mechanism).
const REAP_BACKSTOP: libc::timespec = libc::timespec {
    tv_sec: 1,
    tv_nsec: 0,
};

/// A command as the supervisor starts it: the program, its arguments and environment (`NAME=value`), and the
/// directory it runs in, each NUL-terminated in one buffer, from which `execve`'s arrays point. A command so
/// costs the supervisor a few allocations rather than several for every variable of its environment (glibc's
/// allocator took a seventh of the supervisors' time on a first run of trivial nodes).
#[derive(Debug)]
pub struct Program {
    strings: Vec<u8>,
    /// Where `argv` starts in `strings`: the program (run as is when it holds a `/`, else looked up on the
    /// `PATH` of the environment, as `execvp` would in the command's own environment), then its arguments.
    args: Vec<usize>,
    env: Vec<usize>,
    cwd: usize,
}

impl Program {
    /// `program` in `cwd`, with no argument or variable yet; `capacity` is the bytes all its strings will take,
    /// a hint.
    pub fn new(program: &[u8], cwd: &[u8], capacity: usize) -> io::Result<Program> {
        let mut command = Program {
            strings: Vec::with_capacity(capacity),
            args: Vec::new(),
            env: Vec::new(),
            cwd: 0,
        };
        command.cwd = command.push(cwd)?;
        let program = command.push(program)?;
        command.args.push(program);
        Ok(command)
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: &[u8]) -> io::Result<()> {
        let at = self.push(arg)?;
        self.args.push(at);
        Ok(())
    }

    /// Adds a variable, `NAME=value`.
    pub fn var(&mut self, pair: &[u8]) -> io::Result<()> {
        if !pair.contains(&b'=') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an environment variable without `=`",
            ));
        }
        let at = self.push(pair)?;
        self.env.push(at);
        Ok(())
    }

    /// Appends `bytes` and a NUL; where they start. A NUL inside is refused (it would cut the string short).
    fn push(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if bytes.contains(&0) {
            return Err(nul_inside());
        }
        let at = self.strings.len();
        self.strings.extend_from_slice(bytes);
        self.strings.push(0);
        Ok(at)
    }

    fn string(&self, at: usize) -> &CStr {
        // Every offset kept is where `push` put a string it ended with a NUL.
        CStr::from_bytes_until_nul(&self.strings[at..]).unwrap_or_default()
    }

    /// The program as given: a path, or a name looked up on the `PATH`.
    pub fn program(&self) -> &CStr {
        self.string(self.args[0])
    }

    pub(crate) fn cwd(&self) -> &CStr {
        self.string(self.cwd)
    }

    /// `argv`, NULL-terminated.
    fn argv(&self) -> Vec<*const libc::c_char> {
        self.pointers(&self.args)
    }

    fn envp(&self) -> Vec<*const libc::c_char> {
        self.pointers(&self.env)
    }

    fn pointers(&self, offsets: &[usize]) -> Vec<*const libc::c_char> {
        offsets
            .iter()
            .map(|&at| self.strings[at..].as_ptr().cast())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    }

    /// The value of the last `NAME=` in the environment.
    fn var_value(&self, name: &[u8]) -> Option<&[u8]> {
        self.env.iter().rev().find_map(|&at| {
            self.string(at)
                .to_bytes()
                .strip_prefix(name)?
                .strip_prefix(b"=")
        })
    }

    /// The arguments after the program, and the variables, as given.
    #[cfg(test)]
    pub(crate) fn args_and_env(&self) -> [Vec<&[u8]>; 2] {
        [&self.args[1..], &self.env[..]].map(|offsets| {
            offsets
                .iter()
                .map(|&at| self.string(at).to_bytes())
                .collect()
        })
    }
}

/// Where `execvp` looks when the environment has no `PATH` (glibc's default).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// How a supervised command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signalled(i32),
    /// It could not be started (the reason is on its stderr).
    NotStarted,
}

/// Runs `command` under supervision, with `stdio` as its stdin, stdout and stderr, until it ends, or until
/// [`STOP_ALL`] or the death of `expected_parent` (then its tree is killed and it counts as killed by SIGKILL).
/// An error means the supervision could not be set up or the program could not be started; then `stdio` is
/// left to the caller (to say why on the command's stderr). Once the command started, the supervisor holds no
/// copy of them: the engine reads a command's stdout until its end, which then comes when the command's tree
/// closes it rather than when the supervisor exits after reaping (a chain's nodes waited about 90 µs each).
pub fn supervise(
    expected_parent: u32,
    command: &Program,
    stdio: &mut Option<[OwnedFd; 3]>,
) -> io::Result<Ended> {
    let watched = watched_signals();
    become_supervisor(&watched)?;
    // SAFETY: plain libc calls with no pointers; no memory is shared with other threads (there are none).
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, STOP_ALL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The parent may have died between starting us and the prctl above: then we were re-parented.
        if libc::getppid() as u32 != expected_parent {
            return Err(io::Error::other(
                "the engine exited before the command started",
            ));
        }
    }
    let Some(descriptors) = stdio.as_ref() else {
        return Err(io::Error::other(
            "no stdin, stdout and stderr for the command",
        ));
    };
    let child = start(command, descriptors.each_ref().map(AsRawFd::as_raw_fd))?;
    *stdio = None;
    let mut ended: Option<libc::c_int> = None;
    loop {
        // SAFETY: sigtimedwait writes only into `info`, which lives on this stack frame.
        let signal = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigtimedwait(&watched, &mut info, &REAP_BACKSTOP)
        };
        reap_ended(child, &mut ended);
        if ended.is_some() {
            // The command is over; anything it left running would be an orphan.
            kill_tree(child, &mut ended);
            break;
        }
        // SAFETY: getppid has no preconditions.
        let parent_alive = unsafe { libc::getppid() as u32 == expected_parent };
        if signal == STOP_ALL || !parent_alive {
            kill_tree(child, &mut ended);
            return Ok(Ended::Signalled(libc::SIGKILL));
        }
        if FORWARDED.contains(&signal) {
            // SAFETY: killpg only sends a signal, to the child's own group (process_group(0) above).
            unsafe {
                libc::killpg(child, signal);
            }
        }
    }
    Ok(match ended {
        Some(status) if libc::WIFSIGNALED(status) => Ended::Signalled(libc::WTERMSIG(status)),
        Some(status) if libc::WIFEXITED(status) => Ended::Exited(libc::WEXITSTATUS(status)),
        _ => Ended::Exited(1),
    })
}

/// The signals a supervisor keeps blocked and takes with `sigtimedwait`: the forwarded stop signals,
/// [`STOP_ALL`] and `SIGCHLD`.
pub(crate) fn watched_signals() -> libc::sigset_t {
    signal_set(&[&FORWARDED[..], &[STOP_ALL, libc::SIGCHLD]].concat())
}

thread_local! {
    /// Whether this thread has made itself a supervisor ([`become_supervisor`]).
    static SUPERVISING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What stays true for every command a supervisor serves, done for the first: the watched signals blocked in
/// this thread, before anything can send them, so none is lost before the wait loop takes them in order;
/// SIGCHLD at its default, since ignored children would be reaped by the kernel and their status lost; and a
/// child subreaper. Done again for each command, this was three system calls of the 36 a command cost.
fn become_supervisor(watched: &libc::sigset_t) -> io::Result<()> {
    if SUPERVISING.get() {
        return Ok(());
    }
    change_thread_mask(libc::SIG_BLOCK, watched)?;
    // SAFETY: plain libc calls with no pointers.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    SUPERVISING.set(true);
    Ok(())
}

/// Starts `command` in a process group of its own with no signal blocked, SIGPIPE at its default and `stdio`
/// (descriptors above 2, or 0, 1 and 2 in their own places) as its stdin, stdout and stderr, in a child that
/// shares this process's memory until it execs ([`spawn`]). Exec errors come back from the call itself.
fn start(command: &Program, stdio: [RawFd; 3]) -> io::Result<libc::pid_t> {
    let executable = find_executable(command)?;
    let argv = command.argv();
    let envp = command.envp();
    let run = |executable: &CStr, argv: &[*const libc::c_char]| {
        spawn(executable, argv, &envp, command.cwd(), stdio)
    };
    match run(&executable, &argv) {
        // A file without `#!` that the kernel cannot run: `execvp` hands it to the shell, and so do we.
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let shell = c"/bin/sh";
            let with_shell: Vec<*const libc::c_char> = [shell.as_ptr(), executable.as_ptr()]
                .into_iter()
                .chain(argv.into_iter().skip(1))
                .collect();
            run(shell, &with_shell)
        }
        other => other,
    }
}

/// Bytes of the stack [`spawn`]'s child runs on until it execs: it calls a handful of libc functions, with
/// frames of a few hundred bytes.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// What [`spawn`]'s child needs, all prepared by the parent: the child allocates nothing and reads nothing
/// else.
struct ChildSetup {
    executable: *const libc::c_char,
    /// Put in place as the command's descriptors 0, 1 and 2, where the supervisor's own stay as they are.
    stdio: [RawFd; 3],
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// The mask the command starts with: no signal blocked.
    unblocked: libc::sigset_t,
    /// The errno of the step that failed, written by the child (which shares our memory) before it exits.
    error: libc::c_int,
}

/// Starts `executable` with `args` and `env`, in `cwd`, in a new process group, by `clone(CLONE_VM |
/// CLONE_VFORK)`: the child borrows this process's memory until it execs, so no page table is copied and no
/// copy-on-write fault is taken (a `fork` with a `pre_exec` hook, the only way std's `Command` resets a
/// blocked mask, cost about 0.15 ms a node), and we sleep until it has. This is what glibc's `posix_spawn`
/// does, less its child's walk over all 64 signals (128 `rt_sigaction` calls a command, which `perf trace`
/// counted per node): this process installs no handler a command could inherit (SIGCHLD is at its default,
/// the runtime's SIGSEGV and SIGBUS handlers are for faults only, and `exec` resets handlers anyway), so
/// only SIGPIPE, which Rust's runtime ignores, needs its default back.
fn spawn(
    executable: &CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    cwd: &CStr,
    stdio: [RawFd; 3],
) -> io::Result<libc::pid_t> {
    let mut setup = ChildSetup {
        executable: executable.as_ptr(),
        stdio,
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd.as_ptr(),
        unblocked: signal_set(&[]),
        error: 0,
    };
    CHILD_STACK.with_borrow_mut(|stack| clone_child(stack, &mut setup))
}

thread_local! {
    /// The stack [`spawn`]'s children run on, one after another: allocated once, so that a command costs no
    /// allocation of 64 KiB and no fault on fresh pages of it. Left uninitialised: the child writes its frames
    /// before it reads them, and zeroing it would sit between a request and its command's start.
    static CHILD_STACK: RefCell<Box<[MaybeUninit<u8>]>> =
        RefCell::new(Box::new_uninit_slice(CHILD_STACK_BYTES));
}

/// Runs [`start_child`] with `setup` on `stack` in a child that shares this process's memory until it execs;
/// its pid.
fn clone_child(stack: &mut [MaybeUninit<u8>], setup: &mut ChildSetup) -> io::Result<libc::pid_t> {
    // The stack grows down from its end, which the ABI wants 16-byte aligned.
    let top = stack.as_mut_ptr_range().end as usize & !15;
    // Every signal blocked across the clone, so that none reaches the child before it has reset what it
    // inherits; the child unblocks them just before it execs.
    let previous = change_thread_mask(libc::SIG_SETMASK, &every_signal())?;
    // SAFETY: the child runs `start_child` on `stack`, which outlives it (CLONE_VFORK: clone returns once the
    // child has exec'd or exited), and reads only `setup` and what its pointers name, which outlive the
    // call too. SIGCHLD as its exit signal makes it an ordinary child for waitpid.
    let pid = unsafe {
        libc::clone(
            start_child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_mut(setup).cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    // Setting back a mask this thread had just had cannot fail.
    let _ = change_thread_mask(libc::SIG_SETMASK, &previous);
    if pid < 0 {
        return Err(clone_error);
    }
    if setup.error != 0 {
        // The child exited without exec'ing: reap it, and say why.
        let mut status = 0;
        // SAFETY: waitpid writes only `status`.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(setup.error));
    }
    Ok(pid)
}

/// The child of [`spawn`], on its own stack in its parent's memory: only async-signal-safe calls, no
/// allocation, no unwinding. Its own copy of the signal dispositions (no CLONE_SIGHAND) is what it changes.
extern "C" fn start_child(setup: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `spawn` passes a live `ChildSetup` and sleeps until this child has exec'd or exited.
    let setup = unsafe { &mut *setup.cast::<ChildSetup>() };
    // SAFETY: plain libc calls on the NUL-terminated strings and arrays `spawn` prepared; errno is the
    // parent thread's (shared memory), read here before anything else can change it.
    unsafe {
        // A descriptor above 2 is copied into place without its close-on-exec flag; one already in place
        // has the flag cleared.
        let in_place = (0..3).all(|target| {
            let fd = setup.stdio[target as usize];
            if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(fd, target) == target
            }
        });
        let ok = in_place
            && libc::setpgid(0, 0) == 0
            && libc::chdir(setup.cwd) == 0
            && libc::signal(libc::SIGPIPE, libc::SIG_DFL) != libc::SIG_ERR
            && libc::sigprocmask(libc::SIG_SETMASK, &setup.unblocked, std::ptr::null_mut()) == 0;
        if ok {
            libc::execve(setup.executable, setup.argv, setup.envp);
        }
        setup.error = (*libc::__errno_location()).max(1);
        libc::_exit(127)
    }
}

/// The file `command` names: its program when that holds a `/`, else the first executable file of that name
/// in a directory of the `PATH` in its environment (an empty entry, or a relative one, taken from its working
/// directory, where it will run).
fn find_executable(command: &Program) -> io::Result<Cow<'_, CStr>> {
    let program = command.program();
    let name = program.to_bytes();
    if name.contains(&b'/') {
        return Ok(Cow::Borrowed(program));
    }
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "an empty program name",
        ));
    }
    let path = command.var_value(b"PATH").unwrap_or(DEFAULT_PATH);
    let cwd = Path::new(OsStr::from_bytes(command.cwd().to_bytes()));
    for dir in path.split(|&byte| byte == b':') {
        let dir = Path::new(OsStr::from_bytes(if dir.is_empty() { b"." } else { dir }));
        let candidate = cwd.join(dir).join(OsStr::from_bytes(name));
        let Ok(candidate) = CString::new(candidate.into_os_string().into_vec()) else {
            continue;
        };
        // SAFETY: access only reads the NUL-terminated name.
        let executable = unsafe { libc::access(candidate.as_ptr(), libc::X_OK) } == 0;
        if executable && Path::new(OsStr::from_bytes(candidate.to_bytes())).is_file() {
            return Ok(Cow::Owned(candidate));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "{} not found on PATH {}",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(path)
        ),
    ))
}

fn nul_inside() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "a NUL byte in a program name, argument, environment variable or directory",
    )
}

/// Blocks (`SIG_BLOCK`), unblocks (`SIG_UNBLOCK`) or sets (`SIG_SETMASK`) `signals` in the calling thread;
/// returns the mask it had.
fn change_thread_mask(how: libc::c_int, signals: &libc::sigset_t) -> io::Result<libc::sigset_t> {
    let mut previous = signal_set(&[]);
    // SAFETY: pthread_sigmask reads `signals`, writes `previous` and changes only this thread's mask.
    check(unsafe { libc::pthread_sigmask(how, signals, &mut previous) })?;
    Ok(previous)
}

fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}

fn every_signal() -> libc::sigset_t {
    let mut set = signal_set(&[]);
    // SAFETY: sigfillset writes the set, which signal_set initialised.
    unsafe { libc::sigfillset(&mut set) };
    set
}

fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset touches it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Reaps every child that has ended without waiting; records the program's status when it is among them.
fn reap_ended(child: libc::pid_t, ended: &mut Option<libc::c_int>) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == child && ended.is_none() {
            *ended = Some(status);
        }
    }
}

/// SIGKILLs the program's group and every process below the supervisor, round after round, until it has no child
/// left. Each round kills the direct children; what they had started is re-parented here (we are a subreaper)
/// and killed in the next round, so a process that forks while we kill cannot escape.
fn kill_tree(child: libc::pid_t, ended: &mut Option<libc::c_int>) {
    loop {
        // SAFETY: kill and killpg only send signals; waitpid writes only `status`.
        unsafe {
            // No child at all means no descendant alive (a live one's chain of parents reaches one of our
            // children): the usual case of a command that left nothing behind, without scanning /proc.
            let mut status = 0;
            let reaped = libc::waitpid(-1, &mut status, libc::WNOHANG);
            if reaped == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
                return;
            }
            if reaped == child && ended.is_none() {
                *ended = Some(status);
            }
            // While the leader is unreaped its pid, and so the group id, cannot be reused by another process.
            if ended.is_none() {
                libc::killpg(child, libc::SIGKILL);
            }
            for pid in children_of(libc::getpid()) {
                libc::kill(pid, libc::SIGKILL);
            }
            let mut status = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == -1 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // ECHILD: nothing is left below us.
                return;
            }
            if pid == child && ended.is_none() {
                *ended = Some(status);
            }
        }
    }
}

/// The processes whose parent is `parent`, from `/proc/*/stat`.
pub(crate) fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| parent_of(pid) == Some(parent))
        .collect()
}

/// A process's parent pid. The command name in `stat` is in parentheses and may hold anything, `)` included,
/// so the fields are read after the last `)`.
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_of_a_process_is_read_past_its_name() {
        // SAFETY: getpid and getppid have no preconditions.
        let (me, parent) = unsafe { (libc::getpid(), libc::getppid()) };
        assert_eq!(parent_of(me), Some(parent));
        assert_eq!(parent_of(-1), None);
    }

    /// Starts `program` (an `sh -c` script, or a file) in `dir` with `env` and waits for it; its exit code.
    fn run(program: &str, args: &[&str], env: &[(&str, &str)], dir: &Path) -> io::Result<i32> {
        let mut command = Program::new(program.as_bytes(), dir.as_os_str().as_bytes(), 0)?;
        for arg in args {
            command.arg(arg.as_bytes())?;
        }
        for (name, value) in env {
            command.var(format!("{name}={value}").as_bytes())?;
        }
        let pid = start(&command, [0, 1, 2])?;
        let mut status = 0;
        // SAFETY: waitpid writes only `status`.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            return Err(io::Error::last_os_error());
        }
        Ok(libc::WEXITSTATUS(status))
    }

    #[test]
    fn a_program_is_looked_up_on_the_path_of_its_own_environment() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin)?;
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\necho \"$1\" > found\n")?;
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let path = format!("/usr/bin:/bin:{}", bin.display());
        assert_eq!(run("tool", &["here"], &[("PATH", &path)], dir.path())?, 0);
        assert_eq!(std::fs::read_to_string(dir.path().join("found"))?, "here\n");
        // A relative PATH entry is taken from the command's working directory.
        assert_eq!(
            run("tool", &["relative"], &[("PATH", "bin")], dir.path())?,
            0
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("found"))?,
            "relative\n"
        );
        let missing = run("tool", &[], &[("PATH", "/usr/bin:/bin")], dir.path());
        assert_eq!(
            missing.map_err(|e| (e.kind(), e.to_string())),
            Err((
                io::ErrorKind::NotFound,
                "tool not found on PATH /usr/bin:/bin".to_owned()
            ))
        );
        let nul = run("sh", &["-c", "true\0"], &[], dir.path());
        assert_eq!(
            nul.map_err(|e| (e.kind(), e.to_string())),
            Err((
                io::ErrorKind::InvalidInput,
                "a NUL byte in a program name, argument, environment variable or directory"
                    .to_owned()
            ))
        );
        Ok(())
    }

    #[test]
    fn a_command_gets_the_descriptors_it_is_given_as_its_stdin_stdout_and_stderr() -> io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("in"), "given\n")?;
        // Opened as the engine's are, close-on-exec: the child puts them in place without the flag.
        let stdin = std::fs::File::open(dir.path().join("in"))?;
        let stdout = std::fs::File::create(dir.path().join("out"))?;
        let stderr = std::fs::File::create(dir.path().join("err"))?;
        let mut command = Program::new(b"/bin/sh", dir.path().as_os_str().as_bytes(), 0)?;
        command.arg(b"-c")?;
        command.arg(b"cat; echo out; echo err >&2")?;
        let pid = start(
            &command,
            [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()],
        )?;
        let mut status = 0;
        // SAFETY: waitpid writes only `status`.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            return Err(io::Error::last_os_error());
        }
        assert_eq!(libc::WEXITSTATUS(status), 0);
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name));
        assert_eq!(read("out")?, "given\nout\n");
        assert_eq!(read("err")?, "err\n");
        Ok(())
    }

    #[test]
    fn a_file_without_an_interpreter_line_runs_under_the_shell() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("plain");
        std::fs::write(&script, "echo \"$1\" > ran\n")?;
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let program = script.to_string_lossy().into_owned();
        assert_eq!(run(&program, &["yes"], &[], dir.path())?, 0);
        assert_eq!(std::fs::read_to_string(dir.path().join("ran"))?, "yes\n");
        Ok(())
    }

    #[test]
    fn a_command_starts_in_a_group_of_its_own_with_no_signal_blocked() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        // Blocked here, in the thread that starts the commands, as the supervisor blocks its signals.
        let blocked = signal_set(&[libc::SIGTERM, libc::SIGINT]);
        change_thread_mask(libc::SIG_BLOCK, &blocked)?;
        // Field 5 of /proc/PID/stat is the process group (the name, field 2, is `sh`: no spaces).
        let group = run(
            "/bin/sh",
            &["-c", "set -- $(cat /proc/$$/stat); echo \"$$ $5\" > group"],
            &[],
            dir.path(),
        );
        // grep itself, not a shell (dash clears its mask when it starts): exit 0 when nothing is blocked.
        let mask = run(
            "grep",
            &["-q", "^SigBlk:\t0000000000000000$", "/proc/self/status"],
            &[("PATH", "/usr/bin:/bin")],
            dir.path(),
        );
        change_thread_mask(libc::SIG_UNBLOCK, &blocked)?;
        assert_eq!(group?, 0);
        assert_eq!(mask?, 0, "the command started with signals blocked");
        let group = std::fs::read_to_string(dir.path().join("group"))?;
        let ids: Vec<&str> = group.split_whitespace().collect();
        assert_eq!(ids.len(), 2, "{group}");
        assert_eq!(ids[0], ids[1], "its process group is its own pid");
        Ok(())
    }

    /// The ignored signals in a `/proc/PID/status`, as a bit set (signal n at bit n - 1).
    fn ignored_signals(status: &str) -> Option<u64> {
        let line = status
            .lines()
            .find_map(|line| line.strip_prefix("SigIgn:"))?;
        u64::from_str_radix(line.trim(), 16).ok()
    }

    #[test]
    fn a_command_starts_with_sigpipe_at_its_default_and_a_failed_start_says_why() -> io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        // The test harness ignores SIGPIPE, as Rust's runtime does in the supervisor: what the child undoes.
        let ours = ignored_signals(&std::fs::read_to_string("/proc/self/status")?);
        assert_eq!(ours.map(|set| set & sigpipe), Some(sigpipe));
        // A non-interactive shell keeps the dispositions it was started with.
        let started = run(
            "/bin/sh",
            &["-c", "cat /proc/$$/status > status"],
            &[],
            dir.path(),
        );
        assert_eq!(started?, 0);
        let theirs = ignored_signals(&std::fs::read_to_string(dir.path().join("status"))?);
        assert_eq!(theirs.map(|set| set & sigpipe), Some(0), "SIGPIPE ignored");
        // A step that fails before the exec (here the working directory) comes back as the call's error.
        let gone = run("/bin/true", &[], &[], &dir.path().join("gone"));
        assert_eq!(gone.map_err(|e| e.kind()), Err(io::ErrorKind::NotFound));
        Ok(())
    }

    #[test]
    fn a_child_is_found_among_its_parents_children() -> io::Result<()> {
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn()?;
        // SAFETY: getpid has no preconditions.
        let found = children_of(unsafe { libc::getpid() });
        sleeper.kill()?;
        sleeper.wait()?;
        assert!(found.contains(&(sleeper.id() as libc::pid_t)), "{found:?}");
        Ok(())
    }
}
