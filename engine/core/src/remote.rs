//! The cache's remote tier as the engine sees it: an object store holding entries and blobs under the local
//! cache's names, asked on a local miss and fed, in the background, with what this machine built.
//!
//! Layout under the store's prefix: `blobs/ab/<blake3>` and `entries/ab/<key>.json`, the same bytes as the
//! local files. Uploads go blobs first, entry last, each a whole-object PUT, so an entry on the remote never
//! names a blob that is not there; two engines uploading one key both leave a complete entry (the later PUT
//! wins, and either names only blobs that were uploaded before it). Nothing from the remote is trusted: an
//! entry must parse, name the key it was asked for, and name only well-formed hashes and relative output
//! names; a blob is kept only if its bytes hash to its name. The first failure of the store itself (refused,
//! timed out, bad credentials) turns the tier off for the rest of the process with one warning: a remote
//! cache can make a run faster, never fail it.

use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use fracflow_record::Digest;

/// Why a request to the store failed (not found is not a failure: it is `Ok(None)`).
#[derive(Debug, Clone)]
pub struct RemoteError(pub String);

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An object store: whole objects by path, relative to the tier's prefix. Implementations bound every
/// request's time and retries, and never put credentials into their errors or their description.
pub trait RemoteStore: Send + Sync {
    /// The store's address as it may be shown: no credentials.
    fn describe(&self) -> String;
    /// Streams the object at `path` into `out`; `Ok(false)` when there is none. More than `limit` bytes is
    /// an error (a garbage answer must not fill the disk).
    fn get_into(&self, path: &str, out: &mut dyn Write, limit: u64) -> Result<bool, RemoteError>;
    /// The size of the object at `path`, `None` when there is none.
    fn head(&self, path: &str) -> Result<Option<u64>, RemoteError>;
    /// Stores `bytes` at `path` as one object, replacing any.
    fn put(&self, path: &str, bytes: Vec<u8>) -> Result<(), RemoteError>;
}

/// Read-write uploads what this machine builds; read only asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteMode {
    ReadWrite,
    Read,
}

/// What is uploaded.
#[derive(Debug, Clone)]
pub struct UploadPolicy {
    /// An entry whose blobs sum to more than this is not uploaded (the raw samples of a long measurement).
    pub max_entry_bytes: u64,
    /// Nodes of these kinds are never uploaded.
    pub skip_kinds: BTreeSet<String>,
}

impl Default for UploadPolicy {
    fn default() -> Self {
        UploadPolicy {
            max_entry_bytes: 256 << 20,
            skip_kinds: BTreeSet::new(),
        }
    }
}

/// What the tier did in this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Keys served from the remote.
    pub hits: usize,
    /// Local misses the remote did not have either.
    pub misses: usize,
    pub downloaded_bytes: u64,
    /// Blobs whose bytes did not match their hash: discarded, their node ran here.
    pub rejected_blobs: usize,
    pub uploaded_entries: usize,
    pub uploaded_bytes: u64,
    /// Entries not uploaded by the policy (kind or size).
    pub skipped_uploads: usize,
    /// The store failed and the tier was turned off.
    pub went_down: bool,
}

/// One entry to upload: its blobs (hash, local file, size), then its bytes.
pub(crate) struct Upload {
    pub key: Digest,
    pub entry: Vec<u8>,
    pub blobs: Vec<(Digest, std::path::PathBuf, u64)>,
}

/// The remote tier of one cache.
pub struct RemoteTier {
    store: Arc<dyn RemoteStore>,
    mode: RemoteMode,
    policy: UploadPolicy,
    down: Arc<AtomicBool>,
    warn: Arc<dyn Fn(&str) + Send + Sync>,
    stats: Arc<Mutex<RemoteStats>>,
    /// Blobs the remote served with other bytes than their hash: uploaded again, whatever their size there.
    rejected: Arc<Mutex<BTreeSet<Digest>>>,
    uploader: Mutex<Option<(mpsc::Sender<Upload>, JoinHandle<()>)>>,
}

impl fmt::Debug for RemoteTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteTier")
            .field("store", &self.store.describe())
            .field("mode", &self.mode)
            .finish()
    }
}

/// Object paths of the layout above.
pub(crate) fn entry_object(key: &Digest) -> String {
    let hex = key.to_hex();
    format!("entries/{}/{}.json", &hex[..2], &*hex)
}

pub(crate) fn blob_object(hash: &Digest) -> String {
    let hex = hash.to_hex();
    format!("blobs/{}/{}", &hex[..2], &*hex)
}

