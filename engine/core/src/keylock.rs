//! Locks that let several engines share one cache: a per-key build lock, so one key is built by one engine
//! at a time, and the cache's in-use lock, so `gc` never deletes what a running engine is using.
//!
//! Key locks live in one file, `<cache>/locks/keys.table`, of [`SLOTS`] slots of [`SLOT_BYTES`] bytes. A key's
//! slot is read from its hash ([`slot_of`]); building the key holds an exclusive open-file-description
//! (OFD) byte-range lock on the slot's bytes, and the holder writes its pid, host, start time and node id as
//! JSON into them, so that a waiting engine can say whom it waits for. A lock taken and released is two
//! `fcntl`s and one small write in a file every engine keeps open: no file is made or deleted per key, which
//! on ext4 cost an inode allocation (a scan of the inode bitmap) and, with `discard`, a wait for the disk when
//! the deleted inode's block was freed.
//!
//! The table's 4 MiB are sparse: a filesystem allocates a block for a slot when it is first written (81 nodes
//! left 312 KiB). Two keys share a slot once in [`SLOTS`]: the second then waits for the first as it would for
//! its own key.
//! No deadlock follows, since a lock is held only while its node executes and an executing node waits for
//! nothing else. In one engine, OFD locks taken through one open file never conflict with each other, so the
//! engine keeps the slots it holds itself and answers "held" for a second key in one of them.
//!
//! What happens when a holder dies depends on the filesystem:
//! - Local filesystems: an OFD lock belongs to the open file, and the kernel releases it when the last
//!   descriptor closes, which a dying process does however it dies (SIGKILL included). Our descriptors are
//!   close-on-exec (Rust's default), so the node processes a holder starts cannot keep its lock alive.
//! - NFSv4: byte-range locks are the protocol's own, held under the client's lease. A dead process's lock is
//!   released by its machine at once; a machine that dies or is cut off loses its locks when its lease expires
//!   (90 s by default), and a waiter then takes over.
//! - NFSv3 goes through lockd (NLM). Mounted `nolock` or `local_lock=posix|all`, byte-range locks only exclude
//!   processes of the same machine: engines on two machines may then build one key at the same time. The
//!   cache stays consistent (every file is published by rename and two entries of one key are
//!   interchangeable); only work is repeated. With lockd, the locks of a machine that crashed are only
//!   released when it reboots (statd tells the server), so a waiter names the host it is waiting for.
//! - FUSE filesystems (sshfs, …) and Lustre mounted `localflock` also keep locks local to one machine.
//!
//! [`locality_caveat`] recognises the local-only cases from `/proc/self/mountinfo`; the scheduler reports it
//! as a warning. A filesystem that refuses byte-range locks altogether makes locking fail; the scheduler then
//! builds without the key lock and says so. The table is never deleted by fracflow; deleting it by hand while
//! engines run lets them build one key twice (consistent, only repeated). Engines of versions before the table
//! locked `<cache>/locks/<key>.lock` files instead; `gc` still removes such files that nobody holds. An older
//! engine and a newer one on one cache do not exclude each other: they may build a key twice, as above.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// The in-use lock's file name under `<cache>/locks/`; every other `*.lock` there is a key's, left by an engine
/// of a version before the table.
const IN_USE: &str = "in-use.lock";

/// The key lock table's file name under `<cache>/locks/`.
pub const TABLE: &str = "keys.table";

/// Slots in the table.
pub const SLOTS: u64 = 1 << 14;

/// Bytes of one slot: the holder's JSON, cut to fit (see `slot_record`), then spaces.
pub const SLOT_BYTES: u64 = 256;

/// Who holds a key's lock, as written in its slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    /// When the lock was taken, RFC 3339 (UTC).
    pub since: String,
    /// The node id the holder builds the key for (another pipeline may name the same key differently).
    pub node: String,
}

