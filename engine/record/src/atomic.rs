//! The narrow layer through which the cache and the run journal change files, and the atomic publish built on
//! it.
//!
//! Every create, write, sync, rename, link and removal the cache (`core::cache`, its hit index) and a run's
//! directory (`core::run`: manifest, event journal, views, `latest`) make is a call on a [`Files`] handle. In a
//! run that is the real filesystem ([`Files::real`]); a test hands in its own [`FileOps`] that records each
//! operation, and replays every on-disk state that power loss could leave behind at each point of a workload
//! (`engine/core/tests/crash.rs`). The durability each commit point relies on is therefore stated once, as the
//! [`Publish`] level it asks for, and checked against that model.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

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

/// The file operations that change state. Reads (open, stat, list) go to `std::fs` directly: they change
/// nothing that power loss could undo.
///
/// Paths are whole paths; nothing here is synced unless a `sync_*` call says so, which is the point: which
/// syncs a commit point makes is visible in its code and recorded by a test's implementation.
pub trait FileOps: Send + Sync + fmt::Debug {
    /// Creates `path`, which must not exist, for writing.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn Write + Send>>;
    /// Opens `path` for appending, creating it when it is missing.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>>;
    /// Makes the data and size of the file at `path` durable (not its name: see [`FileOps::sync_dir`]).
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the names created, renamed or removed in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes everything written to the filesystem that holds `path` durable (`syncfs`): one call for many
    /// files and directories at once.
    fn sync_fs(&self, path: &Path) -> io::Result<()>;
    /// Whether [`FileOps::sync_fs`] on the filesystem holding `path` makes its files and names as durable as
    /// syncing each of them would: true only where the kernel's `syncfs` commits the filesystem's journal or
    /// log and flushes the device. Elsewhere (FUSE and network filesystems among them) only per-file syncs
    /// reach the storage, so the default is no.
    fn sync_fs_is_durable(&self, _path: &Path) -> bool {
        false
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()>;
    fn symlink(&self, target: &Path, link: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes the file read-only for everyone (a published blob).
    fn set_readonly(&self, path: &Path) -> io::Result<()>;
    fn set_modified(&self, path: &Path, when: SystemTime) -> io::Result<()>;
}

/// A file open for appending (a journal), as [`FileOps::open_append`] gives it.
pub trait AppendFile: Send + fmt::Debug {
    /// Appends `bytes` in one write.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes what was appended durable.
    fn sync(&mut self) -> io::Result<()>;
}

impl AppendFile for File {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_all()
    }
}

/// The operating system's filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFiles;

impl FileOps for RealFiles {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn Write + Send>> {
        Ok(Box::new(
            File::options().write(true).create_new(true).open(path)?,
        ))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        Ok(Box::new(
            File::options().create(true).append(true).open(path)?,
        ))
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn sync_fs(&self, path: &Path) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let file = File::open(path)?;
        // SAFETY: syncfs only reads the descriptor, which `file` keeps open for the call.
        if unsafe { libc::syncfs(file.as_raw_fd()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn sync_fs_is_durable(&self, path: &Path) -> bool {
        local_filesystem_with_full_sync(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir(dir)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        fs::hard_link(original, link)
    }

    fn symlink(&self, target: &Path, link: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(target, link)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir(dir)
    }

    fn set_readonly(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o444))
    }

    fn set_modified(&self, path: &Path, when: SystemTime) -> io::Result<()> {
        File::options().append(true).open(path)?.set_modified(when)
    }
}

/// How far a published file survives power loss. Against a kill every level is the same: a reader sees the
/// old file or the new one, never a torn one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Data synced, renamed into place, directory synced: once the call returns, power loss keeps it.
    Durable,
    /// Data synced and renamed, the directory not synced: power loss may bring back the old file (or none), but
    /// never leaves the name holding a torn or empty one.
    Whole,
    /// Renamed only: power loss may leave the name holding a torn or empty file. Only for copies rebuilt from
    /// durable state whose readers take anything unreadable as absent.
    Unsynced,
}

/// A handle on a [`FileOps`]: the primitives, and the compound operations the cache and runs are made of.
#[derive(Debug, Clone)]
pub struct Files(Arc<dyn FileOps>);

impl Default for Files {
    fn default() -> Files {
        Files::real()
    }
}

impl std::ops::Deref for Files {
    type Target = dyn FileOps;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl Files {
    pub fn real() -> Files {
        static REAL: std::sync::OnceLock<Files> = std::sync::OnceLock::new();
        REAL.get_or_init(|| Files(Arc::new(RealFiles))).clone()
    }

    pub fn new(ops: Arc<dyn FileOps>) -> Files {
        Files(ops)
    }

    /// Creates `path` (which must not exist) holding `bytes`; nothing synced.
    pub fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = self.create_new(path)?;
        file.write_all(bytes)?;
        file.flush()
    }

