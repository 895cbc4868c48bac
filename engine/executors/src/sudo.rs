//! Root for a real testbed's tools, asked for at most once per run and kept fresh for its whole length, as
//! the artifact's runner does (`docs/frac.md` §6.1): `sudo -n true` first; when that needs a password, one
//! `sudo -v` on the terminal (refused when the profile's sudo says `-n`: that testbed must never prompt); then
//! `sudo -n -v` every refresh period until the run ends, so an hour-long sweep never stops at a prompt.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running refresher; dropping it stops the refreshes.
#[derive(Debug)]
pub struct SudoKeeper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    refreshes: Arc<AtomicU64>,
}

/// The words of a sudo prefix (`sudo -n` → `["sudo", "-n"]`); empty when no sudo is needed.
pub fn words(sudo: &str) -> Vec<String> {
    sudo.split_whitespace().map(str::to_owned).collect()
}

fn never_prompts(words: &[String]) -> bool {
    words.iter().any(|w| w == "-n" || w == "--non-interactive")
}

/// `sudo [its options] -n ARGS`: runs without ever prompting.
fn quiet(words: &[String], args: &[&str]) -> Command {
    let mut command = Command::new(&words[0]);
    command.args(&words[1..]);
    if !never_prompts(words) {
        command.arg("-n");
    }
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

impl SudoKeeper {
    /// Makes sure `sudo` works now (asking once when it may) and keeps it fresh every `refresh`. `None` when
    /// the profile needs no sudo (empty: already root).
    pub fn start(sudo: &str, refresh: Duration) -> Result<Option<SudoKeeper>, String> {
        let words = words(sudo);
        if words.is_empty() {
            return Ok(None);
        }
        let works = quiet(&words, &["true"])
            .status()
            .map_err(|e| format!("cannot run `{sudo}`: {e}"))?
            .success();
        if !works {
            if never_prompts(&words) {
                return Err(format!(
                    "`{sudo} true` needs a password, and this testbed's sudo (`{sudo}`) must never prompt: \
                     allow the commands without a password (sudoers NOPASSWD) or run `sudo -v` just before"
                ));
            }
            // The one prompt of the run, on the engine's terminal.
            let asked = Command::new(&words[0])
                .args(&words[1..])
                .arg("-v")
                .stdin(Stdio::inherit())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .status()
                .map_err(|e| format!("cannot run `{sudo} -v`: {e}"))?;
            if !asked.success() {
                return Err(format!(
                    "`{sudo} -v` failed ({asked}): root is needed for this testbed's tools"
                ));
            }
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let refreshes = Arc::new(AtomicU64::new(0));
        let thread = {
            let stop = Arc::clone(&stop);
            let refreshes = Arc::clone(&refreshes);
            std::thread::Builder::new()
                .name("sudo-keepalive".to_owned())
                .spawn(move || keep_fresh(&words, refresh, &stop, &refreshes))
                .map_err(|e| format!("cannot start the sudo keep-alive: {e}"))?
        };
        Ok(Some(SudoKeeper {
            stop,
            thread: Some(thread),
            refreshes,
        }))
    }

    /// How many refreshes ran so far.
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }
}

fn keep_fresh(
    words: &[String],
    refresh: Duration,
    stop: &(Mutex<bool>, Condvar),
    refreshes: &AtomicU64,
) {
    let (stopped, wake) = stop;
    let Ok(mut guard) = stopped.lock() else {
        return;
    };
    loop {
        let Ok((next, _)) = wake.wait_timeout_while(guard, refresh, |stopped| !*stopped) else {
            return;
        };
        guard = next;
        if *guard {
            return;
        }
        // A failed refresh is not an error here: the next sudo command says why, where it matters.
        let _ = quiet(words, &["-v"]).status();
        refreshes.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for SudoKeeper {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        if let Ok(mut guard) = stopped.lock() {
            *guard = true;
        }
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fake sudo: `-n …` succeeds once `-v` ran (a fresh timestamp), and every call is recorded.
    fn fake_sudo(dir: &std::path::Path) -> String {
        let path = dir.join("sudo");
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"$*\" >> {dir}/calls\ncase \"$1\" in\n  -n) [ -e {dir}/fresh ] ;;\n  \
                 -v) touch {dir}/fresh ;;\n  *) exit 2 ;;\nesac\n",
                dir = dir.display()
            ),
        )
        .expect("write fake sudo");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.display().to_string()
    }

    fn calls(dir: &std::path::Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn asks_once_then_refreshes_until_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sudo = fake_sudo(dir.path());
        let keeper = SudoKeeper::start(&sudo, Duration::from_millis(20))
            .expect("sudo")
            .expect("a keeper");
        // Bounded: the refresher runs every 20 ms; 10 s is far beyond what two refreshes need.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while keeper.refreshes() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(keeper);
        let seen = calls(dir.path());
        assert_eq!(seen[..2], ["-n true", "-v"], "{seen:?}");
        assert!(seen[2..].len() >= 2, "{seen:?}");
        assert!(seen[2..].iter().all(|c| c == "-n -v"), "{seen:?}");
        let after_drop = seen.len();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            calls(dir.path()).len(),
            after_drop,
            "no refresh after the run"
        );
    }

    #[test]
    fn a_never_prompting_sudo_is_refused_cleanly_when_a_password_is_needed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sudo = format!("{} -n", fake_sudo(dir.path()));
        let error = SudoKeeper::start(&sudo, Duration::from_secs(60)).expect_err("refused");
        assert!(error.contains("must never prompt"), "{error}");
        assert_eq!(calls(dir.path()), ["-n true"], "it never asked");
    }

    #[test]
    fn no_sudo_is_needed_as_root() {
        assert!(
            SudoKeeper::start("  ", Duration::from_secs(60))
                .expect("ok")
                .is_none()
        );
    }
}
