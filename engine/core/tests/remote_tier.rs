//! The remote tier's rules, against an in-memory object store that records every request: what a local miss
//! downloads and verifies, what an upload sends and in which order, and what a failing or lying store does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use fracflow_core::remote::{
    RemoteError, RemoteMode, RemoteStats, RemoteStore, RemoteTier, UploadPolicy,
};
use fracflow_core::{Cache, CacheEntry, Fingerprint};
use fracflow_record::Digest;

/// Objects by path, the requests made, and a switch that makes every request fail.
#[derive(Default)]
struct MemoryStore {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    requests: Mutex<Vec<String>>,
    broken: Mutex<bool>,
}

impl MemoryStore {
    fn request(&self, what: String) -> Result<(), RemoteError> {
        self.requests
            .lock()
            .map_err(|_| RemoteError("poisoned".into()))?
            .push(what);
        if *self
            .broken
            .lock()
            .map_err(|_| RemoteError("poisoned".into()))?
        {
            return Err(RemoteError("connection refused".into()));
        }
        Ok(())
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn paths(&self) -> Vec<String> {
        self.objects
            .lock()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn edit(&self, path_part: &str, change: impl Fn(&mut Vec<u8>)) {
        if let Ok(mut objects) = self.objects.lock() {
            for (path, bytes) in objects.iter_mut() {
                if path.contains(path_part) {
                    change(bytes);
                }
            }
        }
    }
}

impl RemoteStore for MemoryStore {
    fn describe(&self) -> String {
        "memory://lab".into()
    }

    fn get_into(&self, path: &str, out: &mut dyn Write, limit: u64) -> Result<bool, RemoteError> {
        self.request(format!("GET {path}"))?;
        let objects = self
            .objects
            .lock()
            .map_err(|_| RemoteError("poisoned".into()))?;
        let Some(bytes) = objects.get(path) else {
            return Ok(false);
        };
        if bytes.len() as u64 > limit {
            return Err(RemoteError("too large".into()));
        }
        out.write_all(bytes)
            .map_err(|e| RemoteError(e.to_string()))?;
        Ok(true)
    }

    fn head(&self, path: &str) -> Result<Option<u64>, RemoteError> {
        self.request(format!("HEAD {path}"))?;
        let objects = self
            .objects
            .lock()
            .map_err(|_| RemoteError("poisoned".into()))?;
        Ok(objects.get(path).map(|b| b.len() as u64))
    }

    fn put(&self, path: &str, bytes: Vec<u8>) -> Result<(), RemoteError> {
        self.request(format!("PUT {path}"))?;
        self.objects
            .lock()
            .map_err(|_| RemoteError("poisoned".into()))?
            .insert(path.to_owned(), bytes);
        Ok(())
    }
}

type Warnings = Arc<Mutex<Vec<String>>>;

fn tier(
    store: &Arc<MemoryStore>,
    mode: RemoteMode,
    policy: UploadPolicy,
) -> (Arc<RemoteTier>, Warnings) {
    let warnings: Warnings = Arc::default();
    let sink = Arc::clone(&warnings);
    let warn = Arc::new(move |message: &str| {
        if let Ok(mut w) = sink.lock() {
            w.push(message.to_owned());
        }
    });
    let store: Arc<dyn RemoteStore> = Arc::clone(store) as Arc<dyn RemoteStore>;
    (
        Arc::new(RemoteTier::new(store, mode, policy, warn)),
        warnings,
    )
}

fn fingerprint(node: &str) -> Fingerprint {
    Fingerprint {
        version: 1,
        kind: "test".into(),
        kind_version: 1,
        config: fracflow_core::Settings::from([("node".into(), serde_json::json!(node))]),
        point: fracflow_core::Settings::new(),
        outputs: vec!["out".into()],
        inputs: BTreeMap::new(),
        upstream: BTreeMap::new(),
        tools: BTreeMap::new(),
        testbed: BTreeMap::new(),
        placement: Vec::new(),
    }
}

/// Builds `node` in `cache` with `content` as its one output, as a node that ran here would.
fn build(cache: &Cache, node: &str, content: &[u8]) -> io::Result<CacheEntry> {
    let staged = cache.staging_dir(node)?;
    std::fs::write(staged.join("out"), content)?;
    let log = staged.join("node.log");
    std::fs::write(&log, format!("{node} ran\n"))?;
    let entry = cache.put(
        node,
        &fingerprint(node),
        &staged,
        &["out".to_owned()],
        BTreeMap::new(),
        Some(&log),
        1.5,
        "2026-12-02T00:00:00Z".into(),
    )?;
    std::fs::remove_dir_all(&staged)?;
    Ok(entry)
}

fn blob_of(cache: &Cache, entry: &CacheEntry) -> io::Result<Vec<u8>> {
    std::fs::read(cache.blob_path(&entry.outputs["out"].hash))
}

/// Machine A builds and uploads; machine B, with an empty local cache, is served by the remote.
fn built_on_a(store: &Arc<MemoryStore>, dir: &Path) -> io::Result<(CacheEntry, RemoteStats)> {
    let (tier_a, warnings) = tier(store, RemoteMode::ReadWrite, UploadPolicy::default());
    let a = Cache::open(&dir.join("a"))?.with_remote(Arc::clone(&tier_a));
    let entry = build(&a, "node", b"built on A")?;
    a.upload(&entry, "test");
    let stats = tier_a.finish();
    assert!(warnings.lock().map(|w| w.is_empty()).unwrap_or(false));
    Ok((entry, stats))
}

#[test]
fn a_local_miss_is_served_by_the_remote_and_the_blob_is_kept_verified() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(MemoryStore::default());
    let (entry, stats) = built_on_a(&store, dir.path())?;
    assert_eq!(stats.uploaded_entries, 1);
    // Blobs first, entry last: an entry is never there before the blobs it names.
    let puts: Vec<String> = store
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("PUT"))
        .collect();
    assert_eq!(puts.len(), 3, "{puts:?}");
    assert!(
        puts[2].contains("entries/"),
        "the entry goes last: {puts:?}"
    );

