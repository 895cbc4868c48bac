//! The cache's hit index: one file, `index.msgpack`, holding what each entry serves a run ([`Hit`]) beside the
//! identity of the entry file it was read from, so that a run of 10 000 cached nodes reads one file instead
//! of opening and parsing 10 000 entries. MessagePack rather than JSON lines: a no-op reads every record, and
//! parsing 3.5 MB of JSON was a tenth of it. A header, the blake3 of the rest, then one MessagePack array per
//! record. Arrays, fields by position, rather than maps: decoding every field's name cost a no-op of 10 000
//! nodes 5 % of its instructions. The header's version names the fields and their order, and changes with
//! them. The checksum because a record is read without its field names: a tail torn by power loss and filled
//! with other bytes can still parse, as a record whose hashes are wrong; a file whose checksum fails is read
//! as no index at all.
//!
//! The index is a copy, never the record: an entry file is the commit point of its key. A record is used only
//! while the entry file it was taken from is still there under the same identity (device, inode and size: an
//! entry is replaced only by rename, which gives a new inode), and the blobs it names still exist; otherwise
//! the entry itself is read. A lost, torn or stale index thus costs time, never correctness: it is written
//! without fsync, and a torn file or one of another format is ignored whole.
//! Several engines may rewrite it at once; each merges what is on disk before replacing it, and a record one
//! of them loses is read from its entry the next time.

use std::collections::hash_map::Entry;

use foldhash::{HashMap, HashMapExt};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::cache::Hit;
use fracflow_record::{Digest, Files, Publish, sealed};

/// The file's first value; any other makes the whole file a miss.
const HEADER: &str = "fracflow hit index 5";

/// The index's file before version 2 (JSON lines), removed when the index is next written.
const FORMER_FILE: &str = "index.jsonl";

/// Which file an entry was read from. Renames are how entries are published, and a rename never keeps the
/// inode of the file it replaces. An inode number is reused once its file is gone, so the inode's change time
/// is part of the identity too: an entry rewritten onto a reused inode of the same size (two runs of a key
/// killed before the index was saved) is a new file with a new change time, not the recorded one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EntryIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub changed_ns: i64,
}

