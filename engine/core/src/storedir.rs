//! Stats of the cache's entry and blob files through a handle on their store's directory, opened once. A no-op
//! stats an entry and a blob per node, and resolving every component of their absolute paths
//! (`<project>/.fracflow/cache/entries/ab/<key>.json`) again for each was a tenth of its time, spent in the
//! kernel's path walk; relative to the store, two components are left. Whether a blob exists is answered from a
//! listing of its shard once a run asks about that shard again, for shards of up to 1 024 files
//! ([`StoreDir::holds_digest`]): a 10 000-node no-op checks 10 000 blobs in 256 shards. A listing keeps the
//! digests its files are named by, not their names as text, which were 9 MB of a 100 000-node no-op.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use fracflow_record::Digest;
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
    /// Per shard: asked about once (`None`), or the digests its listing's regular files are named by.
    shards: Mutex<HashMap<String, Option<HashSet<Digest>>>>,
}

impl StoreDir {
    pub fn new(path: PathBuf) -> StoreDir {
        StoreDir {
            path,
            handle: OnceLock::new(),
            shards: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the file of `digest`, `<store>/<first two hex digits>/<the other 62>`, is a regular file (links
    /// followed). A digest the shard's listing holds exists: files leave the store only by `cache gc`, which a
    /// run keeps away. Any other is stat'ed, since its file may have arrived after the listing (or be a link).
    pub fn holds_digest(&self, digest: &Digest) -> bool {
        let hex = digest.to_hex();
        let (head, name) = hex.split_at(2);
        let listed = {
            let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
            match shards.get_mut(head) {
                None => {
                    shards.insert(head.to_owned(), None);
                    false
                }
                Some(listing) => listing
                    .get_or_insert_with(|| self.listed_digests(head))
                    .contains(digest),
            }
        };
        listed || self.stat(head, name, "").is_some_and(|stat| stat.is_file)
    }

    /// The digests that name regular files of shard `head`; none when it cannot be listed, or when it holds
    /// more than `MAX_LISTED` entries (a large shared cache, where stats of the few blobs a run asks about are
    /// cheaper than its listing, and the listing would hold megabytes).
    fn listed_digests(&self, head: &str) -> HashSet<Digest> {
        let mut digests = HashSet::new();
        let Ok(entries) = std::fs::read_dir(self.path.join(head)) else {
            return digests;
        };
        for (count, entry) in entries.flatten().enumerate() {
            if count >= MAX_LISTED {
                return HashSet::new();
            }
            if entry.file_type().is_ok_and(|t| t.is_file())
                && let Some(digest) = entry
                    .file_name()
                    .to_str()
                    .and_then(|name| digest_named(head, name))
            {
                digests.insert(digest);
            }
        }
        digests
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

/// The digest whose file is `name` in shard `head`, if the two spell one.
fn digest_named(head: &str, name: &str) -> Option<Digest> {
    let mut hex = [0; 64];
    if head.len() != 2 || name.len() != 62 {
        return None;
    }
    hex[..2].copy_from_slice(head.as_bytes());
    hex[2..].copy_from_slice(name.as_bytes());
    std::str::from_utf8(&hex).ok()?.parse().ok()
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
        let digest = |head: &str, n: u32| -> Digest {
            format!("{head}{n:062x}").parse().expect("64 hex digits")
        };
        let path = |dir: &std::path::Path, digest: Digest| {
            let hex = digest.to_hex();
            dir.join(&hex[..2]).join(&hex[2..])
        };
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(path(dir.path(), digest("ab", 3)))?;
        std::fs::write(path(dir.path(), digest("ab", 1)), b"1")?;
        std::fs::write(dir.path().join("ab/not-a-digest"), b"1")?;
        let store = StoreDir::new(dir.path().to_owned());
        // The first question stats; the second lists the shard.
        assert!(store.holds_digest(&digest("ab", 1)));
        assert!(store.holds_digest(&digest("ab", 1)));
        assert_eq!(
            store.listed_digests("ab"),
            HashSet::from_iter([digest("ab", 1)]),
            "the listing holds the one file named by a digest"
        );
        assert!(
            !store.holds_digest(&digest("ab", 3)),
            "a folder is not a file"
        );
        assert!(!store.holds_digest(&digest("ab", 2)));
        // A file that arrived after the listing is found by its stat.
        std::fs::write(path(dir.path(), digest("ab", 2)), b"2")?;
        assert!(store.holds_digest(&digest("ab", 2)));
        assert!(
            !store.holds_digest(&digest("cd", 1)),
            "a missing shard holds nothing"
        );
        assert!(!store.holds_digest(&digest("cd", 1)));
        // A shard too large to list is answered by stats alone.
        std::fs::create_dir_all(dir.path().join("ef"))?;
        for n in 0..=MAX_LISTED as u32 {
            std::fs::write(path(dir.path(), digest("ef", n)), b"")?;
        }
        assert!(store.holds_digest(&digest("ef", 7)) && store.holds_digest(&digest("ef", 7)));
        assert!(store.listed_digests("ef").is_empty(), "not listed");
        Ok(())
    }

    #[test]
    fn only_a_shard_and_a_name_that_spell_a_digest_name_one() {
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(
            digest_named(&hex[..2], &hex[2..]).map(|digest| digest.to_hex().to_string()),
            Some(hex.clone())
        );
        assert!(digest_named(&hex[..2], &hex[2..63]).is_none());
        assert!(digest_named(&hex[..2], &format!("{}0", &hex[2..])).is_none());
        assert!(digest_named(&hex[..2], &hex[2..].to_uppercase()).is_none());
        assert!(digest_named(&hex[..2], &format!("{}g", &hex[2..63])).is_none());
        assert!(
            digest_named(&hex[..3], &hex[3..]).is_none(),
            "a shard is two digits"
        );
    }
}
