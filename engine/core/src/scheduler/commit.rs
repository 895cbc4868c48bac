//! The run's committer: one thread that publishes staged results to the cache in groups, and writes the run's
//! manifest checkpoints, so that no sync waits on the scheduler's thread.
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
use crate::run::Checkpoint;

/// What the committer is handed.
#[derive(Debug)]
pub(super) enum Work {
    Commit(Box<ToCommit>),
    /// A manifest checkpoint; of several waiting, only the newest is written.
    Manifest(Checkpoint),
}

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
/// `done`; writes the newest manifest checkpoint after each group.
pub(super) fn committer(
    cache: &Cache,
    queue: mpsc::Receiver<Work>,
    done: &mut dyn FnMut(Vec<Committed>),
) {
    while let Ok(first) = queue.recv() {
        let mut group = Vec::new();
        let mut manifest = None;
        for work in std::iter::once(first).chain(queue.try_iter()) {
            match work {
                Work::Commit(item) => group.push(*item),
                Work::Manifest(checkpoint) => manifest = Some(checkpoint),
            }
        }
        if !group.is_empty() {
            done(commit_group(cache, group));
        }
        if let Some(checkpoint) = manifest {
            // A view of the cache, rewritten soon and durably at the end: a failure costs nothing.
            let _ = checkpoint.write();
        }
    }
    cache.drain_staging_pool();
}

fn commit_group(cache: &Cache, group: Vec<ToCommit>) -> Vec<Committed> {
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
    rest.into_iter()
        .zip(results)
        .map(|((index, kind, seconds, key_lock, staging), result)| {
            if let Some(staging) = staging {
                cache.recycle_staging(&staging);
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
        .collect()
}
