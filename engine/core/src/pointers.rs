//! The node pointers: each node's newest key and its recent durations, which `why`, `plan`'s changes and the
//! estimates read. They live in `<cache>/nodes/`: each engine appends one line per node it commits to a journal
//! of its own (`<owner>.jsonl`, named after its staging owner, see `Cache::remove_dead_staging`), and the
//! journals of dead engines are folded into one snapshot (`pointers.json`) before `fracflow run` loads its
//! pipeline, once they are many or large beside it, and by `gc`.
//!
//! Why not a file per node, as before: writing a node's pointer was a read of the old one, a temporary
//! created, written, closed and renamed over it, and a directory with one more name; in a 3 000-node fan-in's
//! first run on a tmpfs that was 36 µs of CPU a node, more than the entry it points to (31 µs; both measured
//! by leaving them out of a build, `bench/cpu_per_node.sh`). A group of committed nodes is now one append.
//!
//! Like the files before it, a pointer is not synced (it serves no result): power loss or a kill may cut a
//! journal's last line, which readers skip, and costs an estimate a duration. Each engine writes only its own
//! journal, so lines of two engines never interleave, even on a filesystem shared between hosts; one folder at a
//! time (a lock on `locks/pointers.folding`) rewrites the snapshot. Pointer files of engines from before the
//! journals are read for a node none of the journals names, and folded into the snapshot by the next fold.

use std::collections::HashMap;
use std::fs;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fracflow_record::Digest;
use fracflow_record::atomic::{AppendFile, Files, Publish};
use serde::{Deserialize, Serialize};

use crate::cache::NodePointer;

/// How many durations a pointer keeps: the estimates are their median.
pub(crate) const DURATION_HISTORY: usize = 9;

/// A run's start folds the dead engines' journals once there are this many...
const FOLD_AT_JOURNALS: usize = 64;

/// ...or once they hold this fraction of the snapshot's bytes (a fresh snapshot is written at once).
const FOLD_AT_FRACTION: f64 = 0.25;

/// The snapshot's name in `nodes/`.
const SNAPSHOT: &str = "pointers.json";

/// The ending of a journal's name.
const JOURNAL_SUFFIX: &str = ".jsonl";

/// Whether `path` is a pointer file of an engine from before the journals (`<hash of the node>.json`).
fn is_legacy_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.ends_with(".json") && name != SNAPSHOT)
}

/// One journal line: a node committed with `key`, in `seconds`.
#[derive(Debug, Serialize, Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    node: std::borrow::Cow<'a, str>,
    key: Digest,
    seconds: f64,
}

/// The folded pointers, as the snapshot holds them.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Snapshot {
    pointers: Vec<NodePointer>,
}

/// What a reader loaded: every pointer the snapshot and the journals hold, and whether pointer files of older
/// engines are there to fall back on.
#[derive(Debug, Default)]
struct Loaded {
    pointers: HashMap<String, NodePointer>,
    legacy_files: bool,
}

/// The pointers of one cache, as one engine reads and writes them.
#[derive(Debug)]
pub(crate) struct Pointers {
    dir: PathBuf,
    files: Files,
    /// This engine's journal and its path, opened on its first record.
    journal: Mutex<Option<(PathBuf, Box<dyn AppendFile>)>>,
    /// Loaded on the first read, and forgotten at this engine's next record: a run reads pointers while it
    /// plans and records them as nodes commit, and a map kept up to date would grow by a pointer for every
    /// node built (36 MB in a 300 000-node first run).
    loaded: Mutex<Option<Loaded>>,
}

impl Pointers {
    /// The pointers in `dir` (`<cache>/nodes`).
    pub fn new(dir: PathBuf, files: Files) -> Pointers {
        Pointers {
            dir,
            files,
            journal: Mutex::new(None),
            loaded: Mutex::new(None),
        }
    }