    let (tier_b, warnings) = tier(&store, RemoteMode::ReadWrite, UploadPolicy::default());
    let b = Cache::open(&dir.path().join("b"))?.with_remote(Arc::clone(&tier_b));
    assert!(b.lookup(&entry.key).is_none(), "B's local cache is empty");
    let hit = b
        .lookup_remote(&entry.key, true)
        .ok_or_else(|| io::Error::other("no remote hit"))?;
    assert_eq!(hit.output_hash, entry.output_hash);
    assert_eq!(blob_of(&b, &entry)?, b"built on A");
    // Now it is a local entry: `why` and later runs read it without the remote.
    assert!(b.get(&entry.key).is_some());
    assert_eq!(b.pointer("node").map(|p| p.latest_key), Some(entry.key));
    let stats = tier_b.finish();
    assert_eq!(
        (stats.hits, stats.rejected_blobs, stats.went_down),
        (1, 0, false)
    );
    assert!(stats.downloaded_bytes >= 10);
    assert!(warnings.lock().map(|w| w.is_empty()).unwrap_or(false));
    Ok(())
}

#[test]
fn a_blob_whose_bytes_do_not_match_its_hash_is_discarded_and_reported() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(MemoryStore::default());
    let (entry, _) = built_on_a(&store, dir.path())?;
    let hash = entry.outputs["out"].hash;
    let hex = hash.to_string();
    store.edit(&format!("blobs/{}/{hex}", &hex[..2]), |bytes| bytes[0] ^= 1);

    let (tier_b, warnings) = tier(&store, RemoteMode::ReadWrite, UploadPolicy::default());
    let b = Cache::open(&dir.path().join("b"))?.with_remote(Arc::clone(&tier_b));
    assert!(
        b.lookup_remote(&entry.key, true).is_none(),
        "a tampered blob must not serve"
    );
    assert!(!b.blob_path(&hash).exists(), "nor stay in the local store");
    assert!(b.get(&entry.key).is_none(), "and no entry names it");
    let blob_dir = b
        .blob_path(&hash)
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default();
    let leftovers = std::fs::read_dir(&blob_dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(leftovers, 0, "no temporary is left behind");
    let warnings = warnings.lock().map(|w| w.clone()).unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("does not match its hash"),
        "{warnings:?}"
    );
    // Built here instead, its upload replaces the corrupt copy (same size, so only the rejection says so).
    let rebuilt = build(&b, "node", b"built on A")?;
    b.upload(&rebuilt, "test");
    let stats = tier_b.finish();
    assert_eq!((stats.rejected_blobs, stats.went_down), (1, false));
    let (tier_c, _) = tier(&store, RemoteMode::ReadWrite, UploadPolicy::default());
    let c = Cache::open(&dir.path().join("c"))?.with_remote(tier_c);
    assert!(
        c.lookup_remote(&entry.key, true).is_some(),
        "the remote is whole again"
    );
    Ok(())
}

