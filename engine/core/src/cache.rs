//! The content-addressed cache: output blobs by hash, one entry per key, a pointer per node for `why` and ETAs
//! (kept in per-engine journals, see `pointers`).
//!
//! Layout under the cache directory:
//! `blobs/ab/cdef…` (read-only content), `entries/ab/<key>.json`, `nodes/` (each engine's pointer journal,
//! `<owner>.jsonl`, appended unsynced, and the snapshot the journals of dead engines are folded into,
//! `pointers.json`; `<blake3 of node id>.json` from older engines),
//! `tmp/` (staging, each directory named after the engine that owns it; see `Cache::remove_dead_staging`),
//! `stat.json` (the stat cache), `index.msgpack` (what each entry serves a run, a copy that is checked before use:
//! see `hitindex`), `locks/` (see `keylock`). Every file is published by temp → fsync → rename,
//! so a kill leaves the old state or the new.
//!
//! Several engines, on one machine or several sharing the directory, may use one cache at once. Temporary
//! names are unique per machine, process and call (`fracflow_record::unique_suffix`) and created exclusively,
//! so two writers never write through one file; renames publish whole files only, and a key's blobs are
//! published before its entry. Two engines that publish the same blob or the same key both succeed: the
//! blob's content is its name, and either entry is complete. The per-key lock keeps that from happening in
//! the first place; `gc` deletes nothing while any run holds the cache's in-use lock.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::hitindex::{EntryIdentity, HitIndex};
use crate::keylock::{self, InUse};
use crate::pointers::Pointers;
use crate::remote::{self, RemoteError, RemoteStore, RemoteTier, Upload};
use crate::statcache::hash_and_size;
use crate::storedir::StoreDir;
use fracflow_record::{Digest, FORMAT_VERSION, Files, Publish, unique_suffix};

/// Staging directories and `*.part` files older than this are left over from killed runs. Staging is normally
/// judged by its owner's lock (see [`Cache::remove_dead_staging`]) and `gc` runs only while no engine holds the
/// in-use lock, so this age is a second guard, for filesystems whose locks do not reach other machines (see
/// `keylock`): there, a live engine elsewhere is invisible to the lock.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A node's output files by name.
pub type Outputs = fracflow_record::SortedMap<BlobRef>;

/// One stored output file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    pub hash: Digest,
    pub size: u64,
}

/// What the cache holds for one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    pub format_version: u32,
    pub key: Digest,
    pub node: String,
    pub fingerprint: Fingerprint,
    pub outputs: Outputs,
    pub metrics: BTreeMap<String, serde_json::Value>,
    /// The node's log of the run that produced it.
    pub log: Option<BlobRef>,
    /// Hash over outputs and metrics: what dependents' keys include.
    pub output_hash: Digest,
    pub seconds: f64,
    pub created: String,
}

/// What a hit serves a run: the entry without the fingerprint that keyed it (`why` and `plan` read that from
/// the entry itself). The hit index holds these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub key: Digest,
    pub outputs: Outputs,
    pub metrics: BTreeMap<String, serde_json::Value>,
    pub log: Option<BlobRef>,
    pub output_hash: Digest,
    pub seconds: f64,
}

impl CacheEntry {
    pub fn hit(&self) -> Hit {
        Hit {
            key: self.key,
            outputs: self.outputs.clone(),
            metrics: self.metrics.clone(),
            log: self.log.clone(),
            output_hash: self.output_hash,
            seconds: self.seconds,
        }
    }
}

/// A node's result between [`Cache::stage`] and [`Cache::commit`]: its entry (without the log blob, stored at
/// commit) and the private staged file of each output, which dependents read until the commit names it.
#[derive(Debug)]
pub struct Staged {
    pub entry: CacheEntry,
    /// Output name → the staged file holding it.
    pub files: BTreeMap<String, PathBuf>,
    /// The node's log, stored as a blob by the commit.
    log: Option<PathBuf>,
}

/// How stale an entry's mtime may be before a hit renews it.
pub const TOUCH_INTERVAL: Duration = Duration::from_secs(3600);

/// The newest entry of a node and its recent durations.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodePointer {
    pub node: String,
    pub latest_key: Digest,
    pub durations: Vec<f64>,
}

impl NodePointer {
    /// Median of the recorded durations.
    pub fn median_duration(&self) -> Option<f64> {
        let mut durations = self.durations.clone();
        if durations.is_empty() {
            return None;
        }
        durations.sort_by(f64::total_cmp);
        Some(durations[durations.len() / 2])
    }
}

/// A problem `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Corruption {
    pub path: PathBuf,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    pub entries: usize,
    pub blobs: usize,
    pub corrupt: Vec<Corruption>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    pub entries_removed: usize,
    pub blobs_removed: usize,
    pub bytes_freed: u64,
    /// Key lock files left behind by engines that died while building.
    pub locks_removed: usize,
    /// Staging directories of engines that died (see [`Cache::remove_dead_staging`]).
    pub staging_removed: usize,
}

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    /// Shared by the clones of one `Cache`, loaded on the first lookup.
    index: Arc<HitIndex>,
    /// `entries/` and `blobs/` as a lookup stats their files (see `storedir`).
    entry_store: Arc<StoreDir>,
    blob_store: Arc<StoreDir>,
    /// Asked on a local miss, fed with what is built here (see `remote`).
    remote: Option<Arc<RemoteTier>>,
    /// Every change to the cache's files goes through here (see `fracflow_record::atomic`).
    files: Files,
    /// Emptied staging directories of committed nodes, handed to the next nodes (see [`Cache::staging_dir`]).
    staging_pool: Arc<std::sync::Mutex<Vec<PathBuf>>>,
    /// The shard directories of `blobs/` and `entries/` a commit found or made: each commit names a blob's and
    /// an entry's, and making sure of them again cost two `statx` of their absolute paths a node. Directories
    /// leave the store only by `cache gc`, which never removes a shard.
    shards_made: Arc<std::sync::Mutex<foldhash::HashSet<PathBuf>>>,
    /// Each node's newest key and recent durations (see `pointers`).
    pointers: Arc<Pointers>,
    /// Whether one `syncfs` of the cache's filesystem is as durable as syncing each file and directory (see
    /// [`FileOps::sync_fs_is_durable`]): then a batch of several results is committed with three of them.
    syncfs_is_durable: bool,
}

/// How a commit makes its steps durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// Each file and each directory it changed, one `fsync` each: about four per node.
    EachFile,
    /// The cache's whole filesystem, one `syncfs` per step: three per batch, whatever its size.
    Filesystem,
}

/// At most this many emptied staging directories wait for a node; more are removed.
const STAGING_POOL_MAX: usize = 64;

/// The one file a staging directory keeps when it is emptied for the next node: the `command` kind's listing of
/// a node's dependencies, which it rewrites in place for every node it stages there. Removed and made again, it
/// was one of the two inodes a chain's node freed (`strace -f`), and on a filesystem mounted with `discard`
/// the removal waits for the disk to discard its data block: 121 µs a node of the committer's time on this
/// VM's ext4 (`perf record -e sched:sched_switch -g` of a 3 000-node chain).
pub const STAGING_KEPT_FILE: &str = ".fracflow-deps.tsv";

/// Whether `metadata` (from `symlink_metadata`, or of an open file) is a plain file with no other name: one that
/// the engine may move, make read-only or write over without touching a file someone else names through a
/// hard link or a symlink.
pub fn is_private_file(metadata: &fs::Metadata) -> bool {
    metadata.file_type().is_file() && metadata.nlink() == 1
}

/// The largest entry a remote may send (local entries are a few KiB).
const MAX_REMOTE_ENTRY: u64 = 16 << 20;

/// Why a blob from the remote was not stored.
enum BlobFetch {
    /// The store failed: the tier goes down.
    Store(RemoteError),
    /// The remote does not hold it, or it could not be stored here.
    Unusable(String),
    /// Its bytes do not match their hash.
    Mismatch(String),
}

/// Hash of a node's result as its dependents see it.
pub fn output_hash(outputs: &Outputs, metrics: &BTreeMap<String, serde_json::Value>) -> Digest {
    let mut hasher = blake3::Hasher::new();
    for (name, blob) in outputs {
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        // The hex spelling, as when blob names were held as text: every key made since stays the same.
        hasher.update(blob.hash.to_hex().as_bytes());
        hasher.update(&[0]);
    }
    hasher.update(b"metrics");
    hasher.update(
        serde_json::to_string(metrics)
            .unwrap_or_default()
            .as_bytes(),
    );
    hasher.finalize().into()
}

/// An entry file renewed within [`TOUCH_INTERVAL`].
fn used_lately(entry_file: &fs::Metadata) -> bool {
    entry_file.modified().is_ok_and(modified_lately)
}

/// A file whose mtime is `modified` was renewed within [`TOUCH_INTERVAL`].
fn modified_lately(modified: std::time::SystemTime) -> bool {
    std::time::SystemTime::now()
        .duration_since(modified)
        .unwrap_or_default()
        < TOUCH_INTERVAL
}

impl Cache {
    pub fn open(root: &Path) -> io::Result<Cache> {
        Cache::open_with(root, Files::real())
    }

    /// The cache at `root`, changing its files through `files` (a test's recording layer).
    pub fn open_with(root: &Path, files: Files) -> io::Result<Cache> {
        for sub in ["blobs", "entries", "nodes", "tmp", "locks"] {
            files.create_dir_all_durable(&root.join(sub))?;
        }
        Ok(Cache {
            root: root.to_owned(),
            index: Arc::new(HitIndex::new(root)),
            entry_store: Arc::new(StoreDir::new(root.join("entries"))),
            blob_store: Arc::new(StoreDir::new(root.join("blobs"))),
            remote: None,
            syncfs_is_durable: files.sync_fs_is_durable(root),
            pointers: Arc::new(Pointers::new(root.join("nodes"), files.clone())),
            files,
            staging_pool: Arc::default(),
            shards_made: Arc::default(),
        })
    }

    /// The file layer this cache changes its files through.
    pub fn files(&self) -> &Files {
        &self.files
    }