    /// Records that each `(node, key, seconds)` was committed, in one append to this engine's journal (named
    /// after `owner`, which `owner` gives on the first record).
    pub fn record(
        &self,
        owner: impl FnOnce() -> io::Result<String>,
        committed: &[(&str, Digest, f64)],
    ) -> io::Result<()> {
        if committed.is_empty() {
            return Ok(());
        }
        let mut text = Vec::new();
        for (node, key, seconds) in committed {
            let line = Line {
                node: (*node).into(),
                key: *key,
                seconds: *seconds,
            };
            serde_json::to_writer(&mut text, &line).map_err(io::Error::other)?;
            text.push(b'\n');
        }
        {
            let mut journal = self.journal.lock().unwrap_or_else(|e| e.into_inner());
            let unwritable = |path: &Path, e: io::Error| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot write the node pointer journal {}: {e}",
                        path.display()
                    ),
                )
            };
            if journal.is_none() {
                let path = self.dir.join(format!("{}{JOURNAL_SUFFIX}", owner()?));
                let file = self
                    .files
                    .open_append(&path)
                    .map_err(|e| unwritable(&path, e))?;
                *journal = Some((path, file));
            }
            if let Some((path, file)) = journal.as_mut() {
                file.append(&text).map_err(|e| unwritable(path, e))?;
            }
        }
        *self.loaded.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// The pointer of `node`, if any engine recorded one.
    pub fn get(&self, node: &str, legacy_path: impl FnOnce() -> PathBuf) -> Option<NodePointer> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let loaded = loaded.get_or_insert_with(|| self.load());
        if let Some(pointer) = loaded.pointers.get(node) {
            return Some(pointer.clone());
        }
        if !loaded.legacy_files {
            return None;
        }
        read_pointer_file(&legacy_path())
    }

    /// The snapshot, then every journal, oldest first.
    fn load(&self) -> Loaded {
        let listing = Listing::of(&self.dir).unwrap_or_default();
        let mut pointers = read_snapshot(&self.dir.join(SNAPSHOT));
        for journal in &listing.journals {
            read_journal(&journal.path, &mut pointers);
        }
        Loaded {
            pointers,
            legacy_files: !listing.legacy.is_empty(),
        }
    }

    /// Folds the journals of dead engines (`is_dead` of the owner a journal is named after), and the pointer
    /// files of engines from before the journals, into the snapshot and removes them; answers how many journals.
    /// Skipped, answering 0, while another engine folds (`lock`, a file locked for the folding), and while the
    /// dead journals are few and small beside the snapshot ([`FOLD_AT_JOURNALS`], [`FOLD_AT_FRACTION`]): a run's
    /// start would otherwise rewrite every pointer after each run that built a node. With `keep` (`gc`, after
    /// removing entries) it always folds, and drops the pointers whose newest key `keep` refuses.
    pub fn fold(
        &self,
        lock: &Path,
        is_dead: impl Fn(&str) -> bool,
        keep: Option<&dyn Fn(&Digest) -> bool>,
    ) -> io::Result<usize> {
        let lock = crate::keylock::open_lock_file(lock)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Ok(0),
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        let Listing { journals, legacy } = Listing::of(&self.dir)?;
        let dead: Vec<Journal> = journals.into_iter().filter(|j| is_dead(&j.owner)).collect();
        let dead_bytes: u64 = dead.iter().map(|j| j.bytes).sum();
        let snapshot_path = self.dir.join(SNAPSHOT);
        let snapshot_bytes = fs::metadata(&snapshot_path).map_or(0, |m| m.len());
        let worth_it = dead.len() >= FOLD_AT_JOURNALS
            || (!dead.is_empty() && dead_bytes as f64 >= snapshot_bytes as f64 * FOLD_AT_FRACTION)
            || !legacy.is_empty();
        if keep.is_none() && !worth_it {
            return Ok(0);
        }
        let mut pointers = read_snapshot(&snapshot_path);
        // Older than any journal: the snapshot's pointer of a node wins over its file.
        for pointer in legacy.iter().filter_map(|path| read_pointer_file(path)) {
            pointers.entry(pointer.node.clone()).or_insert(pointer);
        }
        for journal in &dead {
            read_journal(&journal.path, &mut pointers);
        }
        if let Some(keep) = keep {
            pointers.retain(|_, pointer| keep(&pointer.latest_key));
        }
        let mut snapshot = Snapshot {
            pointers: pointers.into_values().collect(),
        };
        snapshot.pointers.sort_by(|a, b| a.node.cmp(&b.node));
        let bytes = serde_json::to_vec(&snapshot).map_err(io::Error::other)?;
        // Published before the journals go: a fold cut short leaves them to be folded again, which repeats
        // their durations in an estimate's median, never loses a key.
        self.files
            .publish(&snapshot_path, &bytes, Publish::Unsynced)?;
        for path in dead.iter().map(|journal| &journal.path).chain(&legacy) {
            self.files.remove_file(path)?;
        }
        Ok(dead.len())
    }
}

/// What `nodes/` holds besides the snapshot: the journals, oldest first, and the pointer files of older engines.
#[derive(Debug, Default)]
struct Listing {
    journals: Vec<Journal>,
    legacy: Vec<PathBuf>,
}

/// One engine's journal.
#[derive(Debug)]
struct Journal {
    owner: String,
    path: PathBuf,
    bytes: u64,
}

