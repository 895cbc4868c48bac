//! Stats of the cache's entry and blob files through a handle on their store's directory, opened once. A no-op
//! stats an entry and a blob per node, and resolving every component of their absolute paths
//! (`<project>/.fracflow/cache/entries/ab/<key>.json`) again for each was a tenth of its time, spent in the
//! kernel's path walk; relative to the store, two components are left. Whether a blob exists is answered from a
//! listing of its shard once a run asks about that shard again, for shards of up to 1 024 files
//! ([`StoreDir::holds_file`]): a 10 000-node no-op checks 10 000 blobs in 256 shards. A listing keeps each
//! name as the bytes its hex spells (31 of them, for the rest of a blake3 hash after its two-digit shard), not
//! as text: the names as strings were 9 MB of a 100 000-node no-op.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// A shard listed for [`StoreDir::holds_file`] holds at most this many names; a larger one is left to stats.
const MAX_LISTED: usize = 1024;

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
    /// Per shard: asked about once (`None`), or the regular files its listing held whose names are hashes.
    shards: Mutex<HashMap<String, Option<HashSet<HashTail>>>>,
}

impl StoreDir {
    pub fn new(path: PathBuf) -> StoreDir {
        StoreDir {
            path,
            handle: OnceLock::new(),
            shards: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `<store>/<head>/<name>` is a regular file (links followed). A name the shard's listing holds
    /// exists: files leave the store only by `cache gc`, which a run keeps away. Any other name is stat'ed,
    /// since it may have arrived after the listing (or be a link).
    pub fn holds_file(&self, head: &str, name: &str) -> bool {
        let listed = {
            let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
            match shards.get_mut(head) {
                None => {
                    shards.insert(head.to_owned(), None);
                    false
                }
                Some(listing) => HashTail::parse(name).is_some_and(|tail| {
                    listing
                        .get_or_insert_with(|| self.regular_files(head))
                        .contains(&tail)
                }),
            }
        };
        listed || self.stat(head, name, "").is_some_and(|stat| stat.is_file)
    }

    /// The names of the regular files in shard `head` that are hashes; none when it cannot be listed, or when
    /// it holds more than `MAX_LISTED` entries (a large shared cache, where stats of the few blobs a run asks
    /// about are cheaper than its listing, and the listing would hold megabytes).
    fn regular_files(&self, head: &str) -> HashSet<HashTail> {
        let mut names = HashSet::new();
        let Ok(entries) = std::fs::read_dir(self.path.join(head)) else {
            return names;
        };
        for (count, entry) in entries.flatten().enumerate() {
            if count >= MAX_LISTED {
                return HashSet::new();
            }
            if entry.file_type().is_ok_and(|t| t.is_file())
                && let Some(name) = entry.file_name().to_str().and_then(HashTail::parse)
            {
                names.insert(name);
            }
        }
        names
    }
}

/// A file name of 62 lowercase hex digits, as the 31 bytes they spell: a blob's name after its shard. Other
/// names are never listed, so a question about one goes to a stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct HashTail([u8; 31]);

impl HashTail {
    fn parse(name: &str) -> Option<HashTail> {
        fn digit(c: u8) -> Option<u8> {
            match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            }
        }
        let name = name.as_bytes();
        if name.len() != 62 {
            return None;
        }
        let mut bytes = [0; 31];
        for (byte, pair) in bytes.iter_mut().zip(name.chunks_exact(2)) {
            *byte = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(HashTail(bytes))
    }
}

impl StoreDir {
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

    #[test]
    fn a_listed_shard_answers_as_a_stat_would() -> std::io::Result<()> {
        let name = |n: u32| format!("{n:062x}");
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("ab").join(name(3)))?;
        std::fs::write(dir.path().join("ab").join(name(1)), b"1")?;
        std::fs::write(dir.path().join("ab/not-a-hash"), b"1")?;
        let store = StoreDir::new(dir.path().to_owned());
        // The first question stats; the second lists the shard.
        assert!(store.holds_file("ab", &name(1)));
        assert!(store.holds_file("ab", &name(1)));
        assert_eq!(
            store.regular_files("ab"),
            HashSet::from_iter(HashTail::parse(&name(1))),
            "the listing holds the one file named by a hash"
        );
        assert!(!store.holds_file("ab", &name(3)), "a folder is not a file");
        assert!(!store.holds_file("ab", &name(2)));
        assert!(
            store.holds_file("ab", "not-a-hash"),
            "a name that is not a hash is stat'ed"
        );
        // A file that arrived after the listing is found by its stat.
        std::fs::write(dir.path().join("ab").join(name(2)), b"2")?;
        assert!(store.holds_file("ab", &name(2)));
        assert!(
            !store.holds_file("cd", &name(1)),
            "a missing shard holds nothing"
        );
        assert!(!store.holds_file("cd", &name(1)));
        // A shard too large to list is answered by stats alone.
        std::fs::create_dir_all(dir.path().join("ef"))?;
        for n in 0..=MAX_LISTED as u32 {
            std::fs::write(dir.path().join("ef").join(name(n)), b"")?;
        }
        assert!(store.holds_file("ef", &name(7)) && store.holds_file("ef", &name(7)));
        assert!(store.regular_files("ef").is_empty(), "not listed");
        Ok(())
    }

    #[test]
    fn only_names_of_62_lowercase_hex_digits_are_hash_tails() {
        let hex = "0123456789abcdef".repeat(4);
        let tail = HashTail::parse(&hex[..62]).map(|tail| tail.0);
        assert_eq!(
            tail.map(|bytes| bytes[..8].to_vec()),
            Some(vec![0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef])
        );
        assert_eq!(tail.map(|bytes| bytes[30]), Some(0xcd));
        assert!(HashTail::parse(&hex[..61]).is_none());
        assert!(HashTail::parse(&hex[..63]).is_none());
        assert!(HashTail::parse(&hex[..62].to_uppercase()).is_none());
        assert!(HashTail::parse(&format!("{}g", &hex[..61])).is_none());
    }
}
