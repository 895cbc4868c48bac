//! Runs the nodes a target needs: keys computed as dependencies finish, cache hits skipped, the rest run in
//! parallel within the core budget and serialised on exclusive resources.
//!
//! Several engines may share a cache. Before building a cacheable key, a run takes the key's lock
//! (`keylock`); when another engine holds it, the node waits without a core while the run goes on with other
//! nodes, and tries again with backoff. Once it gets the lock it looks in the cache again: the other engine's
//! result is then a cache hit. No deadlock is possible: a lock is held only while its node executes, and an
//! executing node waits for nothing but its own process, so no engine ever holds a key while it waits for
//! another one.
//!
//! Lazy effects (`Executor::lazy`: `command` nodes with `effect: true`, device set-up steps such as program →
//! reboot → driver) run when, and only when, a node that depends on them runs, at most once per run, before
//! it. To know whether a dependent is a cache hit before the effect runs, an effect contributes to its
//! dependents' keys the hash of what it does, not of what it printed: its own fingerprint, in which `upstream`
//! holds only the keys of the lazy effects it depends on (the chain before it). The outputs of cacheable
//! dependencies are left out: an effect has no outputs to carry them, and such a dependency orders the effect
//! (the second bitstream is programmed after every run on the first) rather than shaping the state it sets up.
//! A node whose result depends on what a cacheable node made depends on that node itself. An effect whose
//! dependents are all cache hits is reported skipped, "nothing that needs it runs". An effect that nothing
//! in the run depends on (it was asked for itself), or one matched by `--rerun`, runs.
//!
//! Only `effect: true` commands are lazy, not every non-cacheable kind: `program` and `load` write outputs
//! that record what the device was found to hold, which their dependents read and key on, so those keys are
//! not known before they run; and a figure pipeline that uses them relies on the device being programmed
//! whenever the run reaches them (a fully cached `frac-measure` still programs its device).
//!
//! The run itself is a state machine (`state::Run`, described in `engine/docs/scheduler.md`); how a key is made and
//! what a keyed node needs are decided in `decide`, which `plan` calls too.

mod commit;
mod launch;
mod state;
mod workers;

pub(crate) use state::exclusive;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;

use petgraph::graph::NodeIndex;

use fracflow_record::{EventKind, RunStatus};

use crate::cache::Cache;
use crate::exec::{Cancel, KindInfo, Kinds, NodeError};
use crate::graph::Graph;
use crate::run::RunDir;
use crate::spec::{NodeSpec, Resource};
use crate::statcache::StatCache;

use commit::{CommitQueue, Committed, Work};
use launch::Finished;
use state::{Next, Run};
use workers::Workers;

/// What the run's driver hears from the threads it started.
#[derive(Debug)]
enum Message {
    /// A node's thread is done: its result is staged, or it failed.
    Finished(Box<Finished>),
    /// The committer published a group of staged results.
    Committed(Vec<Committed>),
}

/// How a run is carried out.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Core budget: a node holds `cores:N` of it (1 when it declares none).
    pub jobs: usize,
    /// After a failure, go on with branches that do not depend on it.
    pub keep_going: bool,
    /// Node ids or glob patterns that run even when cached.
    pub rerun: Vec<String>,
    /// Testbed fields that enter every key.
    pub testbed: BTreeMap<String, serde_json::Value>,
}

/// Everything the engine needs besides the graph.
#[derive(Clone, Copy)]
pub struct Engine<'a> {
    pub root: &'a Path,
    pub cache: &'a Cache,
    pub stat: &'a StatCache,
    pub kinds: &'a dyn Kinds,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("root", &self.root)
            .field("cache", &self.cache)
            .finish()
    }
}

/// Receives every event as it happens (the terminal reporter).
pub trait Observer {
    fn event(&mut self, event: &EventKind);
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub status: RunStatus,
    pub built: usize,
    pub cached: usize,
    pub failed: Vec<(String, String)>,
    pub skipped: usize,
}

