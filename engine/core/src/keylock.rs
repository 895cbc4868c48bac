//! Locks that let several engines share one cache: a per-key build lock, so one key is built by one engine
//! at a time, and the cache's in-use lock, so `gc` never deletes what a running engine is using.
//!
//! A key's lock is `<cache>/locks/<key>.lock`, `flock`ed exclusively while the key is built. It holds the
//! holder's pid, host, start time and node id as JSON, so that a waiting engine can say whom it waits for.
//! The holder deletes the file while it still holds the lock, then closes it; a waiter that had opened the old
//! file notices that the path no longer names the file it locked and starts over (the classic protocol that
//! makes deleting lock files safe).
//!
//! What happens when a holder dies depends on the filesystem:
//! - Local filesystems: `flock` belongs to the open file, and the kernel releases it when the last descriptor
//!   closes, which a dying process does however it dies (SIGKILL included). Our descriptors are close-on-exec
//!   (Rust's default), so the node processes a holder starts cannot keep its lock alive.
//! - NFSv4: Linux implements `flock` as a whole-file byte-range lock held under the client's lease. A dead
//!   process's lock is released by its machine at once; a machine that dies or is cut off loses its locks
//!   when its lease expires (90 s by default), and a waiter then takes over.
//! - NFSv3 goes through lockd (NLM). Mounted `nolock` or `local_lock=flock|all`, `flock` only excludes
//!   processes of the same machine: engines on two machines may then build one key at the same time. The
//!   cache stays consistent (every file is published by rename and two entries of one key are
//!   interchangeable); only work is repeated. With lockd, the locks of a machine that crashed are only
//!   released when it reboots (statd tells the server), so a waiter names the host it is waiting for.
//! - FUSE filesystems (sshfs, …) and Lustre mounted `localflock` also keep locks local to one machine.
//!
//! [`locality_caveat`] recognises the local-only cases from `/proc/self/mountinfo`; the scheduler reports it
//! as a warning. A filesystem that refuses `flock` altogether makes locking fail; the scheduler then builds
//! without the key lock and says so.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The in-use lock's file name under `<cache>/locks/`; every other `*.lock` there is a key's.
const IN_USE: &str = "in-use.lock";

/// How often to start over when a holder deleted the lock file between our open and our lock.
const REOPEN_ATTEMPTS: usize = 16;

/// Who holds a key's lock, as written in its lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    /// When the lock was taken, RFC 3339 (UTC).
    pub since: String,
    /// The node id the holder builds the key for (another pipeline may name the same key differently).
    pub node: String,
}

/// A held key lock: deleted and released when dropped, released by the kernel when the process dies.
#[derive(Debug)]
pub struct KeyLock {
    file: File,
    path: PathBuf,
}

/// The outcome of one attempt to take a key's lock.
#[derive(Debug)]
pub enum Attempt {
    Acquired(KeyLock),
    /// Another engine (or another thread of this one) builds the key; `None` when its file was unreadable,
    /// e.g. caught between the holder's lock and its write.
    Held(Option<Holder>),
}

/// The lock file of `key` under the cache's `locks/` directory.
fn path_of(locks: &Path, key: &str) -> PathBuf {
    locks.join(format!("{key}.lock"))
}