impl Listing {
    fn of(dir: &Path) -> io::Result<Listing> {
        let mut listing = Listing::default();
        let mut journals = Vec::new();
        for item in fs::read_dir(dir)?.flatten() {
            let path = item.path();
            let name = item.file_name();
            let Some(owner) = name.to_str().and_then(|n| n.strip_suffix(JOURNAL_SUFFIX)) else {
                if is_legacy_file(&path) {
                    listing.legacy.push(path);
                }
                continue;
            };
            let metadata = item.metadata().ok();
            let modified = metadata.as_ref().and_then(|m| m.modified().ok());
            let journal = Journal {
                owner: owner.to_owned(),
                path,
                bytes: metadata.map_or(0, |m| m.len()),
            };
            journals.push((modified, journal));
        }
        journals.sort_by(|a, b| (a.0, &a.1.path).cmp(&(b.0, &b.1.path)));
        listing.journals = journals.into_iter().map(|(_, journal)| journal).collect();
        Ok(listing)
    }
}

/// A pointer file of an engine from before the journals; `None` when it cannot be read.
fn read_pointer_file(path: &Path) -> Option<NodePointer> {
    let bytes = fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `node` committed with `key` in `seconds`: its newest key, and one more duration of the last
/// [`DURATION_HISTORY`].
fn apply(pointers: &mut HashMap<String, NodePointer>, node: &str, key: Digest, seconds: f64) {
    let pointer = pointers
        .entry(node.to_owned())
        .or_insert_with(|| NodePointer {
            node: node.to_owned(),
            latest_key: key,
            durations: Vec::new(),
        });
    pointer.latest_key = key;
    pointer.durations.push(seconds);
    let excess = pointer.durations.len().saturating_sub(DURATION_HISTORY);
    pointer.durations.drain(..excess);
}

/// The snapshot's pointers by node; none when it is missing or unreadable (it is rebuilt by the next fold).
fn read_snapshot(path: &Path) -> HashMap<String, NodePointer> {
    fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Snapshot>(&bytes).ok())
        .map(|snapshot| {
            snapshot
                .pointers
                .into_iter()
                .map(|pointer| (pointer.node.clone(), pointer))
                .collect()
        })
        .unwrap_or_default()
}

