//! Publishing a file so that a kill at any instant leaves the old content or the new, never a torn file.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A name part no other writer uses: pid, a random per-process token and a per-call serial.
///
/// The pid alone is not enough once a directory is shared between machines: engines in containers often have
/// the same small pid, and two engines running one pipeline make the same sequence of calls, so they would
/// write through one temporary file and publish a mixture of both.
pub fn unique_suffix() -> String {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let token = TOKEN.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the operating system's random source.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}.{token:016x}.{serial}", std::process::id())
}

/// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it over `path` and fsyncs the directory:
/// atomic against kills and durable across power loss.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(path, bytes, true)
}

/// Like [`atomic_write`] but without the fsyncs: atomic against kills (a reader sees the old or the new
/// content), not durable across power loss. For views that are rewritten often and rebuilt from durable state.
pub fn atomic_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(path, bytes, false)
}

fn replace(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no file name", path.display()),
        )
    })?;
    // Unique per call and per machine: two threads or two engines sharing the directory may publish the same
    // content-addressed file at once. `create_new`: should a name ever repeat, the write fails instead of
    // sharing a temporary with another writer.
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".{}.part", unique_suffix()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut file = File::options().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        if durable {
            file.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if durable { fsync_dir(dir) } else { Ok(()) }
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Makes a rename or create inside `dir` durable across power loss.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temporary() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("a.json");
        atomic_write(&path, b"one")?;
        atomic_write(&path, b"two")?;
        assert_eq!(fs::read(&path)?, b"two");
        let names: Vec<_> = fs::read_dir(dir.path())?.collect::<Result<_, _>>()?;
        assert_eq!(names.len(), 1, "only the published file remains");
        Ok(())
    }
}

#[cfg(test)]
mod concurrency {
    use super::*;

    #[test]
    fn threads_publishing_the_same_path_at_once_all_succeed() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("entry.json");
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| atomic_write(&path, b"same content")))
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("panicked")))
            })
        })?;
        assert_eq!(fs::read(&path)?, b"same content");
        Ok(())
    }
}
