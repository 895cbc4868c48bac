//! The content-addressed cache: output blobs by hash, one entry per key, a pointer per node for `why` and ETAs.
//!
//! Layout under the cache directory:
//! `blobs/ab/cdef…` (read-only content), `entries/ab/<key>.json`, `nodes/<blake3 of node id>.json`,
//! `tmp/` (staging, cleaned by `gc`), `stat.json` (the stat cache). Every file is published by
//! temp → fsync → rename, so a kill leaves the old state or the new.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::statcache::hash_file;
use fracflow_record::{FORMAT_VERSION, atomic_replace, atomic_write};

/// Staging directories and `*.part` files older than this are left over from killed runs.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

static BLOB_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many past durations a node pointer keeps for estimates.
const DURATION_HISTORY: usize = 9;

/// One stored output file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    pub hash: String,
    pub size: u64,
}

/// What the cache holds for one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    pub format_version: u32,
    pub key: String,
    pub node: String,
    pub fingerprint: Fingerprint,
    pub outputs: BTreeMap<String, BlobRef>,
    pub metrics: BTreeMap<String, serde_json::Value>,
    /// The node's log of the run that produced it.
    pub log: Option<BlobRef>,
    /// Hash over outputs and metrics: what dependents' keys include.
    pub output_hash: String,
    pub seconds: f64,
    pub created: String,
}

/// The newest entry of a node and its recent durations.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodePointer {
    pub node: String,
    pub latest_key: String,
    pub durations: Vec<f64>,
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
}

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// Hash of a node's result as its dependents see it.
pub fn output_hash(
    outputs: &BTreeMap<String, BlobRef>,
    metrics: &BTreeMap<String, serde_json::Value>,
) -> String {
    let mut hasher = blake3::Hasher::new();
    for (name, blob) in outputs {
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        hasher.update(blob.hash.as_bytes());
        hasher.update(&[0]);
    }
    hasher.update(b"metrics");
    hasher.update(
        serde_json::to_string(metrics)
            .unwrap_or_default()
            .as_bytes(),
    );
    hasher.finalize().to_hex().to_string()
}

fn split(hash: &str) -> (&str, &str) {
    hash.split_at(hash.len().min(2))
}

