//! The run's committer: one thread that publishes staged results to the cache in groups.
//!
//! A node's thread stages its outputs (hashed, unsynced) and is done; its dependents start on the staged files
//! at once, while the committer syncs and publishes. Whatever staged results arrive while it syncs one group
//! form the next, so the syncs of a fast chain are shared by several nodes and stay off its critical path. A
//! node is reported finished, and its key released to other engines, only once its entry is committed: what
//! the run says is done survives a kill and power loss.

use std::path::PathBuf;
use std::sync::mpsc;

use petgraph::graph::NodeIndex;

use crate::cache::{Cache, CacheEntry, Staged};
use crate::keylock::KeyLock;

/// A staged result waiting for the committer.
#[derive(Debug)]
pub(super) struct ToCommit {
    pub index: NodeIndex,
    pub staged: Staged,
    /// The node's kind, for the remote tier's upload policy.
    pub kind: String,
    pub seconds: f64,
    pub key_lock: Option<KeyLock>,
    pub staging: Option<PathBuf>,
}

/// What became of one staged result.
#[derive(Debug)]
pub(super) struct Committed {
    pub index: NodeIndex,
    pub result: std::io::Result<CacheEntry>,
    pub seconds: f64,
}

/// Commits what arrives on `queue` in groups until the queue closes, and hands each group's outcome to
/// `done`.
pub(super) fn committer(
    cache: &Cache,
    queue: mpsc::Receiver<ToCommit>,
    done: &mut dyn FnMut(Vec<Committed>),
) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        group.extend(queue.try_iter());
        let (staged, rest): (Vec<Staged>, Vec<_>) = group
            .into_iter()
            .map(|item| {
                (
                    item.staged,
                    (
                        item.index,
                        item.kind,
                        item.seconds,
                        item.key_lock,
                        item.staging,
                    ),
                )
            })
            .unzip();
        let results = cache.commit(staged);
        let outcomes = rest
            .into_iter()
            .zip(results)
            .map(|((index, kind, seconds, key_lock, staging), result)| {
                if let Some(staging) = staging {
                    let _ = cache.files().remove_dir_all(&staging);
                }
                // Committed (or failed): a waiting engine now finds the entry, or builds the key itself.
                drop(key_lock);
                if let Ok(entry) = &result {
                    // In the background, after the commit: a slow remote never delays a dependent.
                    cache.upload(entry, &kind);
                }
                Committed {
                    index,
                    result,
                    seconds,
                }
            })
            .collect();
        done(outcomes);
    }
}