/// An output name an entry may carry: a relative path of plain components (it becomes a path in a run
/// directory).
pub(crate) fn is_output_name(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

impl RemoteTier {
    /// `warn` receives the tier's warnings (the engine does not print).
    pub fn new(
        store: Arc<dyn RemoteStore>,
        mode: RemoteMode,
        policy: UploadPolicy,
        warn: Arc<dyn Fn(&str) + Send + Sync>,
    ) -> RemoteTier {
        RemoteTier {
            store,
            mode,
            policy,
            down: Arc::new(AtomicBool::new(false)),
            warn,
            stats: Arc::new(Mutex::new(RemoteStats::default())),
            rejected: Arc::default(),
            uploader: Mutex::new(None),
        }
    }

    pub fn describe(&self) -> String {
        self.store.describe()
    }

    pub fn mode(&self) -> RemoteMode {
        self.mode
    }

    pub(crate) fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    pub(crate) fn store(&self) -> &dyn RemoteStore {
        self.store.as_ref()
    }

    pub(crate) fn policy(&self) -> &UploadPolicy {
        &self.policy
    }

    pub(crate) fn warn(&self, message: &str) {
        (self.warn)(message);
    }

    pub(crate) fn count(&self, update: impl FnOnce(&mut RemoteStats)) {
        update(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The remote's copy of blob `hash` has other bytes: the next upload of it replaces it.
    pub(crate) fn reject(&self, hash: &Digest) {
        self.rejected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(*hash);
        self.count(|s| s.rejected_blobs += 1);
    }

    /// The store failed: one warning, then local only.
    pub(crate) fn fail(&self, error: &RemoteError) {
        take_down(
            &self.down,
            &self.stats,
            self.warn.as_ref(),
            &self.describe(),
            error,
        );
    }

    /// Queues an upload for the background uploader (started on the first one).
    pub(crate) fn enqueue(&self, upload: Upload) {
        if self.mode == RemoteMode::Read || !self.is_up() {
            return;
        }
        let mut uploader = self.uploader.lock().unwrap_or_else(PoisonError::into_inner);
        let (sender, _) = uploader.get_or_insert_with(|| self.start_uploader());
        // A send fails only if the uploader ended, which it does only when this tier finishes.
        let _ = sender.send(upload);
    }

    fn start_uploader(&self) -> (mpsc::Sender<Upload>, JoinHandle<()>) {
        let (sender, receiver) = mpsc::channel::<Upload>();
        let store = Arc::clone(&self.store);
        let stats = Arc::clone(&self.stats);
        let warn = Arc::clone(&self.warn);
        let down = Arc::clone(&self.down);
        let rejected = Arc::clone(&self.rejected);
        let handle = std::thread::spawn(move || {
            for upload in receiver {
                if down.load(Ordering::Relaxed) {
                    continue;
                }
                let replace = rejected
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                match upload_one(store.as_ref(), &upload, &replace) {
                    Ok(bytes) => {
                        let mut stats = stats.lock().unwrap_or_else(PoisonError::into_inner);
                        stats.uploaded_entries += 1;
                        stats.uploaded_bytes += bytes;
                    }
                    Err(error) => {
                        take_down(&down, &stats, warn.as_ref(), &store.describe(), &error);
                    }
                }
            }
        });
        (sender, handle)
    }

    /// Waits for the queued uploads and returns what the tier did.
    pub fn finish(&self) -> RemoteStats {
        let uploader = self
            .uploader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((sender, handle)) = uploader {
            drop(sender);
            let _ = handle.join();
        }
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn take_down(
    down: &AtomicBool,
    stats: &Mutex<RemoteStats>,
    warn: &(dyn Fn(&str) + Send + Sync),
    store: &str,
    error: &RemoteError,
) {
    if !down.swap(true, Ordering::Relaxed) {
        stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .went_down = true;
        warn(&format!(
            "remote cache {store}: {error}; this run goes on with the local cache only"
        ));
    }
}

/// Uploads one entry, blobs first (skipping those the store holds at their size, unless their copy there
/// was found corrupt), entry last. Returns the bytes sent.
fn upload_one(
    store: &dyn RemoteStore,
    upload: &Upload,
    replace: &BTreeSet<Digest>,
) -> Result<u64, RemoteError> {
    let mut sent = 0;
    for (hash, path, size) in &upload.blobs {
        let object = blob_object(hash);
        if !replace.contains(hash) && store.head(&object)? == Some(*size) {
            continue;
        }
        let bytes = std::fs::read(path)
            .map_err(|e| RemoteError(format!("reading {}: {e}", path.display())))?;
        sent += bytes.len() as u64;
        store.put(&object, bytes)?;
    }
    sent += upload.entry.len() as u64;
    store.put(&entry_object(&upload.key), upload.entry.clone())?;
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_a_remote_are_checked_before_they_become_paths() {
        // A key or blob name is a `Digest`, which only 64 lowercase hex digits make.
        assert!("ab".repeat(32).parse::<Digest>().is_ok());
        assert!("../../etc/passwd".parse::<Digest>().is_err());
        assert!("AB".repeat(32).parse::<Digest>().is_err());
        assert!(is_output_name("summary.csv"));
        assert!(is_output_name("dir/file"));
        assert!(!is_output_name("../escape"));
        assert!(!is_output_name("/etc/passwd"));
        assert!(!is_output_name("a/../../b"));
        assert!(!is_output_name(""));
    }
}