    /// This cache with a remote tier behind it.
    pub fn with_remote(mut self, tier: Arc<RemoteTier>) -> Cache {
        self.remote = Some(tier);
        self
    }

    pub fn remote(&self) -> Option<&RemoteTier> {
        self.remote.as_deref()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn stat_cache_file(&self) -> PathBuf {
        self.root.join("stat.json")
    }

    /// Where the per-key build locks and the in-use lock live.
    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    /// Marks the cache in use until dropped (a run holds it throughout), so that `gc` keeps away. Every run
    /// starts with this, so it is also where the staging directories of dead engines are swept (best effort:
    /// a read-only cache still serves hits).
    pub fn in_use(&self) -> io::Result<InUse> {
        let in_use = InUse::shared(&self.locks_dir())?;
        let _ = self.remove_dead_staging();
        Ok(in_use)
    }

    pub fn blob_path(&self, hash: &Digest) -> PathBuf {
        let hex = hash.to_hex();
        let (head, tail) = hex.split_at(2);
        self.sharded("blobs", head, tail, "")
    }

    fn entry_path(&self, key: &Digest) -> PathBuf {
        let hex = key.to_hex();
        self.sharded("entries", &hex[..2], &hex, ".json")
    }

    /// `<root>/<store>/<head>/<name><suffix>`, built in one buffer: a no-op makes two of these per node, and
    /// three `Path::join`s and a `format!` each were a twentieth of its work.
    fn sharded(&self, store: &str, head: &str, name: &str, suffix: &str) -> PathBuf {
        let root = self.root.as_os_str();
        let mut path = std::ffi::OsString::with_capacity(
            root.len() + store.len() + head.len() + name.len() + suffix.len() + 3,
        );
        path.push(root);
        if !root.as_encoded_bytes().ends_with(b"/") {
            path.push("/");
        }
        for part in [store, "/", head, "/", name, suffix] {
            path.push(part);
        }
        PathBuf::from(path)
    }

    fn pointer_path(&self, node: &str) -> PathBuf {
        self.root
            .join("nodes")
            .join(format!("{}.json", blake3::hash(node.as_bytes()).to_hex()))
    }

    /// A fresh private staging directory, empty but for a [`STAGING_KEPT_FILE`] a node before left there;
    /// nothing in it is visible to anyone until `put` publishes it.
    /// Its name starts with this engine's owner name (see [`StagingOwner`]), so a later run or `gc` can tell when
    /// the engine that made it is dead.
    ///
    /// A committed node's emptied directory ([`Cache::recycle_staging`]) is handed to the next node rather
    /// than a directory removed and another made: on ext4 without a journal every new inode skips the inodes
    /// deleted in the last minutes, so each directory made and removed per node slowed the nodes after it
    /// (`bench/chain_latency.sh`). It keeps its name, that of the node it was made for (`label` is only a hint
    /// for whoever looks into `tmp/`): renaming it for each node changed `tmp/`'s entries on every node's path,
    /// which on ext4 waited for the directory's blocks whenever the committer's `syncfs` was writing them.
    pub fn staging_dir(&self, label: &str) -> io::Result<PathBuf> {
        let pooled = self
            .staging_pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        if let Some(pooled) = pooled {
            // Still our directory, unless someone removed or replaced it meanwhile; what stands in its place goes
            // (a link removed as a file, never followed).
            if fs::symlink_metadata(&pooled).is_ok_and(|m| m.is_dir()) {
                return Ok(pooled);
            }
            let _ = self.files.remove_dir_all(&pooled);
        }
        let safe: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let tmp = self.root.join("tmp");
        self.files.create_dir_all(&tmp)?;
        let owner = StagingOwner::of(&tmp)?;
        // Only this engine names directories with its owner prefix, and never twice (a random nonce).
        let nonce = blake3::hash(unique_suffix().as_bytes()).to_hex();
        let dir = tmp.join(format!("{owner}.{safe}-{}", &nonce[..16]));
        // `create_dir`, not `create_dir_all`: should the name ever repeat, this fails instead of sharing a
        // directory with another engine.
        self.files.create_dir(&dir)?;
        Ok(dir)
    }

    /// Takes back the staging directory of a committed node: emptied of what the node left beside its
    /// published outputs (all but a [`STAGING_KEPT_FILE`]) and kept for [`Cache::staging_dir`], or removed
    /// when that fails or enough wait.
    pub fn recycle_staging(&self, dir: &Path) {
        let emptied = (|| -> io::Result<()> {
            // A node may have put a link where its folder was: that is removed below, never listed through.
            if !fs::symlink_metadata(dir)?.is_dir() {
                return Err(io::Error::other(
                    "the staging folder is no longer a directory",
                ));
            }
            for entry in fs::read_dir(dir)? {
                let path = entry?.path();
                let metadata = fs::symlink_metadata(&path)?;
                // Kept only as a plain file with no other name: a node that left a link there must not have
                // the next node's listing written through it.
                if path.file_name() == Some(STAGING_KEPT_FILE.as_ref())
                    && is_private_file(&metadata)
                {
                    continue;
                }
                if metadata.is_dir() {
                    self.files.remove_dir_all(&path)?;
                } else {
                    self.files.remove_file(&path)?;
                }
            }
            Ok(())
        })();
        let mut pool = self
            .staging_pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if emptied.is_ok() && pool.len() < STAGING_POOL_MAX {
            pool.push(dir.to_owned());
        } else {
            drop(pool);
            let _ = self.files.remove_dir_all(dir);
        }
    }

    /// Removes the staging directories waiting for a node (at the end of a run).
    pub fn drain_staging_pool(&self) {
        let pooled = std::mem::take(
            &mut *self
                .staging_pool
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for dir in pooled {
            let _ = self.files.remove_dir_all(&dir);
        }
    }

    /// Removes the staging directories under `tmp/` whose engine is dead, and returns how many. An owner is dead
    /// when its lock file (`tmp/<owner>.lock`) can be locked: the kernel drops a dead holder's `flock`, and a live
    /// engine holds its own for as long as it lives, so a live engine's staging is never touched. An owner on
    /// another host counts as dead only after [`STALE_STAGING`] without a new staging directory, since a
    /// filesystem may keep locks local to each machine (see `keylock`). Staging without an owner (left by
    /// engines from before owners existed) goes after [`STALE_STAGING`] too.
    pub fn remove_dead_staging(&self) -> io::Result<usize> {
        let tmp = self.root.join("tmp");
        let Ok(listing) = fs::read_dir(&tmp) else {
            return Ok(0);
        };
        let mut owned: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        let mut unowned = Vec::new();
        for item in listing {
            let path = item?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            match name.split_once('.') {
                Some((owner, _)) if owner.starts_with(OWNER_PREFIX) => {
                    owned.entry(owner.to_owned()).or_default().push(path)
                }
                _ => unowned.push(path),
            }
        }
        let mut removed = 0;
        for (owner, paths) in owned {
            let lock_path = tmp.join(format!("{owner}.lock"));
            let Some(_dead) = StagingOwner::lock_if_dead(&lock_path)? else {
                continue;
            };
            for path in paths.iter().filter(|p| **p != lock_path) {
                if path.is_dir() {
                    self.files.remove_dir_all(path)?;
                    removed += 1;
                } else {
                    // The lock file of an owner killed while announcing itself (`.lock.new`).
                    self.remove_file(path)?;
                }
            }
            // Last, and while still holding its lock, so a half-done removal is finished by the next one.
            self.remove_file(&lock_path)?;
        }
        for path in unowned {
            if is_older_than(&path, STALE_STAGING) {
                if path.is_dir() {
                    self.files.remove_dir_all(&path)?;
                    removed += 1;
                } else {
                    self.remove_file(&path)?;
                }
            }
        }
        Ok(removed)
    }

    /// The entry for `key`, or None when absent or unreadable (an unreadable entry is a miss, never an error).
    pub fn get(&self, key: &Digest) -> Option<CacheEntry> {
        let (entry, _) = self.read_entry(key)?;
        self.blobs_exist(&entry.outputs, entry.log.as_ref())
            .then_some(entry)
    }

    /// Every blob an entry names is in the store.
    fn blobs_exist(&self, outputs: &Outputs, log: Option<&BlobRef>) -> bool {
        outputs
            .values()
            .chain(log)
            .all(|blob| self.blob_store.holds_digest(&blob.hash))
    }

    /// What `key` serves a run, or None on a miss: [`Cache::get`] without reading the entry when the hit index
    /// holds it for the entry file that is there now (see `hitindex`). Either way the entry must exist and
    /// every blob it names too. Renews the entry's use for `gc` (see [`Cache::touch`]).
    pub fn lookup(&self, key: &Digest) -> Option<Hit> {
        let hex = key.to_hex();
        let Some(entry_file) = self.entry_store.stat(&hex[..2], &hex, ".json") else {
            self.index.remove(key);
            return None;
        };
        let identity = EntryIdentity {
            dev: entry_file.dev,
            ino: entry_file.ino,
            size: entry_file.size,
            changed_ns: entry_file.changed_ns,
        };
        let hit = match self.index.get(key, identity) {
            Some(hit) => hit,
            None => {
                let (entry, identity) = self.read_entry(key)?;
                let hit = entry.hit();
                self.index.insert(identity, hit.clone());
                hit
            }
        };
        if !self.blobs_exist(&hit.outputs, hit.log.as_ref()) {
            self.index.remove(key);
            return None;
        }
        if !modified_lately(entry_file.modified) {
            self.renew(&self.entry_path(key));
        }
        Some(hit)
    }

    /// `key`'s entry, if it parses and names its own key, and the identity of the file it was read from (one
    /// open, so the two agree). An unreadable entry is a miss, never an error.
    fn read_entry(&self, key: &Digest) -> Option<(CacheEntry, EntryIdentity)> {
        let mut file = fs::File::open(self.entry_path(key)).ok()?;
        let identity = EntryIdentity::of(&file.metadata().ok()?);
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut file, &mut bytes).ok()?;
        let entry: CacheEntry = serde_json::from_slice(&bytes).ok()?;
        (entry.key == *key).then_some((entry, identity))
    }

    /// After a local miss, what the remote tier serves for `key`. With `fetch`, every blob the local cache
    /// lacks is downloaded and kept only if its bytes hash to its name, then the entry is stored locally (so
    /// `why`, `plan` and later runs see it as a local entry); without, the remote is only asked whether it
    /// holds the entry and its blobs (`plan`). Never an error: a remote that fails is turned off with one
    /// warning, an unusable entry or blob is reported and the node runs here.
    pub fn lookup_remote(&self, key: &Digest, fetch: bool) -> Option<Hit> {
        let tier = self.remote.as_deref()?;
        if !tier.is_up() {
            return None;
        }
        let mut bytes = Vec::new();
        match tier
            .store()
            .get_into(&remote::entry_object(key), &mut bytes, MAX_REMOTE_ENTRY)
        {
            Ok(true) => {}
            Ok(false) => {
                tier.count(|s| s.misses += 1);
                return None;
            }
            Err(error) => {
                tier.fail(&error);
                return None;
            }
        }
        let unusable = |why: &str| {
            tier.warn(&format!(
                "remote cache {}: {why} (key {}); the node runs here",
                tier.describe(),
                &key.to_hex()[..12]
            ));
        };
        let entry = match remote_entry(key, &bytes) {
            Ok(entry) => entry,
            Err(why) => {
                unusable(&format!("its entry is unusable: {why}"));
                return None;
            }
        };
        let missing: Vec<&BlobRef> = entry
            .outputs
            .values()
            .chain(entry.log.as_ref())
            .filter(|blob| !self.blob_path(&blob.hash).is_file())
            .collect();
        let mut downloaded = 0;
        for blob in missing {
            let got = if fetch {
                self.fetch_blob(tier.store(), blob)
            } else {
                match tier.store().head(&remote::blob_object(&blob.hash)) {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err(BlobFetch::Unusable("a blob it names is missing".into())),
                    Err(error) => Err(BlobFetch::Store(error)),
                }
            };
            match got {
                Ok(()) => downloaded += blob.size,
                Err(BlobFetch::Store(error)) => {
                    tier.fail(&error);
                    return None;
                }
                Err(BlobFetch::Mismatch(why)) => {
                    tier.reject(&blob.hash);
                    unusable(&why);
                    return None;
                }
                Err(BlobFetch::Unusable(why)) => {
                    unusable(&why);
                    return None;
                }
            }
        }
        if fetch {
            // The blobs' names are durable before the entry that names them.
            let dirs = entry
                .outputs
                .values()
                .chain(entry.log.as_ref())
                .map(|b| self.blob_dir(&b.hash))
                .collect();
            let stored = self.sync_dirs(vec![(true, dirs)]).pop().unwrap_or(Ok(()));
            if let Err(error) = stored.and_then(|()| self.keep_remote_entry(&entry, &bytes)) {
                unusable(&format!("storing its entry here failed: {error}"));
                return None;
            }
            tier.count(|s| {
                s.hits += 1;
                s.downloaded_bytes += downloaded + bytes.len() as u64;
            });
        }
        Some(entry.hit())
    }

    /// Downloads one blob into the store: to a private temporary, hashed, fsynced, renamed to its name.
    fn fetch_blob(&self, store: &dyn RemoteStore, blob: &BlobRef) -> Result<(), BlobFetch> {
        let target = self.blob_path(&blob.hash);
        let dir = target.parent().unwrap_or(&self.root).to_owned();
        let local = |e: io::Error| BlobFetch::Unusable(format!("writing a blob here failed: {e}"));
        self.files.create_dir_all_durable(&dir).map_err(local)?;
        let staged = dir.join(format!(
            ".{}.{}.part",
            &blob.hash.to_hex()[..16],
            unique_suffix()
        ));
        let result = (|| {
            let mut file = self.files.create_new(&staged).map_err(local)?;
            let mut hashing = HashingWriter {
                file: &mut *file,
                hasher: blake3::Hasher::new(),
            };
            match store.get_into(&remote::blob_object(&blob.hash), &mut hashing, blob.size) {
                Ok(true) => {}
                Ok(false) => return Err(BlobFetch::Unusable("a blob it names is missing".into())),
                Err(error) => return Err(BlobFetch::Store(error)),
            }
            let actual = Digest::from(hashing.hasher.finalize());
            if actual != blob.hash {
                return Err(BlobFetch::Mismatch(format!(
                    "blob {} from the remote does not match its hash (got {}); discarded",
                    &blob.hash.to_hex()[..12],
                    &actual.to_hex()[..12]
                )));
            }
            io::Write::flush(&mut file).map_err(local)?;
            drop(file);
            self.files.sync_file(&staged).map_err(local)?;
            self.files.set_readonly(&staged).map_err(local)?;
            self.files.rename(&staged, &target).map_err(local)
        })();
        if result.is_err() {
            let _ = self.files.remove_file(&staged);
        }
        result
    }

    /// Stores a remote entry (whose blobs are all here now) as a local one, with its node's pointer.
    fn keep_remote_entry(&self, entry: &CacheEntry, bytes: &[u8]) -> io::Result<()> {
        let entry_path = self.entry_path(&entry.key);
        self.files.publish(&entry_path, bytes, Publish::Durable)?;
        if let Ok(metadata) = fs::metadata(&entry_path) {
            self.index.insert(EntryIdentity::of(&metadata), entry.hit());
        }
        self.record_pointers(&[(&entry.node, entry.key, entry.seconds)])
    }

    /// Queues `entry`, just built here by a node of `kind`, for upload to the remote tier, if there is one
    /// that takes uploads and the policy lets it travel.
    pub fn upload(&self, entry: &CacheEntry, kind: &str) {
        let Some(tier) = self.remote.as_deref() else {
            return;
        };
        if tier.mode() == remote::RemoteMode::Read || !tier.is_up() {
            return;
        }
        let blobs: Vec<(Digest, PathBuf, u64)> = entry
            .outputs
            .values()
            .chain(entry.log.as_ref())
            .map(|b| (b.hash, self.blob_path(&b.hash), b.size))
            .collect();
        let size: u64 = blobs.iter().map(|(_, _, size)| size).sum();
        let policy = tier.policy();
        if policy.skip_kinds.contains(kind) || size > policy.max_entry_bytes {
            tier.count(|s| s.skipped_uploads += 1);
            return;
        }
        let Ok(bytes) = fs::read(self.entry_path(&entry.key)) else {
            return;
        };
        tier.enqueue(Upload {
            key: entry.key,
            entry: bytes,
            blobs,
        });
    }

    /// Writes the hit index if this process changed it (best effort: the index only saves time).
    pub fn save_index(&self) {
        let _ = self.index.save(&self.files);
    }

    /// Removes a file another remover may have taken first.
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        match self.files.remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Takes in a node's result without committing it: every declared output becomes a private file in the
    /// staging directory (a symlink, or a file with a second name that may be a user's file elsewhere, is
    /// copied; a plain file stays where the node wrote it) and is hashed. Nothing is synced and nothing is
    /// visible in the cache until [`Cache::commit`]; dependents can read the staged files meanwhile.
    #[allow(clippy::too_many_arguments)]
    pub fn stage(
        &self,
        node: &str,
        fingerprint: &Fingerprint,
        staging: &Path,
        outputs: &[String],
        metrics: BTreeMap<String, serde_json::Value>,
        log: Option<&Path>,
        seconds: f64,
        created: String,
    ) -> io::Result<Staged> {
        // Each output: its name, its path, and whether it can be stored as it is when its `lstat` said so.
        let mut produced: Vec<(String, PathBuf, Option<bool>)> = Vec::new();
        for name in outputs {
            let path = staging.join(name);
            // `dir/` declares a directory output: every file under it is stored by its relative name.
            if name.ends_with('/') {
                if !path.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("declared output directory `{name}` was not produced"),
                    ));
                }
                for file in files_under(&path)? {
                    let relative = file
                        .strip_prefix(staging)
                        .unwrap_or(&file)
                        .to_string_lossy()
                        .into_owned();
                    produced.push((relative, file, None));
                }
                continue;
            }
            // One `lstat` tells both that the output is there and whether it can be stored as it is; a symbolic
            // link counts as produced when it leads to a file (`is_file` follows it), which is then copied.
            let own = match fs::symlink_metadata(&path) {
                Ok(metadata) if metadata.file_type().is_file() => metadata.nlink() == 1,
                Ok(metadata) if metadata.file_type().is_symlink() && path.is_file() => false,
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("declared output `{name}` was not produced"),
                    ));
                }
            };
            produced.push((name.clone(), path, Some(own)));
        }
        let mut files = BTreeMap::new();
        let mut stored = Outputs::new();
        for (copies, (name, path, own)) in produced.into_iter().enumerate() {
            let private = match own {
                Some(true) => path,
                Some(false) => self.private_copy(staging, &path, copies)?,
                None => self.private_file(staging, &path, copies)?,
            };
            // Its size is the bytes hashed: no `stat` after the read (a node's output cost three before).
            let (hash, size) = hash_and_size(&private)?;
            stored.insert(name.clone(), BlobRef { hash, size });
            files.insert(name, private);
        }
        let entry = CacheEntry {
            format_version: FORMAT_VERSION,
            key: fingerprint.key(),
            node: node.to_owned(),
            fingerprint: fingerprint.clone(),
            output_hash: output_hash(&stored, &metrics),
            outputs: stored,
            metrics,
            log: None,
            seconds,
            created,
        };
        Ok(Staged {
            entry,
            files,
            log: log
                .filter(|path| fs::metadata(path).is_ok_and(|m| m.len() > 0))
                .map(Path::to_owned),
        })
    }

    /// A file that only the cache will ever touch holding what `path` holds: `path` itself when it is a plain
    /// file with no other name, else a copy beside it in the staging directory. A hard link may be a user's
    /// file elsewhere, whose permissions and name must not change when the blob is made read-only and moved.
    fn private_file(&self, staging: &Path, path: &Path, serial: usize) -> io::Result<PathBuf> {
        if is_private_file(&fs::symlink_metadata(path)?) {
            return Ok(path.to_owned());
        }
        self.private_copy(staging, path, serial)
    }

    /// A copy of `path` that only the staging folder names, for an output that is a link or has other names.
    fn private_copy(&self, staging: &Path, path: &Path, serial: usize) -> io::Result<PathBuf> {
        let copies = staging.join(".fracflow-copies");
        self.files.create_dir_all(&copies)?;
        let copy = copies.join(serial.to_string());
        self.files.copy_new(path, &copy)?;
        Ok(copy)
    }

    /// Publishes a batch of staged results in one group commit, and returns each one's entry or error.
    ///
    /// The order is what makes power loss safe (`engine/core/tests/crash`): each new blob's data is synced
    /// before it gets its content's name (renamed from staging, or a copy for the log), then every blob
    /// directory the batch names is synced, so the blob names are durable before any entry that names them;
    /// then each entry is written to a temporary, synced, renamed into place (the commit point) and its
    /// directory synced. Syncing a batch together costs one round of syncs for all its nodes instead of one
    /// per node. A failure fails the entries it concerns; the others are committed.
    ///
    /// A batch of several results on a filesystem whose `syncfs` is durable replaces each round of syncs by
    /// one `syncfs` of the cache's filesystem, in the same order: blob data; blob names and entry data; entry
    /// names. Three calls per batch instead of about four per node, so the committer keeps up with nodes that
    /// finish faster than their results could be synced one by one: the 10 000-node fan-in of
    /// `bench/engine_vs_peers.sh` took 15.3–15.9 s instead of 21.4–22.2 s on a journaling ext4. A lone result
    /// is synced file by file: its few `fsync`s wait only for its own files, where a `syncfs` waits for
    /// everything any process wrote on that filesystem.
    pub fn commit(&self, batch: Vec<Staged>) -> Vec<io::Result<CacheEntry>> {
        let durability = if batch.len() > 1 && self.syncfs_is_durable {
            Durability::Filesystem
        } else {
            Durability::EachFile
        };
        let mut items: Vec<(Staged, io::Result<()>)> =
            batch.into_iter().map(|staged| (staged, Ok(()))).collect();
        // Blob data, synced where it is; the renames that name it come after every sync.
        let mut renames: Vec<(usize, PathBuf, PathBuf)> = Vec::new();
        for (i, (staged, state)) in items.iter_mut().enumerate() {
            *state = self.blob_data(staged, durability, &mut |from, to| {
                renames.push((i, from, to))
            });
        }
        self.sync_filesystem(durability, &mut items);
        // A rename that succeeds moved a file of the cache's own filesystem, which the `syncfs` above covered;
        // across filesystems, `name_blob` syncs its copy itself.
        for (i, from, to) in renames {
            let state = &mut items[i].1;
            if state.is_ok() {
                *state = self.name_blob(&from, &to);
            }
        }
        let blob_dirs = items.iter().map(|(staged, state)| {
            let blobs = staged
                .entry
                .outputs
                .values()
                .chain(staged.entry.log.as_ref());
            (
                state.is_ok(),
                blobs.map(|b| self.blob_dir(&b.hash)).collect(),
            )
        });
        let synced = match durability {
            Durability::EachFile => self.sync_dirs(blob_dirs.collect()),
            // Made durable with the entries' data, by the next `syncfs`, before any entry is named.
            Durability::Filesystem => items.iter().map(|_| Ok(())).collect(),
        };
        // Entries: data synced under a temporary name, renamed into place, then their directories synced.
        let mut temporaries: Vec<Option<PathBuf>> = Vec::with_capacity(items.len());
        for ((staged, state), blobs_durable) in items.iter_mut().zip(synced) {
            let mut tmp = None;
            if state.is_ok() {
                match blobs_durable.and_then(|()| self.entry_data(&staged.entry, durability)) {
                    Ok(path) => tmp = Some(path),
                    Err(e) => *state = Err(e),
                }
            }
            temporaries.push(tmp);
        }
        self.sync_filesystem(durability, &mut items);
        for ((staged, state), tmp) in items.iter_mut().zip(&temporaries) {
            if let (Ok(()), Some(tmp)) = (&state, tmp) {
                *state = self.files.rename(tmp, &self.entry_path(&staged.entry.key));
            }
        }
        let synced = match durability {
            Durability::EachFile => {
                let entry_dirs = items.iter().map(|(staged, state)| {
                    let dir = self.entry_path(&staged.entry.key);
                    (
                        state.is_ok(),
                        dir.parent().map(Path::to_owned).into_iter().collect(),
                    )
                });
                self.sync_dirs(entry_dirs.collect())
            }
            Durability::Filesystem => {
                self.sync_filesystem(durability, &mut items);
                items.iter().map(|_| Ok(())).collect()
            }
        };
        let mut results: Vec<io::Result<CacheEntry>> = items
            .into_iter()
            .zip(synced)
            .zip(temporaries)
            .map(|(((staged, state), durable), tmp)| {
                if let (Err(_), Some(tmp)) = (&state, &tmp) {
                    let _ = self.files.remove_file(tmp);
                }
                state.and(durable)?;
                let entry = staged.entry;
                let entry_path = self.entry_path(&entry.key);
                if let Ok(metadata) = fs::metadata(&entry_path) {
                    self.index.insert(EntryIdentity::of(&metadata), entry.hit());
                }
                Ok(entry)
            })
            .collect();
        let committed: Vec<(&str, Digest, f64)> = results
            .iter()
            .flatten()
            .map(|entry| (entry.node.as_str(), entry.key, entry.seconds))
            .collect();
        if let Err(error) = self.record_pointers(&committed) {
            for result in &mut results {
                if result.is_ok() {
                    *result = Err(io::Error::new(error.kind(), error.to_string()));
                }
            }
        }
        results
    }

    /// Publishes a node's result at once: [`Cache::stage`], then [`Cache::commit`] of it alone. The staging
    /// directory is left to the caller.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &self,
        node: &str,
        fingerprint: &Fingerprint,
        staging: &Path,
        outputs: &[String],
        metrics: BTreeMap<String, serde_json::Value>,
        log: Option<&Path>,
        seconds: f64,
        created: String,
    ) -> io::Result<CacheEntry> {
        let staged = self.stage(
            node,
            fingerprint,
            staging,
            outputs,
            metrics,
            log,
            seconds,
            created,
        )?;
        self.commit(vec![staged])
            .pop()
            .unwrap_or_else(|| Err(io::Error::other("a commit of one entry returned none")))
    }

    fn blob_dir(&self, hash: &Digest) -> PathBuf {
        self.root.join("blobs").join(&hash.to_hex()[..2])
    }

    /// Syncs the data of each of `staged`'s blobs the store lacks (the log as a copy beside its blob, since the
    /// run directory keeps the original), and hands `rename` what to move where once all are synced.
    fn blob_data(
        &self,
        staged: &mut Staged,
        durability: Durability,
        rename: &mut dyn FnMut(PathBuf, PathBuf),
    ) -> io::Result<()> {
        for (name, blob) in &staged.entry.outputs {
            let target = self.blob_path(&blob.hash);
            if target.is_file() {
                // Stored already; the staged copy goes with its staging directory.
                continue;
            }
            let file = staged
                .files
                .get(name)
                .ok_or_else(|| io::Error::other(format!("output `{name}` has no staged file")))?;
            self.create_store_dir(&self.blob_dir(&blob.hash), durability)?;
            self.sync_file_unless_filesystem(file, durability)?;
            self.files.set_readonly(file)?;
            rename(file.clone(), target);
        }
        if let Some(log) = &staged.log {
            let (hash, size) = hash_and_size(log)?;
            let blob = BlobRef { hash, size };
            let target = self.blob_path(&blob.hash);
            if !target.is_file() {
                let copy = self.blob_temporary(&blob.hash)?;
                self.files.copy_new(log, &copy)?;
                self.sync_file_unless_filesystem(&copy, durability)?;
                self.files.set_readonly(&copy)?;
                rename(copy, target);
            }
            staged.entry.log = Some(blob);
        }
        Ok(())
    }

    /// A name for a blob's temporary in its directory: unique per call and machine, since two nodes or two
    /// engines may store the same content at the same moment, and one writer truncating the other's temporary
    /// would publish a torn blob.
    fn blob_temporary(&self, hash: &Digest) -> io::Result<PathBuf> {
        let dir = self.blob_dir(hash);
        self.files.create_dir_all_durable(&dir)?;
        Ok(dir.join(format!(
            ".{}.{}.part",
            &hash.to_hex()[..16],
            unique_suffix()
        )))
    }

    /// Gives a synced blob its content's name. Another writer may have done so meanwhile: replacing its file is
    /// harmless, readers keep whole files. Staging on another filesystem than the blobs is copied over.
    fn name_blob(&self, from: &Path, to: &Path) -> io::Result<()> {
        match self.files.rename(from, to) {
            Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
                let hash = blob_name(to).ok_or_else(|| {
                    io::Error::other(format!("{} is not a blob's path", to.display()))
                })?;
                let copy = self.blob_temporary(&hash)?;
                self.files.copy_new(from, &copy)?;
                self.files.sync_file(&copy)?;
                self.files.set_readonly(&copy)?;
                self.files.rename(&copy, to)
            }
            other => other,
        }
    }

    /// Writes an entry to a temporary beside its final name, synced unless the filesystem is synced next, and
    /// returns the temporary.
    fn entry_data(&self, entry: &CacheEntry, durability: Durability) -> io::Result<PathBuf> {
        let path = self.entry_path(&entry.key);
        let dir = path.parent().unwrap_or(&self.root);
        let tmp = dir.join(format!("{}.json.{}.part", entry.key, unique_suffix()));
        // Written as it is serialized, never held whole: the entry of a node over a 300 000-point sweep names
        // every point in its fingerprint, tens of megabytes of JSON, made while the run holds the most.
        let written = self
            .create_store_dir(dir, durability)
            .and_then(|()| {
                let mut out = io::BufWriter::new(self.files.create_new(&tmp)?);
                serde_json::to_writer_pretty(&mut out, entry).map_err(io::Error::other)?;
                io::Write::flush(&mut out)
            })
            .and_then(|()| self.sync_file_unless_filesystem(&tmp, durability));
        if let Err(e) = written {
            let _ = self.files.remove_file(&tmp);
            return Err(e);
        }
        Ok(tmp)
    }

    /// Creates `dir` and its missing parents, each made durable in its parent at once unless the whole
    /// filesystem is synced next.
    fn create_store_dir(&self, dir: &Path, durability: Durability) -> io::Result<()> {
        let made = || self.shards_made.lock().unwrap_or_else(|e| e.into_inner());
        if made().contains(dir) {
            return Ok(());
        }
        match durability {
            Durability::EachFile => self.files.create_dir_all_durable(dir)?,
            Durability::Filesystem => self.files.create_dir_all(dir)?,
        }
        made().insert(dir.to_owned());
        Ok(())
    }

    /// Syncs `file`'s data, unless the whole filesystem is synced next.
    fn sync_file_unless_filesystem(&self, file: &Path, durability: Durability) -> io::Result<()> {
        match durability {
            Durability::EachFile => self.files.sync_file(file),
            Durability::Filesystem => Ok(()),
        }
    }

    /// In [`Durability::Filesystem`], one `syncfs` of the cache's filesystem: everything written so far is
    /// durable after it. Its failure (a write-back error somewhere on the filesystem) fails every item still
    /// going, since which of their files it concerned is unknown.
    fn sync_filesystem(&self, durability: Durability, items: &mut [(Staged, io::Result<()>)]) {
        if durability != Durability::Filesystem {
            return;
        }
        if let Err(e) = self.files.sync_fs(&self.root) {
            for (_, state) in items.iter_mut().filter(|(_, state)| state.is_ok()) {
                *state = Err(io::Error::new(
                    e.kind(),
                    format!("syncing the cache's filesystem failed: {e}"),
                ));
            }
        }
    }

    /// Syncs each directory named by an item that is still going (`.0`) once, and returns per item whether
    /// every directory it named was synced.
    fn sync_dirs(&self, items: Vec<(bool, Vec<PathBuf>)>) -> Vec<io::Result<()>> {
        let mut done: BTreeMap<PathBuf, Result<(), io::ErrorKind>> = BTreeMap::new();
        items
            .into_iter()
            .map(|(going, dirs)| {
                if !going {
                    return Ok(());
                }
                for dir in dirs {
                    let result = done
                        .entry(dir.clone())
                        .or_insert_with(|| self.files.sync_dir(&dir).map_err(|e| e.kind()));
                    if let Err(kind) = result {
                        return Err(io::Error::new(
                            *kind,
                            format!("syncing {} failed", dir.display()),
                        ));
                    }
                }
                Ok(())
            })
            .collect()
    }

    /// Records each committed `(node, key, seconds)` in this engine's pointer journal (see `pointers`).
    fn record_pointers(&self, committed: &[(&str, Digest, f64)]) -> io::Result<()> {
        self.pointers
            .record(|| StagingOwner::of(&self.root.join("tmp")), committed)
    }

    pub fn pointer(&self, node: &str) -> Option<NodePointer> {
        self.pointers.get(node, || self.pointer_path(node))
    }

    /// Folds the pointer journals of dead engines into the snapshot once they weigh (see `pointers`); answers
    /// how many. `fracflow run` calls it before it loads its pipeline: the fold holds every pointer in memory
    /// for a moment (66 MiB at 300 000 nodes), which the load then reuses instead of adding to a run's peak.
    pub fn fold_pointer_journals(&self) -> io::Result<usize> {
        self.fold_pointers(None)
    }

    /// Folds the pointer journals of dead engines into the snapshot; with `keep`, drops the pointers whose
    /// newest key it refuses.
    fn fold_pointers(&self, keep: Option<&dyn Fn(&Digest) -> bool>) -> io::Result<usize> {
        let tmp = self.root.join("tmp");
        self.pointers.fold(
            &self.locks_dir().join("pointers.folding"),
            |owner| {
                StagingOwner::lock_if_dead(&tmp.join(format!("{owner}.lock")))
                    .is_ok_and(|dead| dead.is_some())
            },
            keep,
        )
    }

    /// The newest entry stored for a node id, whatever its key.
    pub fn latest_for(&self, node: &str) -> Option<CacheEntry> {
        self.get(&self.pointer(node)?.latest_key)
    }

    /// Median of the node's recorded durations.
    pub fn median_duration(&self, node: &str) -> Option<f64> {
        self.pointer(node)?.median_duration()
    }

    /// Published entries; `*.part` files are temporaries of writes a kill cut short, never entries.
    fn entry_files(&self) -> io::Result<Vec<PathBuf>> {
        Ok(files_under(&self.root.join("entries"))?
            .into_iter()
            .filter(|p| !is_part(p))
            .collect())
    }

    /// Re-hashes every blob and checks every entry; names every corrupt file.
    ///
    /// Safe while engines write: they publish whole files by rename, blobs before entries. It holds the in-use
    /// lock so that a `gc` cannot delete a blob between reading an entry and checking the blob; on a cache it
    /// cannot lock (mounted read-only, say) no `gc` can delete anything either, so it verifies without.
    pub fn verify(&self) -> io::Result<VerifyReport> {
        let _in_use = self.in_use().ok();
        let mut report = VerifyReport::default();
        for path in self.entry_files()? {
            report.entries += 1;
            let parsed = fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<CacheEntry>(&b).map_err(|e| e.to_string()));
            match parsed {
                Err(reason) => report.corrupt.push(Corruption {
                    path,
                    reason: format!("unreadable entry: {reason}"),
                }),
                Ok(entry) => {
                    if entry.fingerprint.key() != entry.key
                        || path.file_stem().and_then(|s| s.to_str()) != Some(&*entry.key.to_hex())
                    {
                        report.corrupt.push(Corruption {
                            path: path.clone(),
                            reason: "entry key does not match its fingerprint".into(),
                        });
                    }
                    for (name, blob) in entry
                        .outputs
                        .iter()
                        .map(|(n, b)| (n.as_str(), b))
                        .chain(entry.log.iter().map(|b| ("log", b)))
                    {
                        if !self.blob_path(&blob.hash).is_file() {
                            report.corrupt.push(Corruption {
                                path: path.clone(),
                                reason: format!("output `{name}` blob {} is missing", blob.hash),
                            });
                        }
                    }
                }
            }
        }
        let blobs: Vec<PathBuf> = files_under(&self.root.join("blobs"))?
            .into_iter()
            .filter(|p| !is_part(p))
            .collect();
        report.blobs = blobs.len();
        use rayon::prelude::*;
        let mut bad: Vec<Corruption> = blobs
            .par_iter()
            .filter_map(|path| {
                let expected = blob_name(path);
                match hash_and_size(path) {
                    Ok((actual, _)) if Some(actual) == expected => None,
                    Ok(actual) => Some(Corruption {
                        path: path.clone(),
                        reason: format!("content hashes to {}, not its name", actual.0),
                    }),
                    Err(e) => Some(Corruption {
                        path: path.clone(),
                        reason: e.to_string(),
                    }),
                }
            })
            .collect();
        bad.sort_by(|a, b| a.path.cmp(&b.path));
        report.corrupt.extend(bad);
        Ok(report)
    }

    /// Deletes entries whose key is not in `keep`, then blobs no kept entry references, then stale staging and
    /// the lock files of dead holders.
    ///
    /// Refused (`ResourceBusy`) while any run uses the cache: a running engine may have stored blobs whose entry
    /// it has not written yet, may be about to link a blob it found, or be writing into a staging directory.
    /// Marks `key`'s entry as used now (its file's mtime), so `gc` on a shared cache keeps what any project
    /// used lately, not only what the collecting project's runs reference. Best effort: a read-only cache
    /// still serves hits.
    ///
    /// Refreshed at most once per [`TOUCH_INTERVAL`]: `gc` counts use in days, and a no-op run of a large
    /// pipeline must not write one file per node.
    pub fn touch(&self, key: &Digest) {
        let path = self.entry_path(key);
        if !fs::metadata(&path).is_ok_and(|m| used_lately(&m)) {
            self.renew(&path);
        }
    }

    /// Sets an entry file's mtime to now (its last use, for `gc`).
    fn renew(&self, entry_file: &Path) {
        let _ = self
            .files
            .set_modified(entry_file, std::time::SystemTime::now());
    }

    /// Removes every entry that is neither in `keep` nor used (built or hit) within `used_within`, then the
    /// blobs and node pointers no remaining entry needs.
    pub fn gc(&self, keep: &HashSet<Digest>, used_within: Duration) -> io::Result<GcReport> {
        let _alone = InUse::exclusive(&self.locks_dir())?;
        let mut report = GcReport::default();
        let mut live_blobs: HashSet<Digest> = HashSet::new();
        let mut kept: HashSet<Digest> = HashSet::new();
        let mut emptied: BTreeSet<PathBuf> = BTreeSet::new();
        for path in self.entry_files()? {
            let entry = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<CacheEntry>(&b).ok());
            match entry {
                Some(entry) if keep.contains(&entry.key) || !is_older_than(&path, used_within) => {
                    kept.insert(entry.key);
                    live_blobs.extend(
                        entry
                            .outputs
                            .values()
                            .chain(entry.log.iter())
                            .map(|b| b.hash),
                    );
                }
                _ => {
                    self.files.remove_file(&path)?;
                    report.entries_removed += 1;
                    emptied.extend(path.parent().map(Path::to_owned));
                }
            }
        }
        // The entries' removal is durable before any blob goes: power loss must not bring back an entry whose
        // blobs are gone.
        for dir in &emptied {
            self.files.sync_dir(dir)?;
        }
        for path in ["entries", "blobs", "nodes"]
            .iter()
            .flat_map(|d| files_under(&self.root.join(d)).unwrap_or_default())
        {
            if is_part(&path) && is_older_than(&path, STALE_STAGING) {
                self.files.remove_file(&path)?;
            }
        }
        for path in files_under(&self.root.join("blobs"))?
            .into_iter()
            .filter(|p| !is_part(p))
        {
            if !blob_name(&path).is_some_and(|hash| live_blobs.contains(&hash)) {
                report.bytes_freed += fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                self.files.remove_file(&path)?;
                report.blobs_removed += 1;
            }
        }
        // The pointers of removed entries go, and so do the pointer files of older engines, which the fold takes in.
        self.fold_pointers(Some(&|key| kept.contains(key)))?;
        // Staging of a run that is still going on must survive (its owner's lock says so).
        if report.entries_removed > 0 {
            // Its records of removed entries would only be misses; the next run writes it afresh.
            let _ = self.files.remove_file(self.index.path());
        }
        report.staging_removed = self.remove_dead_staging()?;
        report.locks_removed = keylock::remove_stale(&self.locks_dir())?;
        Ok(report)
    }
}

