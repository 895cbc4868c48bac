//! File content hashes reused while a file's stat (size, mtime, ctime, inode) is unchanged.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    inode: u64,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            inode: meta.ino(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Known {
    stamp: Stamp,
    hash: String,
}

/// A persistent map path → (stat stamp, blake3), loaded with one read and saved atomically.
#[derive(Debug)]
pub struct StatCache {
    file: PathBuf,
    known: Mutex<HashMap<PathBuf, Known>>,
    dirty: Mutex<bool>,
}

impl StatCache {
    /// Loads the cache file; a missing or unreadable one starts empty (it is only an accelerator).
    pub fn load(file: &Path) -> StatCache {
        let known = fs::read(file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<HashMap<PathBuf, Known>>(&bytes).ok())
            .unwrap_or_default();
        StatCache {
            file: file.to_owned(),
            known: Mutex::new(known),
            dirty: Mutex::new(false),
        }
    }

    /// blake3 of the file's content, re-read only when its stat changed.
    pub fn hash(&self, path: &Path) -> io::Result<String> {
        let meta = fs::metadata(path)?;
        let stamp = Stamp::of(&meta);
        if let Ok(known) = self.known.lock()
            && let Some(entry) = known.get(path)
            && entry.stamp == stamp
        {
            return Ok(entry.hash.clone());
        }
        let hash = hash_file(path)?;
        if let Ok(mut known) = self.known.lock() {
            known.insert(
                path.to_owned(),
                Known {
                    stamp,
                    hash: hash.clone(),
                },
            );
        }
        if let Ok(mut dirty) = self.dirty.lock() {
            *dirty = true;
        }
        Ok(hash)
    }

    /// Writes the cache back if anything was hashed since it was loaded.
    pub fn save(&self) -> io::Result<()> {
        let dirty = self.dirty.lock().map(|d| *d).unwrap_or(false);
        if !dirty {
            return Ok(());
        }
        let bytes = {
            let known = self
                .known
                .lock()
                .map_err(|_| io::Error::other("stat cache lock poisoned"))?;
            serde_json::to_vec(&*known).map_err(io::Error::other)?
        };
        fracflow_record::atomic_write(&self.file, &bytes)?;
        if let Ok(mut dirty) = self.dirty.lock() {
            *dirty = false;
        }
        Ok(())
    }
}

/// blake3 of a file's content as hex, streamed.
pub fn hash_file(path: &Path) -> io::Result<String> {
    hash_and_size(path).map(|(hash, _)| hash.to_string())
}

/// blake3 of a file's content, and its size: the bytes hashed, so the two always describe the same content,
/// and no `stat` is needed after the read.
pub fn hash_and_size(path: &Path) -> io::Result<(fracflow_record::Digest, u64)> {
    /// A reader that counts what passes through it.
    struct Counted<R> {
        inner: R,
        bytes: u64,
    }
    impl<R: Read> Read for Counted<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let read = self.inner.read(buf)?;
            self.bytes += read as u64;
            Ok(read)
        }
    }
    let mut hasher = blake3::Hasher::new();
    let mut file = Counted {
        inner: File::open(path)?,
        bytes: 0,
    };
    hasher.update_reader(&mut file)?;
    Ok((hasher.finalize().into(), file.bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rehashes_after_a_change_and_survives_reload() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("input.txt");
        fs::write(&file, "one")?;
        let cache = StatCache::load(&dir.path().join("stat.json"));
        let first = cache.hash(&file)?;
        fs::write(&file, "two, longer")?;
        let second = cache.hash(&file)?;
        assert_ne!(first, second);
        cache.save()?;
        let reloaded = StatCache::load(&dir.path().join("stat.json"));
        assert_eq!(reloaded.hash(&file)?, second);
        Ok(())
    }
}
