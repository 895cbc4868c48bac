//! One exclusive lock per testbed, so two runs never drive the same device at once.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A held testbed lock; released when dropped or when the process dies (flock).
#[derive(Debug)]
pub struct TestbedLock {
    _file: File,
    path: PathBuf,
}

/// Who a testbed is exclusive to, which decides the lock's name.
#[derive(Debug, Clone, Copy)]
pub enum LockScope<'a> {
    /// A real board: one run at a time on this machine, whatever project it comes from.
    Machine,
    /// A testbed whose device each run starts for itself (the emulated one): only runs of the project at this
    /// root exclude each other, since they share its `results/` and `latest` links.
    Project(&'a Path),
}

/// The lock name a run on `testbed` takes: the testbed's name, made per project by a hash of the project's
/// canonical root (so a symlinked checkout and its target share one lock).
pub fn lock_name(testbed: &str, scope: LockScope<'_>) -> String {
    match scope {
        LockScope::Machine => testbed.to_owned(),
        LockScope::Project(root) => {
            let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
            let tag = blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex();
            format!("{testbed}-project-{}", &tag[..12])
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("testbed `{testbed}` is in use by pid {holder} ({command}); lock file {path}")]
    Held {
        testbed: String,
        holder: String,
        command: String,
        path: PathBuf,
    },
    #[error("cannot open the testbed lock {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

impl TestbedLock {
    /// Takes `<dir>/fracflow-testbed-<name>.lock` without waiting, recording our pid and command in it.
    pub fn acquire(dir: &Path, testbed: &str, command: &str) -> Result<TestbedLock, LockError> {
        let path = dir.join(format!("fracflow-testbed-{testbed}.lock"));
        let io_error = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(dir).map_err(io_error)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let text = fs::read_to_string(&path).unwrap_or_default();
                let mut lines = text.lines();
                return Err(LockError::Held {
                    testbed: testbed.to_owned(),
                    holder: lines.next().unwrap_or("unknown").to_owned(),
                    command: lines.next().unwrap_or("unknown command").to_owned(),
                    path,
                });
            }
            Err(fs::TryLockError::Error(source)) => return Err(io_error(source)),
        }
        file.set_len(0).map_err(io_error)?;
        writeln!(file, "{}\n{command}", std::process::id()).map_err(io_error)?;
        Ok(TestbedLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_wide_lock_is_named_after_the_testbed() {
        assert_eq!(lock_name("u280", LockScope::Machine), "u280");
    }

    #[test]
    fn project_locks_differ_per_project_and_follow_symlinks() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        fs::create_dir_all(&one)?;
        fs::create_dir_all(&two)?;
        let link = dir.path().join("link-to-one");
        std::os::unix::fs::symlink(&one, &link)?;

        let name = lock_name("emulated", LockScope::Project(&one));
        assert!(name.starts_with("emulated-project-"), "{name}");
        assert_eq!(name.len(), "emulated-project-".len() + 12, "{name}");
        assert_ne!(name, lock_name("emulated", LockScope::Project(&two)));
        assert_eq!(name, lock_name("emulated", LockScope::Project(&link)));
        Ok(())
    }

    #[test]
    fn a_second_holder_is_refused_naming_the_first() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let held = TestbedLock::acquire(dir.path(), "emulated", "fracflow run slow")
            .map_err(io::Error::other)?;
        match TestbedLock::acquire(dir.path(), "emulated", "fracflow run quick") {
            Err(LockError::Held {
                holder, command, ..
            }) => {
                assert_eq!(holder, std::process::id().to_string());
                assert_eq!(command, "fracflow run slow");
            }
            other => panic!("expected the lock to be held, got {other:?}"),
        }
        drop(held);
        // Released, though not always at once: another test of this process that spawns a child at that moment
        // (`keylock`'s) gives the child a copy of every open file until it execs, and a lock taken with `flock`
        // lasts while any copy is open (this test failed 10 times in 40 beside them, never alone).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match TestbedLock::acquire(dir.path(), "emulated", "fracflow run quick") {
                Ok(_) => return Ok(()),
                Err(LockError::Held { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(error) => return Err(io::Error::other(error)),
            }
        }
    }
}