/// How the owner names of staging directories start: `tmp/fracflow-<16 hex>.<label>-<nonce>/`, beside
/// `tmp/fracflow-<16 hex>.lock`.
const OWNER_PREFIX: &str = "fracflow-";

/// This engine's claim on the staging directories it makes in one cache's `tmp/`: the `flock`ed lock file
/// `tmp/<owner>.lock`, held until the process ends (the kernel then drops it, however the engine died). It
/// records the host and pid for whoever looks.
#[derive(Debug)]
struct StagingOwner {
    name: String,
    lock_path: PathBuf,
    lock: fs::File,
}

#[derive(Debug, Serialize, Deserialize)]
struct OwnerRecord {
    host: String,
    pid: u32,
    since: String,
}

/// The owners this process holds, by `tmp/` directory (a process may open several caches).
static OWNERS: std::sync::Mutex<Vec<StagingOwner>> = std::sync::Mutex::new(Vec::new());

impl StagingOwner {
    /// This process's owner name in `tmp`, announced the first time it is needed (and again should someone
    /// have deleted its lock file).
    fn of(tmp: &Path) -> io::Result<String> {
        let mut owners = OWNERS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(owner) = owners.iter().find(|o| o.lock_path.parent() == Some(tmp))
            && keylock::names_file(&owner.lock_path, &owner.lock)
        {
            return Ok(owner.name.clone());
        }
        let nonce = blake3::hash(unique_suffix().as_bytes()).to_hex();
        let name = format!("{OWNER_PREFIX}{}", &nonce[..16]);
        // Locked under a name no sweeper looks at, then renamed into place: a `.lock` file is never seen
        // unlocked while its owner lives.
        let pending = tmp.join(format!("{name}.lock.new"));
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&pending)?;
        file.lock()?;
        let record = OwnerRecord {
            host: keylock::hostname(),
            pid: std::process::id(),
            since: crate::run::now_rfc3339(),
        };
        std::io::Write::write_all(
            &mut file,
            &serde_json::to_vec(&record).map_err(io::Error::other)?,
        )?;
        let lock_path = tmp.join(format!("{name}.lock"));
        fs::rename(&pending, &lock_path)?;
        owners.retain(|o| o.lock_path.parent() != Some(tmp));
        owners.push(StagingOwner {
            name: name.clone(),
            lock_path,
            lock: file,
        });
        Ok(name)
    }

    /// The owner's lock, taken, when its engine is dead; `None` while it lives (or may live, on another host).
    /// A missing lock file means the owner died while announcing itself, or a sweep was cut short.
    fn lock_if_dead(lock_path: &Path) -> io::Result<Option<Option<fs::File>>> {
        let file = match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(lock_path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let pending = lock_path.with_extension("lock.new");
                return Ok(is_older_than_or_gone(&pending, STALE_STAGING).then_some(None));
            }
            Err(e) => return Err(e),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        if !keylock::names_file(lock_path, &file) {
            // Another sweep removed it meanwhile.
            return Ok(None);
        }
        let record = fs::read(lock_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<OwnerRecord>(&bytes).ok());
        let here = record.is_some_and(|r| r.host == keylock::hostname());
        let dead = here || is_older_than(&newest_staging_of(lock_path), STALE_STAGING);
        Ok(dead.then_some(Some(file)))
    }
}