/// A held key lock: released when dropped, released by the kernel when the process dies.
#[derive(Debug)]
pub struct KeyLock {
    table: PathBuf,
    slot: u64,
}

/// The outcome of one attempt to take a key's lock.
#[derive(Debug)]
pub enum Attempt {
    Acquired(KeyLock),
    /// Another engine (or another thread of this one) builds the key, or a key sharing its slot; `None` when
    /// the slot was unreadable, e.g. caught between the holder's lock and its write.
    Held(Option<Holder>),
}

/// A table this process has open: the one open file all its locks in it are taken through, and the slots it
/// holds with their holders (OFD locks through one open file do not exclude each other).
#[derive(Debug)]
struct OpenTable {
    file: File,
    held: HashMap<u64, Holder>,
}

/// The tables this process has open, by path. A table none of whose slots is held is closed once more than
/// [`KEPT_TABLES`] are open (a test process opens a cache per test).
static TABLES: Mutex<Option<HashMap<PathBuf, OpenTable>>> = Mutex::new(None);
const KEPT_TABLES: usize = 4;

/// The slot of a key given as hex: the first 16 hex digits as a number, modulo [`SLOTS`]. A key that is not hex
/// (never made by fracflow) goes by the blake3 of its text.
pub fn slot_of(key: &str) -> u64 {
    let prefix = key.get(..16).and_then(|p| u64::from_str_radix(p, 16).ok());
    let number = prefix.unwrap_or_else(|| {
        let hash = blake3::hash(key.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.as_bytes()[..8]);
        u64::from_be_bytes(first)
    });
    number % SLOTS
}

/// Takes `key`'s lock without waiting and records us (pid, host, now, `node`) as its holder.
pub fn try_acquire(locks: &Path, key: &str, node: &str) -> io::Result<Attempt> {
    let table_path = locks.join(TABLE);
    let slot = slot_of(key);
    let mut tables = TABLES.lock().unwrap_or_else(PoisonError::into_inner);
    let tables = tables.get_or_insert_with(HashMap::new);
    if tables.len() >= KEPT_TABLES && !tables.contains_key(&table_path) {
        tables.retain(|_, table| !table.held.is_empty());
    }
    let table = match tables.entry(table_path.clone()) {
        Entry::Occupied(open) => open.into_mut(),
        Entry::Vacant(place) => place.insert(OpenTable {
            file: open_lock_file(&table_path)?,
            held: HashMap::new(),
        }),
    };
    if let Some(holder) = table.held.get(&slot) {
        return Ok(Attempt::Held(Some(holder.clone())));
    }
    let holder = Holder {
        pid: std::process::id(),
        host: hostname(),
        since: crate::run::now_rfc3339(),
        node: node.to_owned(),
    };
    let record = slot_record(&holder)?;
    if !set_lock(&table.file, slot, libc::F_WRLCK as libc::c_short)? {
        return Ok(Attempt::Held(read_holder(&table_path, slot)));
    }
    // One write of the whole slot: a waiter reads the old holder, or us, never a mixture that parses (and an
    // unparsable slot only makes the message vaguer).
    let written = table.file.write_all_at(&record, slot * SLOT_BYTES);
    if let Err(error) = written {
        let _ = set_lock(&table.file, slot, libc::F_UNLCK as libc::c_short);
        return Err(error);
    }
    table.held.insert(slot, holder);
    Ok(Attempt::Acquired(KeyLock {
        table: table_path,
        slot,
    }))
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        let mut tables = TABLES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(table) = tables.as_mut().and_then(|t| t.get_mut(&self.table))
            && table.held.remove(&self.slot).is_some()
        {
            // Should the unlock fail, the lock goes when the table is closed, at the latest when we exit.
            let _ = set_lock(&table.file, self.slot, libc::F_UNLCK as libc::c_short);
        }
    }
}