impl RunOptions {
    /// Whether `--rerun` names `id`: the id itself, or a glob pattern that matches it.
    pub fn forces(&self, id: &str) -> bool {
        self.rerun.iter().any(|pattern| {
            pattern == id || glob::Pattern::new(pattern).is_ok_and(|p| p.matches(id))
        })
    }
}

impl Engine<'_> {
    /// The kind's contribution to a node's key.
    pub fn kind_info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        let executor = self.kinds.executor(&spec.kind).ok_or_else(|| {
            NodeError::permanent(format!(
                "node `{}`: no executor for kind `{}`",
                spec.id, spec.kind
            ))
        })?;
        executor.info(spec)
    }

    /// Whether `spec` is a lazy effect: a non-cacheable node whose kind says so (see `Executor::lazy`).
    pub fn is_lazy(&self, spec: &NodeSpec, info: &KindInfo) -> bool {
        !info.cacheable
            && self
                .kinds
                .executor(&spec.kind)
                .is_some_and(|executor| executor.lazy(spec))
    }

    /// The blake3 of each of the node's input files, by path relative to the project root: what its
    /// fingerprint's `inputs` holds.
    pub fn input_hashes(&self, spec: &NodeSpec) -> Result<BTreeMap<String, String>, NodeError> {
        let mut inputs = BTreeMap::new();
        for path in &spec.inputs {
            let hash = self.stat.hash(path).map_err(|e| {
                NodeError::permanent(format!(
                    "node `{}` (at {}): input file {}: {e}",
                    spec.id,
                    spec.origin,
                    path.display()
                ))
            })?;
            let shown = path.strip_prefix(self.root).unwrap_or(path);
            inputs.insert(shown.to_string_lossy().into_owned(), hash);
        }
        Ok(inputs)
    }
}

/// Only nodes that touch the testbed (a device or a host) depend on it: switching testbeds must not rebuild
/// bitstreams.
pub(crate) fn uses_testbed(spec: &NodeSpec) -> bool {
    spec.resources
        .iter()
        .any(|r| matches!(r, Resource::Device(_) | Resource::Host(_)))
}

/// Runs `targets` (and everything they need) to completion, failure or interruption.
pub fn run(
    engine: Engine<'_>,
    graph: &Graph,
    targets: &[NodeIndex],
    options: &RunOptions,
    run_dir: &mut RunDir,
    observer: &mut dyn Observer,
    cancel: &Cancel,
) -> std::io::Result<RunSummary> {
    let (to_commit, queue) = mpsc::channel::<Work>();
    let mut run = Run::start(engine, graph, targets, options, cancel, run_dir, observer)?;
    let identity = run.identity();
    let (sender, receiver) = mpsc::channel();
    std::thread::scope(|scope| -> std::io::Result<()> {
        let committed = sender.clone();
        let committer = scope.spawn(move || {
            commit::committer(engine.cache, queue, commit::GROUP_WINDOW, &mut |group| {
                let _ = committed.send(Message::Committed(group));
            });
        });
        run.set_committer(CommitQueue::new(to_commit, committer.thread().clone()));
        // Dropped when the driver returns, however it returns, so that the scope's join finds them ending.
        let workers = Workers::new(scope);
        let identity = &identity;
        let driven = (|| loop {
            run.key_ready()?;
            run.launch(&mut |launch| {
                let sender = sender.clone();
                workers.run(Box::new(move || {
                    let finished = launch.execute(engine, cancel, identity);
                    let _ = sender.send(Message::Finished(Box::new(finished)));
                }));
            })?;
            let wait = match run.next() {
                Next::End => return Ok(()),
                Next::Key => continue,
                Next::Wait(wait) => wait,
            };
            match receiver.recv_timeout(wait) {
                Ok(Message::Finished(finished)) => run.finished(*finished)?,
                Ok(Message::Committed(group)) => run.committed(group)?,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
        })();
        drop(workers);
        // Closing the queue ends the committer once it has published what it holds.
        run.close_committer();
        driven
    })?;
    run.finish()
}