/// The owner's most recent sign of life: its lock file's or newest staging directory's modification time,
/// as a path whose age [`is_older_than`] can judge.
fn newest_staging_of(lock_path: &Path) -> PathBuf {
    let owner = lock_path
        .file_stem()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let mut newest = (lock_path.to_owned(), modified(lock_path));
    if let Some(Ok(listing)) = lock_path.parent().map(fs::read_dir) {
        for item in listing.flatten() {
            let path = item.path();
            let mine = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{owner}.")));
            let when = modified(&path);
            if mine && when > newest.1 {
                newest = (path, when);
            }
        }
    }
    newest.0
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn is_older_than_or_gone(path: &Path, age: std::time::Duration) -> bool {
    !path.exists() || is_older_than(path, age)
}

fn is_older_than(path: &Path, age: std::time::Duration) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|a| a > age)
}

fn is_part(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "part")
}

/// The hash a blob's path encodes (`blobs/ab/cdef…` → `abcdef…`), if it is a blob's.
fn blob_name(path: &Path) -> Option<Digest> {
    let head = path.parent()?.file_name()?.to_str()?;
    let tail = path.file_name()?.to_str()?;
    format!("{head}{tail}").parse().ok()
}

fn files_under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = fs::read_dir(&dir) else {
            continue;
        };
        for item in read {
            let path = item?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// An entry a remote sent for `key`, if it is one: it parses, names `key`, its format is this engine's, its
/// output hash is what its outputs and metrics make, and every name in it is safe to become a path.
fn remote_entry(key: &Digest, bytes: &[u8]) -> Result<CacheEntry, String> {
    let entry: CacheEntry =
        serde_json::from_slice(bytes).map_err(|e| format!("not an entry: {e}"))?;
    if entry.key != *key {
        return Err("it names another key".into());
    }
    if entry.format_version != FORMAT_VERSION {
        return Err(format!(
            "format {} (this engine reads {FORMAT_VERSION})",
            entry.format_version
        ));
    }
    // Its blobs' names parsed as digests (64 hex digits) or it would not have parsed; its outputs' names
    // become paths in run directories.
    if !entry
        .outputs
        .keys()
        .all(|name| remote::is_output_name(name))
    {
        return Err("it names an output that is not well-formed".into());
    }
    if output_hash(&entry.outputs, &entry.metrics) != entry.output_hash {
        return Err("its output hash does not match its outputs".into());
    }
    Ok(entry)
}

/// Writes through to a file and hashes what it writes.
struct HashingWriter<'a> {
    file: &'a mut (dyn io::Write + Send),
    hasher: blake3::Hasher,
}