/// Takes `key`'s lock without waiting and records us (pid, host, now, `node`) as its holder.
pub fn try_acquire(locks: &Path, key: &str, node: &str) -> io::Result<Attempt> {
    let path = path_of(locks, key);
    for _ in 0..REOPEN_ATTEMPTS {
        let mut file = match open_lock_file(&path) {
            Ok(file) => file,
            // The holder deleted the file between our directory lookup and our open (NFS reports a stale
            // handle for the same race): look again.
            Err(e) if is_gone(&e) => continue,
            Err(e) => return Err(e),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Ok(Attempt::Held(read_holder(&mut file))),
            Err(fs::TryLockError::Error(e)) if is_gone(&e) => continue,
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        // The previous holder deletes the file before it releases it: if the path no longer names the file we
        // locked, our lock is on a deleted file that no one else will ever see. Start over.
        if !names_file(&path, &file) {
            continue;
        }
        let holder = Holder {
            pid: std::process::id(),
            host: hostname(),
            since: crate::run::now_rfc3339(),
            node: node.to_owned(),
        };
        let bytes = serde_json::to_vec(&holder).map_err(io::Error::other)?;
        // One write of a few hundred bytes: a waiter reads the old holder, nothing, or us, never a mixture
        // that parses (and an unparsable file only makes the message vaguer).
        file.set_len(0)?;
        file.write_all(&bytes)?;
        return Ok(Attempt::Acquired(KeyLock { file, path }));
    }
    Err(io::Error::other(format!(
        "lock file {} was replaced {REOPEN_ATTEMPTS} times while being locked",
        path.display()
    )))
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        // Delete while still holding the lock: deleting after releasing could remove the file a waiter has just
        // locked, and a third engine would then lock a fresh file at the same path while the waiter builds.
        if names_file(&self.path, &self.file) {
            let _ = fs::remove_file(&self.path);
        }
        // Closing `self.file` (after this body) releases the lock.
    }
}

/// Removes the lock files of keys that nobody holds: left behind by holders that died. Returns how many.
pub fn remove_stale(locks: &Path) -> io::Result<usize> {
    let mut removed = 0;
    let Ok(listing) = fs::read_dir(locks) else {
        return Ok(0);
    };
    for item in listing {
        let path = item?.path();
        let is_key_lock = path.extension().is_some_and(|e| e == "lock")
            && path.file_name().is_some_and(|n| n != IN_USE);
        if !is_key_lock {
            continue;
        }
        let Ok(file) = open_lock_file(&path) else {
            continue;
        };
        // Held: a live engine builds that key. Otherwise delete it under our lock, as a holder would.
        if file.try_lock().is_ok() && names_file(&path, &file) && fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// A run's (shared) or `gc`'s (exclusive) hold on the whole cache, released when dropped or at death.
#[derive(Debug)]
pub struct InUse {
    _file: File,
}

impl InUse {
    /// Waits until no `gc` works on the cache, then marks it in use until dropped. Runs share this lock.
    pub fn shared(locks: &Path) -> io::Result<InUse> {
        let file = open_lock_file(&locks.join(IN_USE))?;
        file.lock_shared()?;
        Ok(InUse { _file: file })
    }

    /// The cache to ourselves, or `ResourceBusy` at once when a run (or `verify`) is using it.
    pub fn exclusive(locks: &Path) -> io::Result<InUse> {
        let file = open_lock_file(&locks.join(IN_USE))?;
        match file.try_lock() {
            Ok(()) => Ok(InUse { _file: file }),
            Err(fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "the cache is in use by a running engine (or `cache verify`); nothing was removed, try again \
                 when no run uses this cache",
            )),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// Opened for writing too: NFS grants an exclusive lock only on a file open for writing. Its folder is made
/// when the open finds none, not before every open: a run takes a key lock per node it starts, and making sure of
/// the folder first cost a `mkdir` and a `stat` each time.
pub(crate) fn open_lock_file(path: &Path) -> io::Result<File> {
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            open()
        }
        opened => opened,
    }
}

/// The file was deleted under us: `NotFound`, or `ESTALE` on NFS.
fn is_gone(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ESTALE)
}

/// Whether `path` still names the open `file` (same device and inode).
pub(crate) fn names_file(path: &Path, file: &File) -> bool {
    match (fs::metadata(path), file.metadata()) {
        (Ok(named), Ok(open)) => named.dev() == open.dev() && named.ino() == open.ino(),
        _ => false,
    }
}

fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// This machine's name, as a waiting engine elsewhere will show it. Read once: every key lock records it, and
/// a read of `/proc` per node was a file opened on a chain's critical path.
pub(crate) fn hostname() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown host".to_owned())
    })
    .clone()
}