/// Applies every whole line of `journal`; a line that does not parse (cut by a kill or power loss) is skipped.
fn read_journal(journal: &Path, pointers: &mut HashMap<String, NodePointer>) {
    let Ok(file) = fs::File::open(journal) else {
        return;
    };
    for line in io::BufReader::new(file).split(b'\n').map_while(Result::ok) {
        if let Ok(line) = serde_json::from_slice::<Line<'_>>(&line) {
            apply(pointers, &line.node, line.key, line.seconds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Digest {
        Digest::from_bytes([byte; 32])
    }

    fn pointers(dir: &Path) -> Pointers {
        Pointers::new(dir.to_owned(), Files::real())
    }

    /// An engine's records come back to a later reader (another command on the same cache), and to itself, as
    /// the newest key and the last nine durations; a last line cut short by a kill is skipped.
    #[test]
    fn records_come_back_newest_key_and_last_durations_and_a_cut_line_is_skipped() -> io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let writer = pointers(dir.path());
        for round in 0..12u8 {
            writer.record(
                || Ok("fracflow-a".into()),
                &[("n", key(round), f64::from(round))],
            )?;
        }
        // A read, then a record: the next read sees it.
        assert!(writer.get("other", || dir.path().join("none")).is_none());
        writer.record(|| Ok("fracflow-a".into()), &[("other", key(99), 1.0)])?;
        assert_eq!(
            writer
                .get("other", || dir.path().join("none"))
                .map(|p| p.latest_key),
            Some(key(99))
        );
        // A kill cuts the journal's last line (its engine never appends again).
        let journal = dir.path().join("fracflow-a.jsonl");
        let mut text = fs::read(&journal)?;
        text.extend_from_slice(br#"{"node":"other","key":"#);
        fs::write(&journal, &text)?;
        let read = pointers(dir.path()).get("n", || dir.path().join("none"));
        let read = read.expect("n has a pointer");
        assert_eq!(read.latest_key, key(11));
        assert_eq!(read.durations, (3..12).map(f64::from).collect::<Vec<_>>());
        assert_eq!(
            pointers(dir.path())
                .get("other", || dir.path().join("none"))
                .map(|p| p.latest_key),
            Some(key(99))
        );
        assert!(
            pointers(dir.path())
                .get("unknown", || dir.path().join("none"))
                .is_none()
        );
        Ok(())
    }

    /// A dead engine's journal is folded into the snapshot and removed, a live one's is left as it is, and the
    /// pointers read the same before and after; `keep` drops the pointers of keys `gc` removed.
    #[test]
    fn a_dead_engines_journal_is_folded_and_a_live_ones_is_kept() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let lock = dir.path().join("pointers.folding");
        pointers(dir.path()).record(
            || Ok("fracflow-dead".into()),
            &[("a", key(1), 1.0), ("b", key(2), 2.0)],
        )?;
        pointers(dir.path()).record(|| Ok("fracflow-live".into()), &[("a", key(3), 3.0)])?;
        let folded = pointers(dir.path()).fold(&lock, |owner| owner == "fracflow-dead", None)?;
        assert_eq!(folded, 1);
        assert!(!dir.path().join("fracflow-dead.jsonl").exists());
        assert!(dir.path().join("fracflow-live.jsonl").exists());
        assert!(dir.path().join(SNAPSHOT).exists());
        let read = pointers(dir.path());
        let a = read.get("a", || dir.path().join("none")).expect("a");
        assert_eq!((a.latest_key, a.durations), (key(3), vec![1.0, 3.0]));
        assert_eq!(
            read.get("b", || dir.path().join("none"))
                .map(|p| p.latest_key),
            Some(key(2))
        );
        // Nothing dead is left: no rewrite. Then gc's fold keeps only what `keep` accepts.
        assert_eq!(pointers(dir.path()).fold(&lock, |_| false, None)?, 0);
        pointers(dir.path()).fold(&lock, |_| true, Some(&|k| *k == key(2)))?;
        let read = pointers(dir.path());
        assert!(read.get("a", || dir.path().join("none")).is_none());
        assert!(read.get("b", || dir.path().join("none")).is_some());
        Ok(())
    }

    /// A dead journal small beside the snapshot waits for more (a run's start would rewrite every pointer after
    /// each run), until `gc` folds it; pointer files of older engines go into the snapshot at the next fold, the
    /// snapshot's pointer of a node winning over its file.
    #[test]
    fn a_small_journal_waits_and_older_pointer_files_are_folded_in() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let lock = dir.path().join("pointers.folding");
        let many: Vec<(String, Digest, f64)> = (0..100)
            .map(|i| (format!("node-{i}"), key(1), 1.0))
            .collect();
        let many: Vec<(&str, Digest, f64)> =
            many.iter().map(|(n, k, s)| (n.as_str(), *k, *s)).collect();
        pointers(dir.path()).record(|| Ok("fracflow-first".into()), &many)?;
        assert_eq!(pointers(dir.path()).fold(&lock, |_| true, None)?, 1);
        pointers(dir.path()).record(|| Ok("fracflow-small".into()), &[("node-1", key(2), 2.0)])?;
        assert_eq!(
            pointers(dir.path()).fold(&lock, |_| true, None)?,
            0,
            "too small to fold yet"
        );
        assert_eq!(
            pointers(dir.path())
                .get("node-1", || dir.path().join("none"))
                .map(|p| p.latest_key),
            Some(key(2)),
            "read from the journal meanwhile"
        );
        assert_eq!(
            pointers(dir.path()).fold(&lock, |_| true, Some(&|_| true))?,
            1,
            "gc folds it"
        );
        // Older engines' files: one for a node the snapshot knows (the snapshot wins), one for a new node.
        for (file, node, byte) in [("aa.json", "node-1", 8), ("bb.json", "older", 9)] {
            let pointer = NodePointer {
                node: node.into(),
                latest_key: key(byte),
                durations: vec![0.5],
            };
            fs::write(
                dir.path().join(file),
                serde_json::to_vec(&pointer).map_err(io::Error::other)?,
            )?;
        }
        pointers(dir.path()).fold(&lock, |_| false, None)?;
        assert!(!dir.path().join("aa.json").exists() && !dir.path().join("bb.json").exists());
        let read = pointers(dir.path());
        assert_eq!(
            read.get("node-1", || dir.path().join("none"))
                .map(|p| p.latest_key),
            Some(key(2))
        );
        assert_eq!(
            read.get("older", || dir.path().join("none"))
                .map(|p| p.latest_key),
            Some(key(9))
        );
        Ok(())
    }

    /// A pointer file of an engine from before the journals is still read, for a node no journal names; with
    /// none in the folder, no file is looked for.
    #[test]
    fn an_older_engines_pointer_file_is_read() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let legacy = dir.path().join("0123.json");
        let old = NodePointer {
            node: "old".into(),
            latest_key: key(5),
            durations: vec![0.5],
        };
        fs::write(&legacy, serde_json::to_vec(&old).map_err(io::Error::other)?)?;
        let read = pointers(dir.path()).get("old", || legacy.clone());
        assert_eq!(read.map(|p| p.latest_key), Some(key(5)));
        fs::remove_file(&legacy)?;
        let empty = tempfile::tempdir()?;
        let asked = std::cell::Cell::new(false);
        let read = pointers(empty.path()).get("old", || {
            asked.set(true);
            legacy.clone()
        });
        assert!(read.is_none() && !asked.get());
        Ok(())
    }
}
