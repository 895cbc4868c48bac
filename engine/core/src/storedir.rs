//! Stats of the cache's entry and blob files through a handle on their store's directory, opened once. A no-op
//! stats an entry and a blob per node, and resolving every component of their absolute paths
//! (`<project>/.fracflow/cache/entries/ab/<key>.json`) again for each was a tenth of its time, spent in the
//! kernel's path walk; relative to the store, two components are left.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// What a lookup reads of a file's metadata.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileStat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub modified: SystemTime,
    /// The inode's change time, in nanoseconds since the epoch.
    pub changed_ns: i64,
    pub is_file: bool,
}

/// One of the cache's sharded stores (`entries/`, `blobs/`).
#[derive(Debug)]
pub(crate) struct StoreDir {
    path: PathBuf,
    /// Opened on the first stat; `None` when it cannot be (the absolute path is used then).
    handle: OnceLock<Option<OwnedFd>>,
}

impl StoreDir {
    pub fn new(path: PathBuf) -> StoreDir {
        StoreDir {
            path,
            handle: OnceLock::new(),
        }
    }

    /// The metadata of `<store>/<head>/<name><suffix>`, links followed as `fs::metadata` follows them; `None`
    /// when it does not exist or cannot be read.
    pub fn stat(&self, head: &str, name: &str, suffix: &str) -> Option<FileStat> {
        let mut relative = String::with_capacity(head.len() + name.len() + suffix.len() + 1);
        for part in [head, "/", name, suffix] {
            relative.push_str(part);
        }
        let handle = self.handle.get_or_init(|| {
            rustix::fs::open(
                &self.path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()
        });
        let stat = match handle {
            Some(store) => rustix::fs::statat(store, relative.as_str(), AtFlags::empty()),
            None => rustix::fs::stat(self.path.join(&relative)),
        }
        .ok()?;
        let modified = u64::try_from(stat.st_mtime).map_or(SystemTime::UNIX_EPOCH, |seconds| {
            SystemTime::UNIX_EPOCH + Duration::new(seconds, stat.st_mtime_nsec as u32)
        });
        Some(FileStat {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
            size: u64::try_from(stat.st_size).unwrap_or(0),
            modified,
            changed_ns: (stat.st_ctime as i64)
                .saturating_mul(1_000_000_000)
                .saturating_add(stat.st_ctime_nsec as i64),
            is_file: FileType::from_raw_mode(stat.st_mode as _) == FileType::RegularFile,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_stat_through_the_store_agrees_with_the_file_system() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("ab"))?;
        std::fs::write(dir.path().join("ab/cdef.json"), b"12345")?;
        let store = StoreDir::new(dir.path().to_owned());
        let stat = store
            .stat("ab", "cdef", ".json")
            .ok_or_else(|| std::io::Error::other("no stat"))?;
        let metadata = std::fs::metadata(dir.path().join("ab/cdef.json"))?;
        assert_eq!(
            (stat.dev, stat.ino, stat.size, stat.is_file),
            (metadata.dev(), metadata.ino(), 5, true)
        );
        assert_eq!(stat.modified, metadata.modified()?);
        assert_eq!(
            stat.changed_ns,
            metadata.ctime() * 1_000_000_000 + metadata.ctime_nsec()
        );
        assert!(store.stat("ab", "missing", ".json").is_none());
        assert!(
            store.stat("ab", "", "").is_some_and(|s| !s.is_file),
            "a folder is not a file"
        );
        Ok(())
    }
}