impl io::Write for HashingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.file.write(buf)?;
        self.hasher.update(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fracflow_record::{RealFiles, atomic_write};
    use std::os::unix::fs::PermissionsExt;

    /// Leaves in `tmp/` what a dead engine of `host` leaves: its unlocked owner lock and one staging directory
    /// with a file in it; returns the staging directory.
    fn dead_owner(cache: &Cache, owner: &str, host: &str) -> io::Result<PathBuf> {
        let tmp = cache.root().join("tmp");
        let record = OwnerRecord {
            host: host.to_owned(),
            pid: 999_999,
            since: crate::run::now_rfc3339(),
        };
        fs::write(
            tmp.join(format!("{owner}.lock")),
            serde_json::to_vec(&record).map_err(io::Error::other)?,
        )?;
        let staging = tmp.join(format!("{owner}.node-0123456789abcdef"));
        fs::create_dir(&staging)?;
        fs::write(staging.join("half-written"), b"x")?;
        Ok(staging)
    }

    /// The real filesystem, except that `syncfs` is taken as durable and always fails (a write-back error).
    #[derive(Debug)]
    struct FailingSyncfs;

    impl fracflow_record::FileOps for FailingSyncfs {
        fn create_new(&self, path: &Path) -> io::Result<Box<dyn std::io::Write + Send>> {
            RealFiles.create_new(path)
        }
        fn open_append(&self, path: &Path) -> io::Result<Box<dyn fracflow_record::AppendFile>> {
            RealFiles.open_append(path)
        }
        fn sync_file(&self, path: &Path) -> io::Result<()> {
            RealFiles.sync_file(path)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            RealFiles.sync_dir(dir)
        }
        fn sync_fs(&self, _path: &Path) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
        fn sync_fs_is_durable(&self, _path: &Path) -> bool {
            true
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            RealFiles.rename(from, to)
        }
        fn create_dir(&self, dir: &Path) -> io::Result<()> {
            RealFiles.create_dir(dir)
        }
        fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
            RealFiles.hard_link(original, link)
        }
        fn symlink(&self, target: &Path, link: &Path) -> io::Result<()> {
            RealFiles.symlink(target, link)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            RealFiles.remove_file(path)
        }
        fn remove_dir(&self, dir: &Path) -> io::Result<()> {
            RealFiles.remove_dir(dir)
        }
        fn set_readonly(&self, path: &Path) -> io::Result<()> {
            RealFiles.set_readonly(path)
        }
        fn set_modified(&self, path: &Path, when: std::time::SystemTime) -> io::Result<()> {
            RealFiles.set_modified(path, when)
        }
    }

    /// A group committed by filesystem whose `syncfs` fails: every result of the group fails with the reason,
    /// and no entry is published (the blobs' data might not be durable). A lone result is synced file by file
    /// and commits.
    #[test]
    fn a_failed_syncfs_fails_its_whole_group_and_publishes_no_entry() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open_with(dir.path(), Files::new(Arc::new(FailingSyncfs)))?;
        let stage = |value: u64| stage_value(&cache, value).map(|(staged, _)| staged);
        let group = vec![stage(1)?, stage(2)?];
        let keys: Vec<Digest> = group.iter().map(|staged| staged.entry.key).collect();
        for (result, key) in cache.commit(group).into_iter().zip(&keys) {
            let message = result.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                message.starts_with("syncing the cache's filesystem failed: "),
                "{message}"
            );
            assert!(!cache.entry_path(key).exists(), "no entry for {key}");
        }
        let alone = cache.commit(vec![stage(3)?]).pop().transpose()?;
        assert!(alone.is_some_and(|entry| cache.entry_path(&entry.key).exists()));
        Ok(())
    }

    /// A committed node's staging directory comes back to the next node emptied, never to two nodes at once;
    /// one removed meanwhile is replaced by a new one; what still waits at the end of a run is removed.
    #[test]
    fn a_recycled_staging_directory_comes_back_empty_to_one_node() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let first = cache.staging_dir("first")?;
        fs::write(first.join("undeclared"), b"x")?;
        fs::create_dir(first.join("scratch"))?;
        fs::write(first.join("scratch").join("file"), b"y")?;
        cache.recycle_staging(&first);
        let second = cache.staging_dir("second")?;
        assert_eq!(first, second, "the emptied directory is reused as it is");
        assert_eq!(fs::read_dir(&second)?.count(), 0);
        let beside = cache.staging_dir("beside")?;
        assert_ne!(beside, second, "a node running meanwhile gets its own");
        assert!(beside.display().to_string().contains(".beside-"));
        cache.recycle_staging(&beside);
        fs::remove_dir(&beside)?;
        let replaced = cache.staging_dir("replaced")?;
        assert!(replaced.is_dir() && replaced != beside);
        // A link put where a pooled directory was is removed, and what it leads to is left alone.
        let users_dir = dir.path().join("users-dir");
        fs::create_dir(&users_dir)?;
        fs::write(users_dir.join("file"), b"keep me")?;
        cache.recycle_staging(&replaced);
        fs::remove_dir(&replaced)?;
        std::os::unix::fs::symlink(&users_dir, &replaced)?;
        let fresh = cache.staging_dir("fresh")?;
        assert!(fresh.is_dir() && fresh != replaced);
        assert!(fs::symlink_metadata(&replaced).is_err(), "the link is gone");
        assert_eq!(fs::read(users_dir.join("file"))?, b"keep me");
        fs::remove_dir(&fresh)?;
        cache.recycle_staging(&second);
        assert!(second.is_dir(), "kept for the next node");
        cache.drain_staging_pool();
        assert!(!second.exists());
        let third = cache.staging_dir("third")?;
        assert!(third.is_dir() && third != second);
        Ok(())
    }

    /// The kept file comes back as the same inode, so rewriting it allocates none; a link or a symlink left
    /// under its name is removed, so the next node's listing is never written into a file someone else names.
    #[test]
    fn a_recycled_staging_directory_keeps_its_plain_kept_file_and_nothing_linked() -> io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let first = cache.staging_dir("first")?;
        fs::write(first.join(STAGING_KEPT_FILE), b"a\t/x\n")?;
        let inode = fs::metadata(first.join(STAGING_KEPT_FILE))?.ino();
        cache.recycle_staging(&first);
        let second = cache.staging_dir("second")?;
        let names: Vec<_> = fs::read_dir(&second)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        assert_eq!(names, [STAGING_KEPT_FILE]);
        assert_eq!(fs::metadata(second.join(STAGING_KEPT_FILE))?.ino(), inode);

        let users_file = dir.path().join("users-file");
        fs::write(&users_file, b"keep me")?;
        fs::remove_file(second.join(STAGING_KEPT_FILE))?;
        fs::hard_link(&users_file, second.join(STAGING_KEPT_FILE))?;
        cache.recycle_staging(&second);
        let third = cache.staging_dir("third")?;
        assert_eq!(fs::read_dir(&third)?.count(), 0, "a hard link is not kept");
        std::os::unix::fs::symlink(&users_file, third.join(STAGING_KEPT_FILE))?;
        cache.recycle_staging(&third);
        let fourth = cache.staging_dir("fourth")?;
        assert_eq!(fs::read_dir(&fourth)?.count(), 0, "a symlink is not kept");
        assert_eq!(fs::read(&users_file)?, b"keep me");
        cache.drain_staging_pool();
        Ok(())
    }

    /// A node that replaced its staging folder by a link (its command knows the path) has the link removed at
    /// recycling, and what it leads to left alone.
    #[test]
    fn a_staging_folder_replaced_by_a_link_is_not_emptied_through_it() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let users_dir = dir.path().join("users-dir");
        fs::create_dir(&users_dir)?;
        fs::write(users_dir.join("file"), b"keep me")?;
        let staging = cache.staging_dir("linked")?;
        fs::remove_dir(&staging)?;
        std::os::unix::fs::symlink(&users_dir, &staging)?;
        cache.recycle_staging(&staging);
        assert!(fs::symlink_metadata(&staging).is_err(), "the link is gone");
        assert_eq!(fs::read(users_dir.join("file"))?, b"keep me");
        let next = cache.staging_dir("next")?;
        assert!(next.is_dir() && next != staging, "not pooled");
        Ok(())
    }

    #[test]
    fn the_staging_of_a_dead_engine_is_removed_and_a_live_ones_is_kept() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let live = cache.staging_dir("running node")?;
        let dead = dead_owner(&cache, "fracflow-00000000deadbeef", &keylock::hostname())?;
        assert_eq!(cache.remove_dead_staging()?, 1);
        assert!(live.is_dir(), "this engine's staging must survive");
        assert!(!dead.exists(), "the dead engine's staging must go");
        let left: Vec<String> = fs::read_dir(cache.root().join("tmp"))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), 2, "our staging and our lock: {left:?}");
        assert!(left.iter().all(|n| !n.contains("deadbeef")), "{left:?}");
        // A second staging directory of this engine has the same owner.
        let again = cache.staging_dir("next")?;
        let owner_of = |p: &Path| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split_once('.'))
                .map(|(o, _)| o.to_owned())
        };
        assert_eq!(owner_of(&again), owner_of(&live));
        Ok(())
    }

    #[test]
    fn the_staging_of_an_owner_on_another_host_waits_for_its_age() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        // Its lock may be local to that host, so an unlocked file proves nothing yet.
        let elsewhere = dead_owner(&cache, "fracflow-00000000000e15e0", "another-host")?;
        let legacy = cache.root().join("tmp/node-0123456789abcdef");
        fs::create_dir(&legacy)?;
        assert_eq!(cache.remove_dead_staging()?, 0);
        assert!(elsewhere.is_dir() && legacy.is_dir());
        let old = std::time::SystemTime::now() - STALE_STAGING - Duration::from_secs(60);
        for path in [
            elsewhere.clone(),
            cache.root().join("tmp/fracflow-00000000000e15e0.lock"),
            legacy.clone(),
        ] {
            fs::File::open(&path)?.set_modified(old)?;
        }
        assert_eq!(cache.remove_dead_staging()?, 2);
        assert!(!elsewhere.exists() && !legacy.exists());
        Ok(())
    }

    #[test]
    fn gc_and_a_run_starting_remove_dead_staging() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let host = keylock::hostname();
        let first = dead_owner(&cache, "fracflow-0000000000000001", &host)?;
        let report = cache.gc(&HashSet::new(), Duration::ZERO)?;
        assert_eq!(report.staging_removed, 1);
        assert!(!first.exists());
        let second = dead_owner(&cache, "fracflow-0000000000000002", &host)?;
        let _run = cache.in_use()?;
        assert!(!second.exists(), "a run's start sweeps too");
        Ok(())
    }

    /// A committed node's pointer is read back by a later command on the cache; the journal of a dead engine is
    /// folded into the snapshot, and `gc` drops the pointers whose entries it removed.
    #[test]
    fn pointers_are_read_back_folded_and_dropped_with_their_entries() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let (staged, _) = stage_value(&cache, 1)?;
        let kept = staged.entry.key;
        cache
            .commit(vec![staged])
            .into_iter()
            .next()
            .expect("one result")?;
        assert_eq!(
            Cache::open(dir.path())?
                .pointer("node-1")
                .map(|p| p.latest_key),
            Some(kept)
        );
        // A dead engine's journal: its owner has no lock file left.
        let gone = Digest::from_bytes([7; 32]);
        let journal = dir.path().join("nodes/fracflow-00000000000000aa.jsonl");
        fs::write(
            &journal,
            format!(
                "{{\"node\":\"node-1\",\"key\":\"{kept}\",\"seconds\":0.5}}\n{{\"node\":\"gone\",\"key\":\"{gone}\",\"seconds\":1.0}}\n"
            ),
        )?;
        assert_eq!(cache.fold_pointer_journals()?, 1);
        assert!(!journal.exists(), "a dead engine's journal is folded");
        assert!(dir.path().join("nodes/pointers.json").exists());
        let read = Cache::open(dir.path())?;
        assert_eq!(read.pointer("gone").map(|p| p.latest_key), Some(gone));
        read.gc(&HashSet::from([kept]), Duration::ZERO)?;
        let read = Cache::open(dir.path())?;
        assert!(read.pointer("gone").is_none(), "its entry never existed");
        assert_eq!(read.pointer("node-1").map(|p| p.latest_key), Some(kept));
        Ok(())
    }

    /// A pointer journal that cannot be written fails the group it records, naming the journal; the entries,
    /// committed before, stay.
    #[test]
    fn a_pointer_journal_that_cannot_be_written_fails_its_group_naming_it() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let (staged, _) = stage_value(&cache, 1)?;
        let key = staged.entry.key;
        fs::remove_dir(dir.path().join("nodes"))?;
        fs::write(dir.path().join("nodes"), b"not a folder")?;
        let error = cache
            .commit(vec![staged])
            .into_iter()
            .next()
            .expect("one result")
            .expect_err("the journal cannot be made");
        assert!(
            error.to_string().starts_with(&format!(
                "cannot write the node pointer journal {}",
                dir.path().join("nodes").display()
            )),
            "{error}"
        );
        assert!(
            cache.get(&key).is_some(),
            "the entry was committed before the pointers"
        );
        Ok(())
    }

    /// Stages one output, `output {value}`, of a node keyed by `value` in a fresh staging directory; returns the
    /// staged result and that directory.
    pub(crate) fn stage_value(cache: &Cache, value: u64) -> io::Result<(Staged, PathBuf)> {
        let staging = cache.staging_dir("node")?;
        fs::write(staging.join("out"), format!("output {value}"))?;
        let mut fingerprint = fingerprint();
        fingerprint
            .config
            .insert("value".to_owned(), serde_json::json!(value));
        let staged = cache.stage(
            &format!("node-{value}"),
            &fingerprint,
            &staging,
            &["out".to_owned()],
            BTreeMap::new(),
            None,
            0.1,
            "now".into(),
        )?;
        Ok((staged, staging))
    }

    fn fingerprint() -> Fingerprint {
        Fingerprint {
            version: 1,
            kind: "test".into(),
            kind_version: 1,
            config: crate::Settings::new(),
            point: crate::Settings::new(),
            outputs: vec!["out".into()],
            inputs: BTreeMap::new(),
            upstream: BTreeMap::new(),
            tools: BTreeMap::new(),
            testbed: BTreeMap::new(),
            placement: Vec::new(),
        }
    }

    /// Many writers of one key and one blob at once (what engines whose locks do not reach each other do):
    /// every `put` succeeds and the cache verifies clean.
    #[test]
    fn concurrent_puts_of_one_key_all_succeed_and_verify_clean() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let writers: Vec<Cache> = (0..8)
            .map(|_| Cache::open(dir.path()))
            .collect::<io::Result<_>>()?;
        let print = fingerprint();
        std::thread::scope(|scope| -> io::Result<()> {
            let handles: Vec<_> = writers
                .iter()
                .enumerate()
                .map(|(i, cache)| {
                    let print = &print;
                    scope.spawn(move || -> io::Result<CacheEntry> {
                        let staged = cache.staging_dir("node")?;
                        fs::write(staged.join("out"), vec![7u8; 1 << 20])?;
                        let log = staged.join("node.log");
                        fs::write(&log, format!("writer {i}\n"))?;
                        cache.put(
                            "node",
                            print,
                            &staged,
                            &["out".to_owned()],
                            BTreeMap::new(),
                            Some(&log),
                            0.1,
                            "now".into(),
                        )
                    })
                })
                .collect();
            for handle in handles {
                handle
                    .join()
                    .map_err(|_| io::Error::other("writer panicked"))??;
            }
            Ok(())
        })?;
        let cache = &writers[0];
        let report = cache.verify()?;
        assert!(report.corrupt.is_empty(), "{:?}", report.corrupt);
        assert_eq!(report.entries, 1);
        let entry = cache.get(&print.key()).expect("the key is cached");
        assert_eq!(entry.outputs["out"].size, 1 << 20);
        let leftovers: Vec<PathBuf> = files_under(dir.path())?
            .into_iter()
            .filter(|p| is_part(p))
            .collect();
        assert!(leftovers.is_empty(), "no temporaries left: {leftovers:?}");
        Ok(())
    }

    /// A cache in `dir` holding one entry, whose one output holds `content`.
    fn cache_with_one_entry(dir: &Path, content: &[u8]) -> io::Result<(Cache, CacheEntry)> {
        let cache = Cache::open(dir)?;
        let staged = cache.staging_dir("node")?;
        fs::write(staged.join("out"), content)?;
        let entry = cache.put(
            "node",
            &fingerprint(),
            &staged,
            &["out".to_owned()],
            BTreeMap::new(),
            None,
            0.1,
            "now".into(),
        )?;
        Ok((cache, entry))
    }

    /// A staged output of its own is moved into the blob store; one that is another file's second name is
    /// copied, and that file keeps its name and permissions.
    #[test]
    fn staged_outputs_are_moved_unless_they_name_a_file_elsewhere() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(&dir.path().join("cache"))?;
        let outside = dir.path().join("users-file");
        fs::write(&outside, b"the user's own file")?;
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o640))?;
        let staged = cache.staging_dir("node")?;
        fs::write(staged.join("own"), b"made by the node")?;
        fs::hard_link(&outside, staged.join("linked"))?;
        let entry = cache.put(
            "node",
            &fingerprint(),
            &staged,
            &["own".to_owned(), "linked".to_owned()],
            BTreeMap::new(),
            None,
            0.1,
            "now".into(),
        )?;
        assert!(!staged.join("own").exists(), "moved, not copied");
        for (name, content) in [
            ("own", &b"made by the node"[..]),
            ("linked", b"the user's own file"),
        ] {
            let blob = cache.blob_path(&entry.outputs[name].hash);
            assert_eq!(fs::read(&blob)?, content);
            assert_eq!(fs::metadata(&blob)?.permissions().mode() & 0o777, 0o444);
        }
        assert_eq!(fs::metadata(&outside)?.permissions().mode() & 0o777, 0o640);
        assert_eq!(
            fs::metadata(&outside)?.nlink(),
            2,
            "the staged name is still there, not moved"
        );
        Ok(())
    }

    /// A staged output that is a symbolic link to a file is stored as a copy of that file, with its size; a link
    /// to nothing or to a folder, and a folder, are not a produced output.
    #[test]
    fn a_linked_output_is_copied_and_one_that_is_no_file_was_not_produced() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(&dir.path().join("cache"))?;
        let target = dir.path().join("target");
        fs::write(&target, b"eleven byte")?;
        let put = |name: &str| {
            let staged = cache.staging_dir("node")?;
            let path = staged.join(name);
            match name {
                "link" => std::os::unix::fs::symlink(&target, &path)?,
                "dangling" => std::os::unix::fs::symlink(dir.path().join("none"), &path)?,
                "to-folder" => std::os::unix::fs::symlink(dir.path(), &path)?,
                _ => fs::create_dir(&path)?,
            }
            cache.put(
                "node",
                &fingerprint(),
                &staged,
                &[name.to_owned()],
                BTreeMap::new(),
                None,
                0.1,
                "now".into(),
            )
        };
        let entry = put("link")?;
        let blob = &entry.outputs["link"];
        assert_eq!(blob.size, 11);
        assert_eq!(fs::read(cache.blob_path(&blob.hash))?, b"eleven byte");
        assert!(target.is_file(), "the link's target stays where it is");
        for name in ["dangling", "to-folder", "folder"] {
            let error = put(name).expect_err(name);
            assert_eq!(error.kind(), io::ErrorKind::NotFound, "{name}");
            assert!(
                error.to_string().contains("was not produced"),
                "{name}: {error}"
            );
        }
        Ok(())
    }

    /// A run's hits come from the index only while the entry file and the blobs it was taken from are there.
    #[test]
    fn the_hit_index_is_checked_against_the_entry_and_its_blobs() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (cache, entry) = cache_with_one_entry(dir.path(), b"first result")?;
        cache.save_index();
        let index_file = dir.path().join("index.msgpack");
        assert!(index_file.is_file(), "a put is recorded");
        // A fresh engine serves the hit recorded for the entry file that is there...
        let fresh = Cache::open(dir.path())?;
        assert_eq!(fresh.lookup(&entry.key), Some(entry.hit()));
        // ...and an entry replaced by another (a new file, as every publish is) is read again.
        let mut other = entry.clone();
        other.seconds = 7.5;
        atomic_write(
            &cache.entry_path(&entry.key),
            &serde_json::to_vec(&other).map_err(io::Error::other)?,
        )?;
        let after_replace = Cache::open(dir.path())?;
        assert_eq!(
            after_replace.lookup(&entry.key).map(|h| h.seconds),
            Some(7.5)
        );
        // A blob gone (a rename lost to power loss) makes the recorded hit a miss.
        let blob = &entry.outputs["out"];
        fs::remove_file(cache.blob_path(&blob.hash))?;
        assert_eq!(Cache::open(dir.path())?.lookup(&entry.key), None);
        // An index that is garbage is no index at all.
        fs::write(&index_file, b"\0\0\0\0")?;
        assert_eq!(Cache::open(dir.path())?.lookup(&entry.key), None);
        Ok(())
    }

    #[test]
    fn gc_removes_nothing_while_a_run_holds_the_cache() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (cache, entry) = cache_with_one_entry(dir.path(), b"kept while the run lives")?;
        let run = cache.in_use()?;
        let refused = cache
            .gc(&HashSet::new(), Duration::ZERO)
            .expect_err("a run uses the cache");
        assert_eq!(refused.kind(), io::ErrorKind::ResourceBusy);
        assert!(cache.get(&entry.key).is_some(), "nothing was removed");
        drop(run);
        let report = cache.gc(&HashSet::new(), Duration::ZERO)?;
        assert_eq!((report.entries_removed, report.blobs_removed), (1, 1));
        Ok(())
    }

    /// On a shared cache another project's entries are not in this project's keep set: gc keeps them while they
    /// were used lately, and removes them once they have not been for longer than the window.
    #[test]
    fn gc_keeps_entries_used_lately_by_anyone() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (cache, entry) = cache_with_one_entry(dir.path(), b"another project's result")?;
        let week = Duration::from_secs(7 * 86_400);
        let report = cache.gc(&HashSet::new(), week)?;
        assert_eq!(report.entries_removed, 0, "built just now");
        let entry_file = cache.entry_path(&entry.key);
        let long_ago = std::time::SystemTime::now() - Duration::from_secs(30 * 86_400);
        fs::File::options()
            .append(true)
            .open(&entry_file)?
            .set_modified(long_ago)?;
        cache.touch(&entry.key);
        assert_eq!(
            cache.gc(&HashSet::new(), week)?.entries_removed,
            0,
            "a hit renews it"
        );
        fs::File::options()
            .append(true)
            .open(&entry_file)?
            .set_modified(long_ago)?;
        let report = cache.gc(&HashSet::new(), week)?;
        assert_eq!((report.entries_removed, report.blobs_removed), (1, 1));
        assert!(cache.get(&entry.key).is_none());
        Ok(())
    }
}