    /// Creates `to` (which must not exist) holding what `from` holds; nothing synced.
    pub fn copy_new(&self, from: &Path, to: &Path) -> io::Result<u64> {
        let mut file = self.create_new(to)?;
        let copied = io::copy(&mut File::open(from)?, &mut file)?;
        file.flush()?;
        Ok(copied)
    }

    /// `mkdir -p`: the missing directories from the top down.
    pub fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        if dir.as_os_str().is_empty() || dir.is_dir() {
            return Ok(());
        }
        if let Some(parent) = dir.parent() {
            self.create_dir_all(parent)?;
        }
        match self.create_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
            other => other,
        }
    }

    /// `mkdir -p` whose new directories survive power loss: each one's name is synced into its parent. For the
    /// fixed directories that durable files are published into (a directory lost to power loss takes its
    /// synced files with it).
    pub fn create_dir_all_durable(&self, dir: &Path) -> io::Result<()> {
        if dir.as_os_str().is_empty() || dir.is_dir() {
            return Ok(());
        }
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            self.create_dir_all_durable(parent)?;
        }
        match self.create_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
            other => other?,
        }
        self.sync_dir(parent.unwrap_or(Path::new(".")))
    }

    /// Removes `dir` and everything under it, files first; what another remover took meanwhile is no error.
    /// Links are removed, never followed, `dir` itself included: a link put where a directory was must not
    /// have the directory it leads to emptied.
    pub fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        match fs::symlink_metadata(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
            Ok(metadata) if !metadata.is_dir() => return not_found_is_ok(self.remove_file(dir)),
            Ok(_) => {}
        }
        let listing = match fs::read_dir(dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for item in listing {
            let item = item?;
            let path = item.path();
            if item.file_type()?.is_dir() {
                self.remove_dir_all(&path)?;
            } else {
                not_found_is_ok(self.remove_file(&path))?;
            }
        }
        not_found_is_ok(self.remove_dir(dir))
    }

    /// Publishes `bytes` at `path` through a temporary beside it and a rename, synced as `how` says.
    pub fn publish(&self, path: &Path, bytes: &[u8], how: Publish) -> io::Result<()> {
        self.prepare(path, how, |out| out.write_all(bytes))?
            .publish()
    }

    /// Writes what `write` writes into a temporary beside `path`, to be published there by
    /// [`Prepared::publish`], synced as `how` says. A large file is thus written as it is made, never held
    /// whole, and its sync and rename can wait for another thread. `write` gets the file unbuffered: one that
    /// writes a few bytes at a time buffers them itself.
    pub fn prepare(
        &self,
        path: &Path,
        how: Publish,
        write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<Prepared> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if how == Publish::Durable {
            self.create_dir_all_durable(dir)?;
        } else {
            self.create_dir_all(dir)?;
        }
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} has no file name", path.display()),
            )
        })?;
        // Unique per call and per machine: two threads or two engines sharing the directory may publish the
        // same content-addressed file at once. Created exclusively: should a name ever repeat, the write fails
        // instead of sharing a temporary with another writer.
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(".{}.part", unique_suffix()));
        let tmp = dir.join(tmp_name);
        let mut file = self.create_new(&tmp)?;
        // Dropped on an error, the temporary goes.
        let prepared = Prepared {
            files: self.clone(),
            tmp,
            dir: dir.to_owned(),
            path: path.to_owned(),
            how,
            renamed: false,
        };
        write(&mut file)?;
        file.flush()?;
        Ok(prepared)
    }
}

/// A file written under a temporary name ([`Files::prepare`]) and not published yet. Dropped unpublished (or
/// when publishing fails), its temporary is removed.
#[derive(Debug)]
pub struct Prepared {
    files: Files,
    tmp: PathBuf,
    dir: PathBuf,
    path: PathBuf,
    how: Publish,
    renamed: bool,
}

impl Prepared {
    /// Syncs it as its [`Publish`] level says and renames it into place.
    pub fn publish(mut self) -> io::Result<()> {
        if self.how != Publish::Unsynced {
            self.files.sync_file(&self.tmp)?;
        }
        self.files.rename(&self.tmp, &self.path)?;
        self.renamed = true;
        if self.how == Publish::Durable {
            self.files.sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = self.files.remove_file(&self.tmp);
        }
    }
}

fn not_found_is_ok(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Publishes `bytes` at `path` on the real filesystem, [`Publish::Durable`]: atomic against kills and durable
/// across power loss.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    Files::real().publish(path, bytes, Publish::Durable)
}