impl Cache {
    pub fn open(root: &Path) -> io::Result<Cache> {
        for sub in ["blobs", "entries", "nodes", "tmp"] {
            fs::create_dir_all(root.join(sub))?;
        }
        Ok(Cache {
            root: root.to_owned(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn stat_cache_file(&self) -> PathBuf {
        self.root.join("stat.json")
    }

    pub fn blob_path(&self, hash: &str) -> PathBuf {
        let (head, tail) = split(hash);
        self.root.join("blobs").join(head).join(tail)
    }

    fn entry_path(&self, key: &str) -> PathBuf {
        let (head, _) = split(key);
        self.root
            .join("entries")
            .join(head)
            .join(format!("{key}.json"))
    }

    fn pointer_path(&self, node: &str) -> PathBuf {
        self.root
            .join("nodes")
            .join(format!("{}.json", blake3::hash(node.as_bytes()).to_hex()))
    }

    /// A fresh private staging directory; nothing in it is visible to anyone until `put` publishes it.
    pub fn staging_dir(&self, label: &str) -> io::Result<PathBuf> {
        let safe: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let nonce = blake3::hash(
            format!(
                "{label}{}{:?}",
                std::process::id(),
                std::time::SystemTime::now()
            )
            .as_bytes(),
        )
        .to_hex();
        let dir = self
            .root
            .join("tmp")
            .join(format!("{safe}-{}", &nonce[..16]));
        fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// The entry for `key`, or None when absent or unreadable (an unreadable entry is a miss, never an error).
    pub fn get(&self, key: &str) -> Option<CacheEntry> {
        let bytes = fs::read(self.entry_path(key)).ok()?;
        let entry: CacheEntry = serde_json::from_slice(&bytes).ok()?;
        let complete = entry.key == key
            && entry
                .outputs
                .values()
                .chain(entry.log.iter())
                .all(|b| self.blob_path(&b.hash).is_file());
        complete.then_some(entry)
    }

    /// Moves a file into the blob store (by rename when possible) and returns its reference.
    pub fn store_blob(&self, file: &Path) -> io::Result<BlobRef> {
        let hash = hash_file(file)?;
        let size = fs::metadata(file)?.len();
        let target = self.blob_path(&hash);
        if !target.is_file() {
            let dir = target.parent().unwrap_or(&self.root).to_owned();
            fs::create_dir_all(&dir)?;
            // Unique per call: two nodes may store the same content at the same moment.
            let serial = BLOB_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let staged = dir.join(format!(
                ".{}.{}.{serial}.part",
                &hash[..16],
                std::process::id()
            ));
            fs::copy(file, &staged)?;
            fs::File::open(&staged)?.sync_all()?;
            fs::set_permissions(&staged, fs::Permissions::from_mode(0o444))?;
            // No directory fsync: if power loss undoes this rename, the entry that names the blob is
            // incomplete and `get` treats it as a miss, so the node simply runs again.
            fs::rename(&staged, &target)?;
        }
        Ok(BlobRef { hash, size })
    }

    /// Publishes a node's result: blobs first, then the entry (the commit point), then the node pointer.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &self,
        node: &str,
        fingerprint: &Fingerprint,
        staged: &Path,
        outputs: &[String],
        metrics: BTreeMap<String, serde_json::Value>,
        log: Option<&Path>,
        seconds: f64,
        created: String,
    ) -> io::Result<CacheEntry> {
        let mut stored = BTreeMap::new();
        for name in outputs {
            let path = staged.join(name);
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
                        .strip_prefix(staged)
                        .unwrap_or(&file)
                        .to_string_lossy()
                        .into_owned();
                    stored.insert(relative, self.store_blob(&file)?);
                }
                continue;
            }
            if !path.is_file() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("declared output `{name}` was not produced"),
                ));
            }
            stored.insert(name.clone(), self.store_blob(&path)?);
        }
        let log = match log {
            Some(path) if fs::metadata(path).is_ok_and(|m| m.len() > 0) => {
                Some(self.store_blob(path)?)
            }
            _ => None,
        };
        let key = fingerprint.key();
        let entry = CacheEntry {
            format_version: FORMAT_VERSION,
            key: key.clone(),
            node: node.to_owned(),
            fingerprint: fingerprint.clone(),
            output_hash: output_hash(&stored, &metrics),
            outputs: stored,
            metrics,
            log,
            seconds,
            created,
        };
        let bytes = serde_json::to_vec_pretty(&entry).map_err(io::Error::other)?;
        atomic_write(&self.entry_path(&key), &bytes)?;
        let mut pointer = self.pointer(node).unwrap_or_default();
        pointer.node = node.to_owned();
        pointer.latest_key = key;
        pointer.durations.push(seconds);
        let excess = pointer.durations.len().saturating_sub(DURATION_HISTORY);
        pointer.durations.drain(..excess);
        // The pointer only serves `why` and estimates: replaced atomically, but not worth an fsync per node.
        let bytes = serde_json::to_vec(&pointer).map_err(io::Error::other)?;
        atomic_replace(&self.pointer_path(node), &bytes)?;
        Ok(entry)
    }

    pub fn pointer(&self, node: &str) -> Option<NodePointer> {
        let bytes = fs::read(self.pointer_path(node)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The newest entry stored for a node id, whatever its key.
    pub fn latest_for(&self, node: &str) -> Option<CacheEntry> {
        self.get(&self.pointer(node)?.latest_key)
    }

    /// Median of the node's recorded durations.
    pub fn median_duration(&self, node: &str) -> Option<f64> {
        let mut durations = self.pointer(node)?.durations;
        if durations.is_empty() {
            return None;
        }
        durations.sort_by(f64::total_cmp);
        Some(durations[durations.len() / 2])
    }

    /// Published entries; `*.part` files are temporaries of writes a kill cut short, never entries.
    fn entry_files(&self) -> io::Result<Vec<PathBuf>> {
        Ok(files_under(&self.root.join("entries"))?
            .into_iter()
            .filter(|p| !is_part(p))
            .collect())
    }

    /// Re-hashes every blob and checks every entry; names every corrupt file.
    pub fn verify(&self) -> io::Result<VerifyReport> {
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
                        || path.file_stem().and_then(|s| s.to_str()) != Some(entry.key.as_str())
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
                match hash_file(path) {
                    Ok(actual) if actual == expected => None,
                    Ok(actual) => Some(Corruption {
                        path: path.clone(),
                        reason: format!("content hashes to {actual}, not its name"),
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

    /// Deletes entries whose key is not in `keep`, then blobs no kept entry references, then stale staging.
    pub fn gc(&self, keep: &HashSet<String>) -> io::Result<GcReport> {
        let mut report = GcReport::default();
        let mut live_blobs: HashSet<String> = HashSet::new();
        for path in self.entry_files()? {
            let entry = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<CacheEntry>(&b).ok());
            match entry {
                Some(entry) if keep.contains(&entry.key) => {
                    live_blobs.extend(
                        entry
                            .outputs
                            .values()
                            .chain(entry.log.iter())
                            .map(|b| b.hash.clone()),
                    );
                }
                _ => {
                    fs::remove_file(&path)?;
                    report.entries_removed += 1;
                }
            }
        }
        for path in ["entries", "blobs", "nodes"]
            .iter()
            .flat_map(|d| files_under(&self.root.join(d)).unwrap_or_default())
        {
            if is_part(&path) && is_older_than(&path, STALE_STAGING) {
                fs::remove_file(&path)?;
            }
        }
        for path in files_under(&self.root.join("blobs"))?
            .into_iter()
            .filter(|p| !is_part(p))
        {
            if !live_blobs.contains(&blob_name(&path)) {
                report.bytes_freed += fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                fs::remove_file(&path)?;
                report.blobs_removed += 1;
            }
        }
        for path in files_under(&self.root.join("nodes"))?
            .into_iter()
            .filter(|p| !is_part(p))
        {
            let pointer = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<NodePointer>(&b).ok());
            if pointer.is_none_or(|p| !keep.contains(&p.latest_key)) {
                fs::remove_file(&path)?;
            }
        }
        // Staging of a run that is still going on must survive; a day-old one belongs to a killed run.
        for item in fs::read_dir(self.root.join("tmp"))? {
            let path = item?.path();
            if is_older_than(&path, STALE_STAGING) {
                fs::remove_dir_all(&path)?;
            }
        }
        Ok(report)
    }
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

/// The hash a blob's path encodes (`blobs/ab/cdef…` → `abcdef…`).
fn blob_name(path: &Path) -> String {
    let head = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let tail = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    format!("{head}{tail}")
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
