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