/// Publishes `bytes` at `path` on the real filesystem without syncing ([`Publish::Unsynced`]): atomic against
/// kills, not across power loss. For views that are rewritten often and rebuilt from durable state.
pub fn atomic_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    Files::real().publish(path, bytes, Publish::Unsynced)
}

/// Whether `path` is on a local filesystem whose `syncfs` writes back every dirty file and name and then
/// commits and flushes like `fsync` does: ext2/3/4 (`ext4_sync_fs` commits the journal and flushes the
/// device, or flushes it without a journal), XFS (forces the log), btrfs (commits the transaction), F2FS (a
/// checkpoint), and tmpfs, where nothing outlives power loss anyway. Recognised by `statfs`'s magic number.
fn local_filesystem_with_full_sync(path: &Path) -> bool {
    const EXT2_3_4: u32 = 0xEF53;
    const XFS: u32 = 0x5846_5342;
    const BTRFS: u32 = 0x9123_683E;
    const F2FS: u32 = 0xF2F5_2010;
    const TMPFS: u32 = 0x0102_1994;
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes only into `info`, which lives on this stack frame; `name` is NUL-terminated.
    let magic = unsafe {
        let mut info: libc::statfs = std::mem::zeroed();
        if libc::statfs(name.as_ptr(), &mut info) != 0 {
            return false;
        }
        // The magic numbers are 32 bits; `f_type`'s width differs between architectures.
        info.f_type as u32
    };
    [EXT2_3_4, XFS, BTRFS, F2FS, TMPFS].contains(&magic)
}

/// Makes a rename or create inside `dir` durable across power loss.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    RealFiles.sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncfs_is_trusted_on_local_filesystems_only() {
        // tmpfs is one of the recognised filesystems; procfs stores nothing and is not; a missing path is not.
        assert!(RealFiles.sync_fs_is_durable(Path::new("/dev/shm")));
        assert!(!RealFiles.sync_fs_is_durable(Path::new("/proc/self")));
        assert!(!RealFiles.sync_fs_is_durable(Path::new("/no/such/place")));
    }

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

    /// A prepared file is in place only once published; dropped, or failed while written, it leaves the old
    /// file and no temporary.
    #[test]
    fn a_prepared_file_appears_only_when_published() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("manifest.json");
        let files = Files::real();
        files.publish(&path, b"old", Publish::Durable)?;
        let listing = || -> io::Result<Vec<String>> {
            let mut names: Vec<String> = fs::read_dir(dir.path())?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<_, _>>()?;
            names.sort();
            Ok(names)
        };
        let large = vec![b'x'; 1 << 20];
        let prepared = files.prepare(&path, Publish::Whole, |out| out.write_all(&large))?;
        assert_eq!(listing()?.len(), 2, "the temporary beside the old file");
        assert_eq!(fs::read(&path)?, b"old");
        drop(prepared);
        assert_eq!(listing()?, ["manifest.json"]);
        let failed = files.prepare(&path, Publish::Whole, |out| {
            out.write_all(&large)?;
            Err(io::Error::other("the serializer failed"))
        });
        assert!(failed.is_err());
        assert_eq!(listing()?, ["manifest.json"]);
        assert_eq!(fs::read(&path)?, b"old");
        files
            .prepare(&path, Publish::Durable, |out| out.write_all(&large))?
            .publish()?;
        assert_eq!(listing()?, ["manifest.json"]);
        assert_eq!(fs::read(&path)?, large);
        Ok(())
    }

    #[test]
    fn removing_a_link_to_a_directory_leaves_the_directory_alone() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let files = Files::real();
        let kept = dir.path().join("kept");
        fs::create_dir(&kept)?;
        fs::write(kept.join("file"), b"keep me")?;
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&kept, &link)?;
        files.remove_dir_all(&link)?;
        assert!(fs::symlink_metadata(&link).is_err(), "the link is removed");
        assert_eq!(fs::read(kept.join("file"))?, b"keep me");
        files.remove_dir_all(&link)?;
        Ok(())
    }

    #[test]
    fn directories_are_made_and_removed_whole() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let files = Files::real();
        let deep = dir.path().join("a/b/c");
        files.create_dir_all(&deep)?;
        files.create_dir_all(&deep)?;
        files.write_new(&deep.join("f"), b"x")?;
        files.copy_new(&deep.join("f"), &dir.path().join("a/g"))?;
        assert!(
            files.write_new(&deep.join("f"), b"y").is_err(),
            "never overwrites"
        );
        files.remove_dir_all(&dir.path().join("a"))?;
        assert!(!dir.path().join("a").exists());
        files.remove_dir_all(&dir.path().join("a"))?;
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