#[test]
fn an_entry_naming_a_path_outside_the_run_or_a_bad_hash_is_refused() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(MemoryStore::default());
    let (entry, _) = built_on_a(&store, dir.path())?;
    store.edit("entries/", |bytes| {
        let text = String::from_utf8_lossy(bytes).replace("\"out\"", "\"../../escape\"");
        *bytes = text.into_bytes();
    });
    let (tier_b, warnings) = tier(&store, RemoteMode::ReadWrite, UploadPolicy::default());
    let b = Cache::open(&dir.path().join("b"))?.with_remote(tier_b);
    assert!(b.lookup_remote(&entry.key, true).is_none());
    let warnings = warnings.lock().map(|w| w.clone()).unwrap_or_default();
    assert!(
        warnings.iter().any(|w| w.contains("unusable")),
        "{warnings:?}"
    );
    Ok(())
}

#[test]
fn a_failing_store_warns_once_and_is_not_asked_again() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(MemoryStore::default());
    if let Ok(mut broken) = store.broken.lock() {
        *broken = true;
    }
    let (tier_b, warnings) = tier(&store, RemoteMode::ReadWrite, UploadPolicy::default());
    let b = Cache::open(&dir.path().join("b"))?.with_remote(Arc::clone(&tier_b));
    let keys: Vec<Digest> = (0..5u8).map(|i| Digest::of(&[i])).collect();
    for key in &keys {
        assert!(b.lookup_remote(key, true).is_none());
    }
    // Built locally while the remote is down: nothing is queued.
    let entry = build(&b, "local", b"made here")?;
    b.upload(&entry, "test");
    assert_eq!(
        store.requests().len(),
        1,
        "one request, then local only: {:?}",
        store.requests()
    );
    let warnings = warnings.lock().map(|w| w.clone()).unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("memory://lab") && warnings[0].contains("local cache only"),
        "{warnings:?}"
    );
    assert!(tier_b.finish().went_down);
    Ok(())
}

#[test]
fn read_mode_and_the_upload_policy_keep_entries_home() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(MemoryStore::default());
    let (read_only, _) = tier(&store, RemoteMode::Read, UploadPolicy::default());
    let a = Cache::open(&dir.path().join("a"))?.with_remote(Arc::clone(&read_only));
    let entry = build(&a, "node", b"read only")?;
    a.upload(&entry, "test");
    read_only.finish();
    assert!(
        store.paths().is_empty(),
        "read mode uploaded {:?}",
        store.paths()
    );

    let policy = UploadPolicy {
        max_entry_bytes: 64,
        skip_kinds: BTreeSet::from(["measure".to_owned()]),
    };
    let (limited, _) = tier(&store, RemoteMode::ReadWrite, policy);
    let c = Cache::open(&dir.path().join("c"))?.with_remote(Arc::clone(&limited));
    let measured = build(&c, "measured", b"samples")?;
    c.upload(&measured, "measure");
    let big = build(&c, "big", &[1u8; 4096])?;
    c.upload(&big, "command");
    let small = build(&c, "small", b"table")?;
    c.upload(&small, "command");
    let stats = limited.finish();
    assert_eq!((stats.uploaded_entries, stats.skipped_uploads), (1, 2));
    let entries: Vec<String> = store
        .paths()
        .into_iter()
        .filter(|p| p.starts_with("entries/"))
        .collect();
    assert_eq!(entries.len(), 1);
    assert!(entries[0].contains(&*small.key.to_hex()), "{entries:?}");
    Ok(())
}

#[test]
fn a_probe_asks_without_downloading() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(MemoryStore::default());
    let (entry, _) = built_on_a(&store, dir.path())?;
    let (tier_b, _) = tier(&store, RemoteMode::ReadWrite, UploadPolicy::default());
    let b = Cache::open(&dir.path().join("b"))?.with_remote(tier_b);
    assert!(b.lookup_remote(&entry.key, false).is_some());
    assert!(!b.blob_path(&entry.outputs["out"].hash).exists());
    assert!(b.get(&entry.key).is_none(), "a probe stores nothing");
    Ok(())
}