/// Why key locks on the filesystem holding `dir` may not exclude engines on other machines, if they may not.
pub fn locality_caveat(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let table = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = table
        .lines()
        .filter_map(parse_mountinfo)
        .filter(|m| dir.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())?;
    caveat_for(&mount.fstype, &mount.options).map(|why| {
        format!(
            "the cache {} is on {why}: its per-key locks only exclude engines on this machine, so engines on \
             other machines may build the same key at the same time (the cache stays consistent; only work is \
             repeated)",
            dir.display()
        )
    })
}

#[derive(Debug, PartialEq)]
struct Mount {
    point: PathBuf,
    fstype: String,
    /// Per-mount and superblock options, comma-separated.
    options: String,
}

/// One line of `/proc/self/mountinfo`:
/// `id parent major:minor root mount-point mount-options [optional fields] - fstype source super-options`.
fn parse_mountinfo(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split(' ').collect();
    let mut right = right.split(' ');
    let fstype = right.next()?.to_owned();
    let _source = right.next()?;
    let super_options = right.next().unwrap_or("");
    Some(Mount {
        point: PathBuf::from(unescape_octal(left.get(4)?)),
        fstype,
        options: format!("{},{super_options}", left.get(5)?),
    })
}

/// mountinfo writes space, tab, newline and backslash in paths as `\040`, `\011`, `\012`, `\134`.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes.get(i + 1..i + 4);
        if bytes[i] == b'\\'
            && let Some(digits) = digits
            && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        {
            out.push(
                digits
                    .iter()
                    .fold(0u8, |v, d| v.wrapping_mul(8).wrapping_add(d - b'0')),
            );
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Filesystem types and options under which `flock` is local to one machine.
fn caveat_for(fstype: &str, options: &str) -> Option<String> {
    let has = |option: &str| options.split(',').any(|o| o == option);
    match fstype {
        "nfs" | "nfs4" if has("nolock") => Some(format!("{fstype} mounted `nolock`")),
        "nfs" | "nfs4" if has("local_lock=flock") || has("local_lock=all") => {
            Some(format!("{fstype} mounted with local `flock` locks"))
        }
        "lustre" if has("localflock") => Some("lustre mounted `localflock`".to_owned()),
        fuse if fuse.starts_with("fuse") => Some(format!("a FUSE filesystem ({fuse})")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn held(attempt: Attempt) -> Option<Holder> {
        match attempt {
            Attempt::Held(holder) => holder,
            Attempt::Acquired(_) => panic!("expected the lock to be held"),
        }
    }

    #[test]
    fn a_waiter_sees_the_holder_and_acquires_once_it_is_released() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let locks = dir.path().to_owned();
        let Attempt::Acquired(first) = try_acquire(&locks, KEY, "build[a=1]")? else {
            panic!("a free lock is acquired");
        };
        let (saw_holder, seen) = mpsc::channel();
        let waiter = std::thread::spawn(move || -> io::Result<bool> {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut reported = false;
            while Instant::now() < deadline {
                match try_acquire(&locks, KEY, "build[a=1] elsewhere")? {
                    Attempt::Acquired(_) => return Ok(true),
                    Attempt::Held(holder) => {
                        if !reported {
                            let _ = saw_holder.send(holder);
                            reported = true;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
            Ok(false)
        });
        let holder = seen
            .recv_timeout(Duration::from_secs(30))
            .expect("the waiter found the lock held")
            .expect("the holder is named");
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.node, "build[a=1]");
        assert_eq!(holder.host, hostname());
        drop(first);
        assert!(
            waiter.join().expect("waiter thread")?,
            "acquired after the release"
        );
        assert!(
            !path_of(dir.path(), KEY).exists(),
            "a released lock leaves no file behind"
        );
        Ok(())
    }

    /// Not a test of its own: the process `a_dead_holder_releases_its_lock` starts and kills.
    #[test]
    #[ignore = "helper process for a_dead_holder_releases_its_lock"]
    fn hold_a_key_lock_until_killed() -> io::Result<()> {
        let Some(locks) = std::env::var_os("FRACFLOW_TEST_HOLD_LOCKS") else {
            return Ok(());
        };
        let Attempt::Acquired(_lock) = try_acquire(Path::new(&locks), KEY, "held")? else {
            return Err(io::Error::other("the lock was not free"));
        };
        println!("fracflow-test: holding the lock");
        io::stdout().flush()?;
        // Killed long before this; bounded so a lost parent does not leave it forever.
        std::thread::sleep(Duration::from_secs(120));
        Ok(())
    }

    #[test]
    fn a_dead_holder_releases_its_lock() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .args([
                "keylock::tests::hold_a_key_lock_until_killed",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("FRACFLOW_TEST_HOLD_LOCKS", dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let holding = io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("fracflow-test: holding the lock"));
        assert!(holding, "the helper process took the lock");
        let holder = held(try_acquire(dir.path(), KEY, "waiter")?).expect("holder named");
        assert_eq!(holder.pid, child.id(), "the lock names the other process");

        child.kill()?;
        child.wait()?;
        assert!(
            path_of(dir.path(), KEY).exists(),
            "a killed holder leaves its file behind"
        );
        let Attempt::Acquired(lock) = try_acquire(dir.path(), KEY, "waiter")? else {
            panic!("the dead holder's lock was not released");
        };
        drop(lock);
        Ok(())
    }

    #[test]
    fn stale_lock_files_go_and_held_ones_stay() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let other = KEY.replace('0', "f");
        fs::write(
            path_of(dir.path(), KEY),
            b"{\"left\": \"by a dead holder\"}",
        )?;
        let Attempt::Acquired(live) = try_acquire(dir.path(), &other, "live")? else {
            panic!("a free lock is acquired");
        };
        let _in_use = InUse::shared(dir.path())?;
        assert_eq!(remove_stale(dir.path())?, 1);
        assert!(!path_of(dir.path(), KEY).exists());
        assert!(path_of(dir.path(), &other).exists(), "held: kept");
        assert!(dir.path().join(IN_USE).exists(), "not a key's lock");
        drop(live);
        Ok(())
    }

    #[test]
    fn gc_is_refused_while_a_run_uses_the_cache() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let run = InUse::shared(dir.path())?;
        let second_run = InUse::shared(dir.path())?;
        let refused = InUse::exclusive(dir.path()).expect_err("runs hold the cache");
        assert_eq!(refused.kind(), io::ErrorKind::ResourceBusy);
        drop((run, second_run));
        InUse::exclusive(dir.path())?;
        Ok(())
    }

    #[test]
    fn mountinfo_lines_and_local_only_locks() {
        let nfs = "412 29 0:51 / /mnt/shared\\040cache rw,relatime shared:220 - nfs server:/export \
                   rw,vers=3,hard,nolock,proto=tcp,local_lock=all";
        let mount = parse_mountinfo(nfs).expect("parsed");
        assert_eq!(mount.point, PathBuf::from("/mnt/shared cache"));
        assert_eq!(mount.fstype, "nfs");
        assert!(caveat_for(&mount.fstype, &mount.options).is_some());

        let nfs4 =
            "413 29 0:52 / /nfs rw,relatime - nfs4 server:/ rw,vers=4.2,hard,local_lock=none";
        let mount = parse_mountinfo(nfs4).expect("parsed");
        assert_eq!(caveat_for(&mount.fstype, &mount.options), None);

        let ext4 = "29 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro";
        let mount = parse_mountinfo(ext4).expect("parsed");
        assert_eq!(caveat_for(&mount.fstype, &mount.options), None);

        assert!(caveat_for("fuse.sshfs", "rw,user_id=0").is_some());
        assert!(caveat_for("lustre", "rw,localflock").is_some());
        assert_eq!(caveat_for("lustre", "rw,flock"), None);
    }
}