impl EntryIdentity {
    pub fn of(metadata: &fs::Metadata) -> EntryIdentity {
        EntryIdentity {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.len(),
            changed_ns: metadata
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(metadata.ctime_nsec()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    entry: EntryIdentity,
    hit: Hit,
}

/// A key's place in the index as this process holds it.
#[derive(Debug)]
enum Slot {
    /// Read from the file. Boxed: the table has a slot for every key of the index, and a served record leaves
    /// only its identity there; inline, each slot kept a whole record's room after the record moved out (30 of
    /// the 220 MB of a 100 000-node no-op's peak heap).
    Held(Box<Record>),
    /// Its record was handed to a run (moved, not copied: a no-op takes every record once) and is still the
    /// one in the file, whose copy `save` writes back.
    Served(EntryIdentity),
    /// A record this process found or made, encoded as the file holds it. A first run inserts one for every
    /// node it builds and holds them all until the run ends: encoded (139 bytes for a trivial node), the index
    /// of a 30 000-node first run took 8.9 MB of heap instead of 13.0, its table included (heaptrack).
    Changed(Box<[u8]>),
    /// A key this process found gone: the file loses it, whatever another engine wrote for it.
    Removed,
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<Digest, Slot>,
    /// Whether any slot is [`Slot::Changed`] or [`Slot::Removed`]: without one, there is nothing to save.
    changed: bool,
}

#[derive(Debug)]
pub(crate) struct HitIndex {
    path: PathBuf,
    state: Mutex<Option<State>>,
}

impl HitIndex {
    pub fn new(cache_root: &Path) -> HitIndex {
        HitIndex {
            path: cache_root.join("index.msgpack"),
            state: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<State>> {
        match self.state.lock() {
            Ok(guard) => guard,
            // A thread that panicked while holding it left a map that is at worst missing a record.
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn with<T>(&self, act: impl FnOnce(&mut State) -> T) -> T {
        let mut guard = self.lock();
        let state = guard.get_or_insert_with(|| State {
            records: read_records(&self.path),
            changed: false,
        });
        act(state)
    }

    /// The record of `key`, if the index holds one taken from the entry file identified as `identity`. Each
    /// record read from the file is served once: asked again, the caller reads the entry.
    pub fn get(&self, key: &Digest, identity: EntryIdentity) -> Option<Hit> {
        self.with(|state| {
            let slot = state.records.get_mut(key)?;
            match slot {
                Slot::Held(record) if record.entry == identity && record.hit.key == *key => {}
                // Decoded, not moved: the file does not hold it yet.
                Slot::Changed(bytes) => {
                    let record: Record = rmp_serde::from_slice(bytes).ok()?;
                    return (record.entry == identity && record.hit.key == *key)
                        .then_some(record.hit);
                }
                _ => return None,
            }
            match std::mem::replace(slot, Slot::Served(identity)) {
                Slot::Held(record) => Some(record.hit),
                _ => None,
            }
        })
    }

    pub fn insert(&self, identity: EntryIdentity, hit: Hit) {
        self.with(|state| {
            let key = hit.key;
            // A record read again from its unchanged entry file is the file's record still.
            let unchanged = match state.records.get(&key) {
                None | Some(Slot::Changed(_) | Slot::Removed) => false,
                Some(Slot::Held(r)) => r.entry == identity && r.hit == hit,
                Some(Slot::Served(served)) => *served == identity,
            };
            let record = Record {
                entry: identity,
                hit,
            };
            let slot = if unchanged {
                Slot::Held(Box::new(record))
            } else {
                state.changed = true;
                // Encoding into a vector fails only for a type serde cannot write, which a record is not;
                // should it ever, the key is read from its entry next time.
                match rmp_serde::to_vec(&record) {
                    Ok(bytes) => Slot::Changed(bytes.into_boxed_slice()),
                    Err(_) => Slot::Removed,
                }
            };
            state.records.insert(key, slot);
        });
    }

    /// Forgets `key`: its entry is gone or no longer the one recorded.
    pub fn remove(&self, key: &Digest) {
        self.with(|state| {
            if let Some(slot) = state.records.get_mut(key) {
                *slot = Slot::Removed;
                state.changed = true;
            }
        });
    }

    /// Writes the index when this process changed it, merged with what other engines wrote meanwhile (theirs
    /// for the keys this one did not touch), and lets go of the records: a run saves at its end, and what
    /// asks after that reads the file again. Best effort, as everything about the index.
    pub fn save(&self, files: &Files) -> io::Result<()> {
        let mut guard = self.lock();
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        if !state.changed {
            return Ok(());
        }
        for (key, record) in read_records(&self.path) {
            match state.records.entry(key) {
                Entry::Vacant(vacant) => {
                    vacant.insert(record);
                }
                Entry::Occupied(mut served) if matches!(served.get(), Slot::Served(_)) => {
                    served.insert(record);
                }
                Entry::Occupied(_) => {}
            }
        }
        // Sorted, so the file is the same whatever order the keys were found in.
        let mut keys: Vec<&Digest> = state.records.keys().collect();
        keys.sort();
        let mut body = Vec::with_capacity(
            state
                .records
                .values()
                .map(|slot| match slot {
                    Slot::Changed(bytes) => bytes.len(),
                    _ => 160,
                })
                .sum(),
        );
        // A served record the file no longer holds (another engine dropped it) is left out: its entry is read
        // next time.
        for slot in keys.into_iter().filter_map(|key| state.records.get(key)) {
            match slot {
                Slot::Held(record) => {
                    rmp_serde::encode::write(&mut body, record).map_err(io::Error::other)?
                }
                Slot::Changed(bytes) => body.extend_from_slice(bytes),
                Slot::Served(_) | Slot::Removed => {}
            }
        }
        files
            .prepare(&self.path, Publish::Unsynced, |out| {
                out.write_all(&header())?;
                sealed::write_sealed(out, &body)
            })?
            .publish()?;
        *guard = None;
        if let Some(dir) = self.path.parent() {
            let _ = files.remove_file(&dir.join(FORMER_FILE));
        }
        Ok(())
    }
}

/// The file's first bytes: [`HEADER`] as a MessagePack string.
fn header() -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER.len() + 1);
    // Writing a string into a vector cannot fail; an empty header would only make every read a miss.
    let _ = rmp_serde::encode::write(&mut bytes, HEADER);
    bytes
}

/// The records of the index file; nothing for a missing file, another format, or a body whose checksum fails
/// (a write torn by power loss).
fn read_records(path: &Path) -> HashMap<Digest, Slot> {
    let Ok(bytes) = fs::read(path) else {
        return HashMap::new();
    };
    let Some(rest) = bytes.strip_prefix(header().as_slice()) else {
        return HashMap::new();
    };
    let Some(body) = sealed::unseal(rest) else {
        return HashMap::new();
    };
    // A record of a trivial node is about 140 bytes; growing the map record by record re-hashed every key
    // several times over.
    let mut records = HashMap::with_capacity(body.len() / 140);
    let mut values = rmp_serde::Deserializer::from_read_ref(body);
    while let Ok(record) = Record::deserialize(&mut values) {
        records.insert(record.hit.key, Slot::Held(Box::new(record)));
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn key(name: &str) -> Digest {
        Digest::of(name.as_bytes())
    }

    fn hit(name: &str) -> Hit {
        Hit {
            key: key(name),
            outputs: crate::cache::Outputs::new(),
            metrics: BTreeMap::new(),
            log: None,
            output_hash: Digest::of(format!("out-{name}").as_bytes()),
            seconds: 1.0,
        }
    }

    const ID: EntryIdentity = EntryIdentity {
        dev: 1,
        ino: 2,
        size: 3,
        changed_ns: 4,
    };

    #[test]
    fn a_record_serves_only_the_entry_file_it_was_read_from() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let index = HitIndex::new(dir.path());
        index.insert(ID, hit("k1"));
        index.save(&Files::real())?;
        let reread = HitIndex::new(dir.path());
        assert_eq!(reread.get(&key("k1"), ID), Some(hit("k1")));
        let replaced = EntryIdentity { ino: 9, ..ID };
        assert_eq!(reread.get(&key("k1"), replaced), None);
        // Its inode number reused by a later entry file of the same size: another file.
        let reused = EntryIdentity {
            changed_ns: 5,
            ..ID
        };
        assert_eq!(reread.get(&key("k1"), reused), None);
        assert_eq!(reread.get(&key("k2"), ID), None);
        Ok(())
    }

    #[test]
    fn torn_and_foreign_files_are_misses_not_errors() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let index = HitIndex::new(dir.path());
        index.insert(ID, hit("k1"));
        index.insert(ID, hit("k2"));
        index.save(&Files::real())?;
        let saved = fs::read(index.path())?;
        assert_eq!(
            HitIndex::new(dir.path()).get(&key("k2"), ID),
            Some(hit("k2"))
        );
        // Power loss can leave the tail of a file that was being written filled with zeros: here the last
        // record's duration and the end of its output hash, where the bytes still parse, as a record with
        // another hash.
        let mut torn = saved.clone();
        let tail = torn.len() - 12;
        torn[tail..].fill(0);
        fs::write(index.path(), &torn)?;
        let reread = HitIndex::new(dir.path());
        assert_eq!(reread.get(&key("k2"), ID), None);
        assert_eq!(reread.get(&key("k1"), ID), None);
        let mut cut = saved;
        cut.truncate(cut.len() - 12);
        fs::write(index.path(), &cut)?;
        assert_eq!(HitIndex::new(dir.path()).get(&key("k1"), ID), None);
        fs::write(index.path(), "{\"format\":\"other\"}\n")?;
        assert_eq!(HitIndex::new(dir.path()).get(&key("k1"), ID), None);
        let mut foreign = Vec::new();
        rmp_serde::encode::write_named(&mut foreign, "another index").map_err(io::Error::other)?;
        fs::write(index.path(), &foreign)?;
        assert_eq!(HitIndex::new(dir.path()).get(&key("k1"), ID), None);
        Ok(())
    }

    #[test]
    fn a_served_record_is_served_once_and_stays_in_the_file() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let index = HitIndex::new(dir.path());
        index.insert(ID, hit("k1"));
        index.insert(ID, hit("k2"));
        index.save(&Files::real())?;
        let reread = HitIndex::new(dir.path());
        assert_eq!(reread.get(&key("k1"), ID), Some(hit("k1")));
        assert_eq!(reread.get(&key("k1"), ID), None, "moved out, not copied");
        // Read again from its unchanged entry, it is no change; another key's change saves the file with it.
        reread.insert(ID, hit("k1"));
        assert_eq!(reread.get(&key("k2"), ID), Some(hit("k2")));
        reread.insert(ID, hit("k3"));
        reread.save(&Files::real())?;
        let after = HitIndex::new(dir.path());
        for name in ["k1", "k2", "k3"] {
            assert_eq!(after.get(&key(name), ID), Some(hit(name)), "{name}");
        }
        // A served key whose entry went away is dropped from the file.
        after.remove(&key("k1"));
        after.save(&Files::real())?;
        assert_eq!(HitIndex::new(dir.path()).get(&key("k1"), ID), None);
        Ok(())
    }

    #[test]
    fn an_inserted_record_is_held_encoded_and_let_go_once_saved() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let index = HitIndex::new(dir.path());
        index.insert(ID, hit("k1"));
        let encoded = index.with(|state| match state.records.get(&key("k1")) {
            Some(Slot::Changed(bytes)) => Some(bytes.len()),
            _ => None,
        });
        assert!(encoded.is_some_and(|len| len < 200), "{encoded:?}");
        // Not in the file yet, so decoded and kept, not moved out.
        assert_eq!(index.get(&key("k1"), ID), Some(hit("k1")));
        assert_eq!(index.get(&key("k1"), ID), Some(hit("k1")));
        assert_eq!(index.get(&key("k1"), EntryIdentity { ino: 9, ..ID }), None);
        index.save(&Files::real())?;
        assert!(index.lock().is_none(), "the records are let go once saved");
        // Asked again, the index reads its file.
        assert_eq!(index.get(&key("k1"), ID), Some(hit("k1")));
        assert_eq!(index.get(&key("k1"), ID), None);
        Ok(())
    }

    #[test]
    fn saving_merges_what_another_engine_wrote_meanwhile() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let one = HitIndex::new(dir.path());
        let other = HitIndex::new(dir.path());
        one.insert(ID, hit("k1"));
        other.insert(ID, hit("k2"));
        other.save(&Files::real())?;
        one.save(&Files::real())?;
        let merged = HitIndex::new(dir.path());
        assert!(merged.get(&key("k1"), ID).is_some() && merged.get(&key("k2"), ID).is_some());
        // A key this engine found gone stays gone, whatever the file held.
        let third = HitIndex::new(dir.path());
        third.remove(&key("k2"));
        third.save(&Files::real())?;
        assert!(HitIndex::new(dir.path()).get(&key("k2"), ID).is_none());
        Ok(())
    }
}