/// Locks (`F_WRLCK`) or unlocks (`F_UNLCK`) `slot`'s bytes with an OFD lock, without waiting: whether it was
/// done, `false` when another open file holds a lock on them.
fn set_lock(file: &File, slot: u64, kind: libc::c_short) -> io::Result<bool> {
    let request = slot_range(slot, kind)?;
    // SAFETY: fcntl reads the `flock` we own for the duration of the call; the descriptor is open.
    let done = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &request) };
    if done == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(error),
    }
}

/// An OFD lock request of `kind` over `slot`'s bytes.
fn slot_range(slot: u64, kind: libc::c_short) -> io::Result<libc::flock> {
    // SAFETY: a zeroed `flock` is a valid value of a plain C struct; `l_pid` must be 0 for OFD locks.
    let mut request: libc::flock = unsafe { std::mem::zeroed() };
    request.l_type = kind;
    request.l_whence = libc::SEEK_SET as libc::c_short;
    request.l_start = libc::off_t::try_from(slot * SLOT_BYTES).map_err(io::Error::other)?;
    request.l_len = libc::off_t::try_from(SLOT_BYTES).map_err(io::Error::other)?;
    Ok(request)
}

/// How many slots of the table under `locks` are locked, as another engine would find them (this process's own
/// locks included: the table is opened anew for the probe). No table is none.
pub fn held_slots(locks: &Path) -> io::Result<usize> {
    let table = match File::open(locks.join(TABLE)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        opened => opened?,
    };
    let mut held = 0;
    for slot in 0..SLOTS {
        let mut probe = slot_range(slot, libc::F_WRLCK as libc::c_short)?;
        // SAFETY: fcntl writes only into `probe`, which we own; the descriptor is open.
        if unsafe { libc::fcntl(table.as_raw_fd(), libc::F_OFD_GETLK, &mut probe) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if probe.l_type != libc::F_UNLCK as libc::c_short {
            held += 1;
        }
    }
    Ok(held)
}

/// The slot's bytes for `holder`: its JSON, padded with spaces. A host name longer than POSIX's 64 bytes, then the
/// node id, are cut (at a character boundary, marked `…`) until it fits.
fn slot_record(holder: &Holder) -> io::Result<Vec<u8>> {
    const HOST_NAME_MAX: usize = 64;
    let limit = usize::try_from(SLOT_BYTES).map_err(io::Error::other)?;
    let mut fitted = holder.clone();
    cut_to(&mut fitted.host, HOST_NAME_MAX);
    let mut bytes = serde_json::to_vec(&fitted).map_err(io::Error::other)?;
    if bytes.len() > limit {
        let keep = fitted.node.len().saturating_sub(bytes.len() - limit);
        cut_to(&mut fitted.node, keep);
        bytes = serde_json::to_vec(&fitted).map_err(io::Error::other)?;
    }
    if bytes.len() > limit {
        return Err(io::Error::other(
            "a key lock's holder does not fit its slot",
        ));
    }
    bytes.resize(limit, b' ');
    Ok(bytes)
}

/// Cuts `text` to at most `max` bytes, the last of them a `…`, at a character boundary.
fn cut_to(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
}

/// The holder written in `slot`, read through a file opened for this (so NFS shows what the holder wrote, and
/// closing it drops no lock of ours: OFD locks belong to the open file they were taken through).
fn read_holder(table: &Path, slot: u64) -> Option<Holder> {
    let file = File::open(table).ok()?;
    let mut bytes = vec![0; usize::try_from(SLOT_BYTES).ok()?];
    file.read_exact_at(&mut bytes, slot * SLOT_BYTES).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    serde_json::from_str(text.trim_end_matches([' ', '\0'])).ok()
}

/// Removes the `<key>.lock` files of engines before the key lock table that nobody holds (left behind by
/// holders that died). Returns how many. The table itself stays: it is one file, and engines keep it open.
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
/// when the open finds none, not before every open.
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

/// Whether `path` still names the open `file` (same device and inode).
pub(crate) fn names_file(path: &Path, file: &File) -> bool {
    match (fs::metadata(path), file.metadata()) {
        (Ok(named), Ok(open)) => named.dev() == open.dev() && named.ino() == open.ino(),
        _ => false,
    }
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

/// Filesystem types and options under which byte-range locks (the key lock table's) are local to one machine.
fn caveat_for(fstype: &str, options: &str) -> Option<String> {
    let has = |option: &str| options.split(',').any(|o| o == option);
    match fstype {
        "nfs" | "nfs4" if has("nolock") => Some(format!("{fstype} mounted `nolock`")),
        "nfs" | "nfs4" if has("local_lock=posix") || has("local_lock=all") => {
            Some(format!("{fstype} mounted with local byte-range locks"))
        }
        "lustre" if has("localflock") => Some("lustre mounted `localflock`".to_owned()),
        fuse if fuse.starts_with("fuse") => Some(format!("a FUSE filesystem ({fuse})")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Write};
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
        assert_eq!(
            held_slots(dir.path())?,
            0,
            "a released lock leaves no byte of the table locked"
        );
        Ok(())
    }

    /// A key whose slot is `slot`, with `tail` to tell keys apart.
    fn key_in_slot(slot: u64, tail: char) -> String {
        let key = format!("{:016x}{}", slot, tail.to_string().repeat(48));
        assert_eq!(slot_of(&key), slot % SLOTS);
        key
    }

    #[test]
    fn keys_sharing_a_slot_wait_for_each_other_and_others_do_not() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (first, sharing, elsewhere) = (
            key_in_slot(7, 'a'),
            key_in_slot(7 + SLOTS, 'b'),
            key_in_slot(8, 'a'),
        );
        let Attempt::Acquired(lock) = try_acquire(dir.path(), &first, "first")? else {
            panic!("a free lock is acquired");
        };
        let holder = held(try_acquire(dir.path(), &sharing, "sharing")?).expect("holder named");
        assert_eq!(holder.node, "first");
        let Attempt::Acquired(other) = try_acquire(dir.path(), &elsewhere, "elsewhere")? else {
            panic!("a key in another slot is free");
        };
        assert_eq!(held_slots(dir.path())?, 2);
        drop(lock);
        let Attempt::Acquired(_sharing) = try_acquire(dir.path(), &sharing, "sharing")? else {
            panic!("free once the first is released");
        };
        drop(other);
        assert_eq!(held_slots(dir.path())?, 1);
        Ok(())
    }

    #[test]
    fn a_holder_too_long_for_its_slot_is_cut_to_fit() -> io::Result<()> {
        let holder = Holder {
            pid: 4_000_000,
            host: "h".repeat(300),
            since: "2026-12-07T21:00:00.000000Z".into(),
            node: format!("sweep[{}]", "é".repeat(200)),
        };
        let bytes = slot_record(&holder)?;
        assert_eq!(bytes.len() as u64, SLOT_BYTES);
        let text = std::str::from_utf8(&bytes).expect("cut at a character boundary");
        let fitted: Holder = serde_json::from_str(text.trim_end()).expect("still JSON");
        assert_eq!(fitted.pid, holder.pid);
        assert!(fitted.node.starts_with("sweep[é") && fitted.node.ends_with('…'));
        assert!(fitted.host.ends_with('…'));
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

    /// Takes and releases four keys' locks in turn, `FRACFLOW_TEST_CONTEND_ROUNDS` times, marking each key
    /// held by creating `<key>.held` beside the table while it holds the lock: a marker that already exists is
    /// another holder of the same key at the same time. Prints how many of those it met.
    #[test]
    #[ignore = "helper process for two_processes_never_hold_one_key_at_once"]
    fn contend_for_four_keys() -> io::Result<()> {
        let Some(locks) = std::env::var_os("FRACFLOW_TEST_CONTEND_LOCKS") else {
            return Ok(());
        };
        let rounds: usize = std::env::var("FRACFLOW_TEST_CONTEND_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let locks = Path::new(&locks);
        let (mut taken, mut overlaps) = (0, 0);
        for round in 0..rounds {
            let key = key_in_slot(round as u64 % 4, 'c');
            if let Attempt::Acquired(lock) = try_acquire(locks, &key, "contender")? {
                taken += 1;
                let marker = locks.join(format!("{key}.held"));
                match fs::File::create_new(&marker) {
                    Ok(_) => {
                        std::thread::sleep(Duration::from_micros(200));
                        fs::remove_file(&marker)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => overlaps += 1,
                    Err(e) => return Err(e),
                }
                drop(lock);
            }
        }
        println!("fracflow-test: taken {taken} overlaps {overlaps}");
        io::stdout().flush()
    }

    #[test]
    fn two_processes_never_hold_one_key_at_once() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let contender = || {
            std::process::Command::new(std::env::current_exe()?)
                .args([
                    "keylock::tests::contend_for_four_keys",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("FRACFLOW_TEST_CONTEND_LOCKS", dir.path())
                .env("FRACFLOW_TEST_CONTEND_ROUNDS", "2000")
                .stdout(std::process::Stdio::piped())
                .spawn()
        };
        let children = [contender()?, contender()?];
        let mut taken = 0;
        for child in children {
            let output = child.wait_with_output()?;
            assert!(output.status.success(), "{output:?}");
            let text = String::from_utf8_lossy(&output.stdout);
            let line = text
                .lines()
                .find_map(|l| {
                    l.split_once("fracflow-test: taken ")
                        .map(|(_, counts)| counts)
                })
                .expect("the contender's count");
            let (count, overlaps) = line.split_once(" overlaps ").expect("two counts");
            assert_eq!(overlaps, "0", "a key held by both processes at once");
            taken += count.parse::<usize>().expect("a count");
        }
        // Each process took most keys it asked for; the other held the rest at that moment.
        assert!(
            taken > 2000,
            "the locks were taken {taken} times in 4000 tries"
        );
        assert_eq!(held_slots(dir.path())?, 0);
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
        assert_eq!(
            read_holder(&dir.path().join(TABLE), slot_of(KEY)).map(|h| h.pid),
            Some(child.id()),
            "a killed holder's name stays in its slot"
        );
        let Attempt::Acquired(lock) = try_acquire(dir.path(), KEY, "waiter")? else {
            panic!("the dead holder's lock was not released");
        };
        drop(lock);
        Ok(())
    }

    #[test]
    fn gc_removes_the_free_lock_files_of_older_engines_and_keeps_the_table() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let older = |key: &str| dir.path().join(format!("{key}.lock"));
        let other = KEY.replace('0', "f");
        fs::write(older(KEY), b"{\"left\": \"by a dead holder\"}")?;
        // An older engine still building `other` holds its file.
        let live = open_lock_file(&older(&other))?;
        live.lock()?;
        let Attempt::Acquired(_lock) = try_acquire(dir.path(), KEY, "live")? else {
            panic!("a free lock is acquired");
        };
        let _in_use = InUse::shared(dir.path())?;
        assert_eq!(remove_stale(dir.path())?, 1);
        assert!(!older(KEY).exists());
        assert!(older(&other).exists(), "held: kept");
        assert!(dir.path().join(IN_USE).exists(), "not a key's lock");
        assert!(dir.path().join(TABLE).exists(), "the table stays");
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

        assert!(caveat_for("nfs4", "rw,vers=4.2,local_lock=posix").is_some());
        assert_eq!(caveat_for("nfs4", "rw,vers=4.2,local_lock=flock"), None);
        assert!(caveat_for("fuse.sshfs", "rw,user_id=0").is_some());
        assert!(caveat_for("lustre", "rw,localflock").is_some());
        assert_eq!(caveat_for("lustre", "rw,flock"), None);
    }
}
