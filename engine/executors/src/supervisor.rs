//! The supervisor every node command runs under: forked by the spawner (see [`crate::spawner`]) for each
//! command, it makes the command's whole process tree die with the engine, whatever it forks. It
//! - becomes a child subreaper, so every descendant orphaned below it (a compiler driver's `cc1plus`, a
//!   pipeline's members, a process that called `setsid`) is re-parented to it rather than to init;
//! - asks for [`STOP_ALL`] when its parent, the spawner, dies (`PR_SET_PDEATHSIG`) — the spawner dies with the
//!   engine — a signal it can catch, unlike SIGKILL;
//! - starts the program in a process group of its own and waits for it;
//! - forwards the engine's stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) to that group;
//! - on [`STOP_ALL`] (the engine died, or its last escalation step), or once the program has ended, kills the
//!   group and every descendant still alive, reaps them all, and reports how the program ended.

use std::io;
use std::os::unix::process::CommandExt;

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

/// How a supervised command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signalled(i32),
    /// It could not be started (the reason is on its stderr).
    NotStarted,
}

/// Runs `command` under supervision until it ends, or until [`STOP_ALL`] or the death of `expected_parent`
/// (then its tree is killed and it counts as killed by SIGKILL). An error means the supervision could not be
/// set up or the program could not be started.
pub fn supervise(expected_parent: u32, mut command: std::process::Command) -> io::Result<Ended> {
    let watched = signal_set(&[&FORWARDED[..], &[STOP_ALL, libc::SIGCHLD]].concat());
    // SAFETY: plain libc calls on a sigset we own; no memory is shared with other threads (there are none).
    unsafe {
        // Blocked before anything can send them, so none is lost before the wait loop takes them in order.
        check(libc::pthread_sigmask(
            libc::SIG_BLOCK,
            &watched,
            std::ptr::null_mut(),
        ))?;
        // SIGCHLD must not be ignored, or children would be reaped by the kernel and their status lost.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_PDEATHSIG, STOP_ALL, 0, 0, 0) != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The parent may have died between starting us and the prctl above: then we were re-parented.
        if libc::getppid() as u32 != expected_parent {
            return Err(io::Error::other(
                "the engine exited before the command started",
            ));
        }
    }
    command.process_group(0);
    // SAFETY: the hook runs between fork and exec and calls only pthread_sigmask, which is async-signal-safe.
    // The blocked mask is inherited across exec and std does not reset it; a program that started with SIGTERM
    // blocked would ignore it. (This fork is of the supervisor, a small process, not of the engine.)
    unsafe {
        command.pre_exec(|| {
            let none = signal_set(&[]);
            check(libc::pthread_sigmask(
                libc::SIG_SETMASK,
                &none,
                std::ptr::null_mut(),
            ))
        });
    }
    let child = command.spawn()?;
    let child = child.id() as libc::pid_t;
    release_stdio();
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

/// Points the supervisor's own stdin, stdout and stderr at `/dev/null` once the command holds its copies: the
/// engine reads the command's stdout until its end, which then comes when the command's tree closes it
/// rather than when the supervisor exits after reaping (a chain's nodes waited about 90 µs each for that).
/// Nothing is written to them after the command started. Without `/dev/null` they stay as they are.
fn release_stdio() {
    // SAFETY: open, dup2 and close on descriptors this process owns; 0, 1 and 2 stay valid throughout.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            return;
        }
        for target in 0..3 {
            libc::dup2(null, target);
        }
        if null > 2 {
            libc::close(null);
        }
    }
}

fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
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
