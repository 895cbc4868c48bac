//! The run's committer: one thread that publishes staged results to the cache in groups, and writes the run's
//! manifest checkpoints, so that no sync waits on the scheduler's thread.
//!
//! A node's thread stages its outputs (hashed, unsynced) and is done; its dependents start on the staged files
//! at once, while the committer syncs and publishes. The staged results that arrive while it syncs one group,
//! and in a short window after the first of them ([`GROUP_WINDOW`]), form the next, so the syncs of a fast
//! chain or fan-in are shared by several nodes and stay off the critical path. A
//! node is reported finished, and its key released to other engines, only once its entry is committed: what
//! the run says is done survives a kill and power loss.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use petgraph::graph::NodeIndex;

use crate::cache::{Cache, CacheEntry, Staged};
use crate::keylock::KeyLock;
use crate::run::Checkpoint;

/// How long the committer gathers staged results after the first one before it commits them as one group. Without
/// it, a fan-in's committer took what had arrived while it synced the last group, mostly one result, and synced
/// each one's blob, entry and their directories on their own (`perf trace -s` of a 3 000-node fan-in: 3.8
/// `fsync`s a node, each 0.69 ms on this VM's disk); gathered, a group shares three `syncfs`. 10 000-node first
/// runs, fresh copies alternating with the build before: fan-in 10.2–10.9 → 9.8–10.1 s, sweep 10.1–10.6 →
/// 9.1–9.6 s, chain unchanged (its commits are off its critical path); a 20 ms window bought no more.
pub(super) const GROUP_WINDOW: Duration = Duration::from_millis(5);

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

/// The committer's end of its queue as the scheduler holds it: sending never wakes the committer while it
/// gathers a group (see [`committer`]), and closing the queue does, so that it commits what it holds at once.
#[derive(Debug)]
pub(super) struct CommitQueue {
    sender: Option<mpsc::Sender<Work>>,
    committer: std::thread::Thread,
}

impl CommitQueue {
    /// The queue `sender` feeds, read by `committer` (the thread running [`committer`]).
    pub fn new(sender: mpsc::Sender<Work>, committer: std::thread::Thread) -> CommitQueue {
        CommitQueue {
            sender: Some(sender),
            committer,
        }
    }

    pub fn send(&self, work: Work) -> Result<(), mpsc::SendError<Work>> {
        match &self.sender {
            Some(sender) => sender.send(work),
            None => Err(mpsc::SendError(work)),
        }
    }
}

impl Drop for CommitQueue {
    /// Closes the queue, then wakes the committer, which finds it closed and stops gathering.
    fn drop(&mut self) {
        drop(self.sender.take());
        self.committer.unpark();
    }
}

/// Commits what arrives on `queue` in groups until the queue closes, and hands each group's outcome to
/// `done`; writes the newest manifest checkpoint after each group. A group is what arrives until `window`
/// after its first item ([`GROUP_WINDOW`] in a run), or until the queue closes.
///
/// While it gathers, the committer sleeps parked, not blocked on the queue: a send to a blocked receiver wakes
/// it, and in a fast fan-in's first run that was one wake-up of this thread (and a futex call of the sender)
/// for nearly every node (`strace -f`: 2 386 futex waits of the committer in 3 000 nodes). Parked, it wakes
/// once at the window's end; [`CommitQueue`]'s closing unparks it.
pub(super) fn committer(
    cache: &Cache,
    queue: mpsc::Receiver<Work>,
    window: Duration,
    done: &mut dyn FnMut(Vec<Committed>),
) {
    while let Ok(first) = queue.recv() {
        let mut gathered = vec![first];
        let gathering_ends = Instant::now() + window;
        loop {
            let open = take_waiting(&queue, &mut gathered);
            let left = gathering_ends.saturating_duration_since(Instant::now());
            // A closed queue or the window's end ends the gathering; what is gathered is committed either way.
            if !open || left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
        let mut group = Vec::new();
        let mut manifest = None;
        for work in gathered {
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

/// Moves what waits on `queue` into `gathered`; `false` once the queue is closed.
fn take_waiting(queue: &mpsc::Receiver<Work>, gathered: &mut Vec<Work>) -> bool {
    loop {
        match queue.try_recv() {
            Ok(work) => gathered.push(work),
            Err(mpsc::TryRecvError::Empty) => return true,
            Err(mpsc::TryRecvError::Disconnected) => return false,
        }
    }
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

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::cache::tests::stage_value;

    /// A staged result of one output, distinct per `value`, as the committer is handed it.
    fn to_commit(cache: &Cache, value: u64) -> io::Result<Box<ToCommit>> {
        let (staged, staging) = stage_value(cache, value)?;
        Ok(Box::new(ToCommit {
            index: NodeIndex::new(value as usize),
            staged,
            kind: "test".into(),
            seconds: 0.1,
            key_lock: None,
            staging: Some(staging),
        }))
    }

    /// A result that arrives while the committer gathers after the first one joins its group, and closing the
    /// queue ends the gathering at once rather than when the window does. (Were the second result taken only
    /// if it had arrived before the first was received, it would form a group of its own.)
    #[test]
    fn results_within_the_window_are_one_group_and_a_closed_queue_ends_it() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path())?;
        let window = Duration::from_secs(60);
        let (queue, work) = mpsc::channel();
        let mut groups: Vec<Vec<bool>> = Vec::new();
        let waited = std::thread::scope(|scope| -> io::Result<Duration> {
            let groups = &mut groups;
            let cache = &cache;
            let committing = scope.spawn(move || {
                committer(cache, work, window, &mut |group| {
                    groups.push(group.iter().map(|c| c.result.is_ok()).collect());
                });
            });
            let queue = CommitQueue::new(queue, committing.thread().clone());
            let send = |item| queue.send(Work::Commit(item)).map_err(io::Error::other);
            send(to_commit(cache, 1)?)?;
            std::thread::sleep(Duration::from_millis(100));
            send(to_commit(cache, 2)?)?;
            drop(queue);
            let closed = Instant::now();
            committing
                .join()
                .map_err(|_| io::Error::other("the committer panicked"))?;
            Ok(closed.elapsed())
        })?;
        assert_eq!(groups, [vec![true, true]]);
        assert!(
            waited < window / 2,
            "the committer waited {waited:?} after the queue closed"
        );
        Ok(())
    }
}
