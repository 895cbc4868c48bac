//! The run as a state machine: every selected node has a `State`, and each method below moves nodes from one
//! state to the next when something happens — a key became known, a node was launched, a node finished, the
//! run stops, the run ends. `decide` says what a keyed node needs; this module only acts on it.
//!
//! ```text
//! Waiting ─(dependencies known)→ Ready ─(key)→ Done (cache hit)
//!                                          ├─→ Queued ─(launch)→ Running ─→ Committing ─→ Done | Failed
//!                                          │                             └─→ Failed
//!                                          └─→ Deferred (lazy effect) ─(a dependent is queued)→ Queued
//!                                                                     └─(run ends)→ NotNeeded
//! Waiting | Ready | Queued ─(a dependency failed, or the run stopped)→ Skipped
//! ```

use std::collections::BTreeSet;

use foldhash::HashSet;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use petgraph::graph::NodeIndex;

use fracflow_record::{Digest, EventKind, NodeStatus, RunStatus};

use crate::cache::Hit;
use crate::decide::{self, AskRemote, Contribution, Keyed, NOT_NEEDED, Need, Unkeyed};
use crate::exec::{Cancel, Inputs, NodeError, RunIdentity};
use crate::graph::{Graph, NodeMap};
use crate::keylock::{self, Attempt, Holder, InUse, KeyLock};
use crate::run::{RunDir, now_rfc3339};
use crate::spec::{NodeSpec, Resource};

use super::commit::{CommitQueue, Committed, ToCommit, Work};
use super::launch::{Finished, Launch};
use super::{Engine, Observer, RunOptions, RunSummary};

/// How soon a node whose key another engine builds tries the lock again; doubled per try, capped at
/// `MAX_LOCK_POLL`. Each try is an `fcntl` and a read of the holder's slot (round trips on NFS), so the cap
/// keeps hundreds of waiting nodes cheap while a waiter still notices a release within a couple of seconds.
const FIRST_LOCK_POLL: Duration = Duration::from_millis(50);
const MAX_LOCK_POLL: Duration = Duration::from_secs(2);
/// A holder writes its name into its slot just after locking it; a waiter that read the slot in between
/// waits this long for the name before announcing the wait without it.
const UNNAMED_HOLDER_GRACE: Duration = Duration::from_secs(1);
/// How long the scheduler waits for a finished node before looking at the rest again.
const TICK: Duration = Duration::from_millis(100);

/// Where a node of the run is. A queued node is boxed: its keying is a hundred bytes and more, and every node of
/// a 10 000-node run has a state.
#[derive(Debug)]
enum State {
    /// Waiting for this many dependencies to contribute to its key.
    Waiting(usize),
    /// Every dependency's contribution is known: its key is computed next.
    Ready,
    /// A lazy effect whose key is known and that no node has needed yet.
    Deferred(Box<Queued>),
    /// It executes: waiting for cores, its device or host, its lazy effects, or another engine's lock.
    Queued(Box<Queued>),
    Running,
    /// Built: its outputs are staged and its dependents may start on them; its entry is being committed.
    Committing,
    /// Built and committed, or found in the cache, in this run.
    Done,
    Failed,
    Skipped,
    /// A lazy effect that no node needed: it did not run.
    NotNeeded,
}

/// A node that is to execute.
#[derive(Debug)]
struct Queued {
    /// How its key was made. Its whole fingerprint, which copies the spec's settings, is made from this when it
    /// starts: a run queues every node it can key at once (all the points of a sweep), and with each one's
    /// fingerprint a 300 000-point sweep's first run peaked at 662 MB before its first node ran, 554 without.
    keyed: Keyed,
    key: Digest,
    /// Cacheable nodes take the key's lock before they run and look in the cache again under it; effects are
    /// never taken from the cache, so another engine's result would not replace them.
    cacheable: bool,
    /// `--rerun`: runs even when another engine has just published the key.
    forced: bool,
    /// Lazy effects it depends on that have yet to finish: they run first.
    effects_first: usize,
    /// Set while another engine holds the key's lock.
    blocked: Option<Blocked>,
}

impl Queued {
    fn new(keyed: Keyed, forced: bool) -> Queued {
        Queued {
            cacheable: keyed.info.cacheable,
            key: keyed.key,
            keyed,
            forced,
            effects_first: 0,
            blocked: None,
        }
    }
}

/// A queued node whose key lock another engine holds.
#[derive(Debug)]
struct Blocked {
    since: Instant,
    /// The holder last announced.
    holder: Option<Holder>,
    announced: bool,
    retry_at: Instant,
    poll: Duration,
}

/// What a node contributes to its dependents' keys, once known.
#[derive(Debug)]
enum Known {
    /// A lazy effect's key, known before it runs.
    Effect(Digest),
    /// The hash of a node's outputs.
    Output(Digest),
}

/// The core budget and the exclusive resources of running nodes.
#[derive(Debug, Default)]
struct Slots {
    budget: usize,
    cores: usize,
    held: HashSet<Resource>,
    running: usize,
}

impl Slots {
    /// Whether `spec` may start now. With nothing running, anything may: a node asking for more than the
    /// budget runs alone rather than never.
    fn fit(&self, spec: &NodeSpec) -> bool {
        self.running == 0
            || (self.cores + node_cores(spec, self.budget) <= self.budget
                && !exclusive(spec).any(|r| self.held.contains(&r)))
    }
    fn full(&self) -> bool {
        self.running > 0 && self.cores >= self.budget
    }
    fn take(&mut self, spec: &NodeSpec) {
        self.running += 1;
        self.cores += node_cores(spec, self.budget);
        self.held.extend(exclusive(spec));
    }
    fn release(&mut self, spec: &NodeSpec) {
        self.running -= 1;
        self.cores -= node_cores(spec, self.budget);
        for resource in exclusive(spec) {
            self.held.remove(&resource);
        }
    }
}

/// What the driver does next.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// Nothing runs and nothing more can start.
    End,
    /// Nodes became ready (a cache hit found after a wait): key them before waiting.
    Key,
    /// Wait this long for a node to finish.
    Wait(Duration),
}

/// One run of a graph: the nodes' states, the core budget, and the run directory and observer that every
/// transition is reported to.
pub(super) struct Run<'a> {
    engine: Engine<'a>,
    graph: &'a Graph,
    options: &'a RunOptions,
    cancel: &'a Cancel,
    run_dir: &'a mut RunDir,
    observer: &'a mut dyn Observer,
    selected: BTreeSet<NodeIndex>,
    /// Each node's place in the topological order, by node index.
    position: Vec<usize>,
    states: NodeMap<State>,
    known: NodeMap<Known>,
    /// Ready nodes by topological position.
    ready: BTreeSet<(usize, NodeIndex)>,
    /// Queued nodes by topological position: launched in that order when they fit.
    queue: BTreeSet<(usize, NodeIndex)>,
    slots: Slots,
    /// Staged results the committer has not published yet: the run ends only once it has.
    committing: usize,
    /// The committer's queue: staged results and manifest checkpoints. Closed before the run ends.
    committer: Option<CommitQueue>,
    summary: RunSummary,
    started: Instant,
    locks: PathBuf,
    /// A lock error is reported once; the nodes it concerns are built without the lock.
    lock_error_reported: bool,
    /// Held until the run ends: `gc` deletes nothing while a run may still link or publish blobs.
    _in_use: Option<InUse>,
}

impl<'a> Run<'a> {
    /// Starts a run of `targets` and what they need: every node waits for its dependencies.
    pub fn start(
        engine: Engine<'a>,
        graph: &'a Graph,
        targets: &[NodeIndex],
        options: &'a RunOptions,
        cancel: &'a Cancel,
        run_dir: &'a mut RunDir,
        observer: &'a mut dyn Observer,
    ) -> io::Result<Run<'a>> {
        let selected = graph.closure(targets);
        let position = graph.positions();
        let mut states = NodeMap::for_graph(graph);
        let mut ready = BTreeSet::new();
        for &index in &selected {
            let unknown = graph.dependencies(index).count();
            if unknown == 0 {
                states.insert(index, State::Ready);
                ready.insert((position[index.index()], index));
            } else {
                states.insert(index, State::Waiting(unknown));
            }
        }
        run_dir.add_pending(selected.iter().map(|&index| {
            let spec = graph.spec(index);
            (spec.id.as_str(), spec.kind.as_str())
        }));
        let mut run = Run {
            engine,
            graph,
            options,
            cancel,
            run_dir,
            observer,
            selected,
            position,
            states,
            known: NodeMap::for_graph(graph),
            ready,
            queue: BTreeSet::new(),
            slots: Slots {
                budget: options.jobs.max(1),
                ..Slots::default()
            },
            committing: 0,
            committer: None,
            summary: RunSummary {
                status: RunStatus::Succeeded,
                built: 0,
                cached: 0,
                failed: Vec::new(),
                skipped: 0,
            },
            started: Instant::now(),
            locks: engine.cache.locks_dir(),
            lock_error_reported: false,
            _in_use: None,
        };
        run.emit(EventKind::RunStarted {
            pipeline: run.run_dir.manifest().pipeline.clone(),
            run_id: run.run_dir.run_id().to_owned(),
            nodes: run.selected.len(),
            testbed: run.run_dir.manifest().testbed.clone(),
        })?;
        match engine.cache.in_use() {
            Ok(guard) => run._in_use = Some(guard),
            Err(error) => run.emit(EventKind::Warning {
                message: format!(
                    "cannot mark the cache in use ({error}): a `cache gc` running meanwhile could delete \
                     what this run uses"
                ),
            })?,
        }
        if let Some(message) = keylock::locality_caveat(engine.cache.root()) {
            run.emit(EventKind::Warning { message })?;
        }
        Ok(run)
    }

    /// Which run the nodes execute in.
    pub fn identity(&self) -> RunIdentity {
        RunIdentity {
            pipeline: self.run_dir.manifest().pipeline.clone(),
            run_id: self.run_dir.run_id().to_owned(),
            testbed: self.run_dir.manifest().testbed.clone(),
        }
    }

    /// Nothing new starts once the run is cancelled (SIGINT, SIGTERM, SIGHUP set the flag; running nodes
    /// stop their own children), or once a node failed without `--keep-going`.
    pub fn stopping(&self) -> bool {
        self.cancel.is_cancelled() || (!self.options.keep_going && !self.summary.failed.is_empty())
    }

    /// Keys every ready node: a hit completes now (it needs no core), the rest are queued or deferred.
    pub fn key_ready(&mut self) -> io::Result<()> {
        while !self.stopping() {
            let Some((_, index)) = self.ready.pop_first() else {
                break;
            };
            self.key_known(index)?;
        }
        Ok(())
    }

    /// A ready node's key became known: act on what it needs.
    fn key_known(&mut self, index: NodeIndex) -> io::Result<()> {
        let keyed =
            decide::key(
                self.engine,
                self.graph,
                index,
                self.options,
                |dependency| match self.known.get(dependency) {
                    Some(Known::Effect(key)) => Contribution::Effect(key),
                    Some(Known::Output(hash)) => Contribution::Output(hash),
                    None => Contribution::Unknown,
                },
            );
        let keyed = match keyed {
            Ok(keyed) => keyed,
            Err(Unkeyed::Error(error)) => return self.fail(index, &error),
            // A node is ready only once every dependency is known; this would be a scheduler bug.
            Err(Unkeyed::Upstream(upstream)) => {
                let error = NodeError::permanent(format!(
                    "node `{}` was keyed before its dependencies {} finished",
                    self.graph.spec(index).id,
                    upstream.join(", ")
                ));
                return self.fail(index, &error);
            }
        };
        let spec = self.graph.spec(index);
        let has_dependents = self
            .graph
            .dependents(index)
            .any(|d| self.selected.contains(&d));
        let need = decide::decide(
            self.engine,
            spec,
            &keyed,
            self.options,
            has_dependents,
            AskRemote::Fetch,
        );
        if keyed.lazy {
            // Its dependents key on its key, so they can be keyed now; whether it runs depends on theirs.
            self.run_dir.record_mut(&spec.id, &spec.kind).key = Some(keyed.key);
            self.known.insert(index, Known::Effect(keyed.key));
        }
        let lazy = keyed.lazy;
        let forced = matches!(need, Need::Forced);
        match need {
            Need::Hit(entry) | Need::Remote(entry) => self.use_cached(index, *entry),
            Need::IfNeeded => {
                self.states
                    .insert(index, State::Deferred(Box::new(Queued::new(keyed, forced))));
                self.contribution_known(index);
                Ok(())
            }
            Need::Miss | Need::Forced | Need::Effect => {
                if lazy {
                    self.contribution_known(index);
                }
                self.enqueue(index, Box::new(Queued::new(keyed, forced)));
                Ok(())
            }
        }
    }

    /// Queues `index`, and with it every lazy effect it depends on that has not run yet (and theirs:
    /// program → reboot → driver), each waiting for those before it.
    fn enqueue(&mut self, index: NodeIndex, queued: Box<Queued>) {
        let mut stack = vec![(index, queued)];
        while let Some((node, mut queued)) = stack.pop() {
            for dependency in self.graph.dependencies(node) {
                let effect = matches!(self.known.get(dependency), Some(Known::Effect(_)));
                // Done or committing: it ran earlier in this run. Otherwise it is deferred (needed now), or
                // already queued.
                if !effect
                    || matches!(
                        self.states.get(dependency),
                        Some(State::Done | State::Committing)
                    )
                {
                    continue;
                }
                queued.effects_first += 1;
                if matches!(self.states.get(dependency), Some(State::Deferred(_)))
                    && let Some(State::Deferred(effect)) = self.states.remove(dependency)
                {
                    stack.push((dependency, effect));
                }
            }
            self.states.insert(node, State::Queued(queued));
            self.queue.insert((self.position[node.index()], node));
        }
    }

    /// Launches queued nodes in topological order while the core budget has room; a node whose device or
    /// host is busy, whose lazy effects have not finished, or whose key another engine builds is passed over,
    /// not waited for. The scan stops as soon as the budget is full. `spawn` starts a launched node's thread.
    pub fn launch(&mut self, spawn: &mut dyn FnMut(Launch<'a>)) -> io::Result<()> {
        let mut started = Vec::new();
        let mut cursor = self.queue.first().copied();
        while let Some(at) = cursor {
            if self.stopping() || self.slots.full() {
                break;
            }
            let Some(&(position, index)) = self.queue.range(at..).next() else {
                break;
            };
            cursor = self.queue.range((position, index)..).nth(1).copied();
            let spec = self.graph.spec(index);
            let Some(State::Queued(queued)) = self.states.get(index) else {
                continue;
            };
            if queued.effects_first > 0 || !self.slots.fit(spec) {
                continue;
            }
            if queued
                .blocked
                .as_ref()
                .is_some_and(|b| b.retry_at > Instant::now())
            {
                continue;
            }
            let key_lock = if queued.cacheable {
                match self.lock_key(index)? {
                    KeyLockStep::Locked(lock) => Some(lock),
                    KeyLockStep::Unlocked => None,
                    KeyLockStep::HeldElsewhere => continue,
                }
            } else {
                None
            };
            self.queue.remove(&(position, index));
            let Some(State::Queued(queued)) = self.states.remove(index) else {
                continue;
            };
            // Look again under the lock: the engine we waited for, or one that finished between our first
            // look and our lock, has published the key. Its result is ours.
            if queued.cacheable
                && !queued.forced
                && let Some(entry) = self.engine.cache.lookup(&queued.key)
            {
                drop(key_lock);
                self.use_cached(index, entry)?;
                continue;
            }
            spawn(self.started_node(index, *queued, key_lock)?);
            started.push(index);
        }
        // Once every ready node is on its way, while they run.
        for index in started {
            let spec = self.graph.spec(index);
            if !spec.outputs.is_empty() {
                self.run_dir.prepare_views(&spec.id);
            }
        }
        Ok(())
    }

    /// Tries to take a queued node's key lock; when another engine holds it, notes when to try again and
    /// announces whom the node waits for.
    fn lock_key(&mut self, index: NodeIndex) -> io::Result<KeyLockStep> {
        let spec = self.graph.spec(index);
        let Some(State::Queued(queued)) = self.states.get_mut(index) else {
            return Ok(KeyLockStep::Unlocked);
        };
        match keylock::try_acquire(&self.locks, &queued.key.to_hex(), &spec.id) {
            Ok(Attempt::Acquired(lock)) => {
                queued.blocked = None;
                Ok(KeyLockStep::Locked(lock))
            }
            Ok(Attempt::Held(holder)) => {
                let now = Instant::now();
                let wait = queued.blocked.get_or_insert(Blocked {
                    since: now,
                    holder: None,
                    announced: false,
                    retry_at: now,
                    poll: FIRST_LOCK_POLL,
                });
                wait.retry_at = now + wait.poll;
                wait.poll = (wait.poll * 2).min(MAX_LOCK_POLL);
                // Named once its file says who holds it, and again when another engine takes over (the
                // holder died, or failed); unnamed only if the file stays unreadable.
                let announce = match &holder {
                    Some(_) => wait.holder != holder,
                    None => {
                        !wait.announced && now.duration_since(wait.since) >= UNNAMED_HOLDER_GRACE
                    }
                };
                if announce {
                    wait.announced = true;
                    wait.holder.clone_from(&holder);
                    let event = waiting_event(&spec.id, &queued.key, holder);
                    self.emit(event)?;
                }
                Ok(KeyLockStep::HeldElsewhere)
            }
            Err(error) => {
                if let Some(State::Queued(queued)) = self.states.get_mut(index) {
                    queued.blocked = None;
                }
                if !self.lock_error_reported {
                    self.lock_error_reported = true;
                    self.emit(EventKind::Warning {
                        message: format!(
                            "cannot lock keys in {} ({error}): building without per-key locks, so another \
                             engine may build the same key at the same time (the cache stays consistent)",
                            self.locks.display()
                        ),
                    })?;
                }
                Ok(KeyLockStep::Unlocked)
            }
        }
    }

    /// Marks a node running and returns what its thread needs.
    fn started_node(
        &mut self,
        index: NodeIndex,
        queued: Queued,
        key_lock: Option<KeyLock>,
    ) -> io::Result<Launch<'a>> {
        let graph = self.graph;
        let spec = graph.spec(index);
        self.states.insert(index, State::Running);
        self.slots.take(spec);
        let record = self.run_dir.record_mut(&spec.id, &spec.kind);
        record.status = NodeStatus::Running;
        record.key = Some(queued.key);
        record.started = Some(now_rfc3339());
        record.log = Some(format!("logs/{}.log", crate::run::node_dir_name(&spec.id)));
        self.emit(EventKind::NodeStarted {
            node: spec.id.clone(),
            key: queued.key,
            attempt: 0,
        })?;
        let mut ids = Vec::with_capacity(graph.dependencies(index).count());
        for dependency in graph.dependencies(index) {
            self.run_dir
                .materialize(self.engine.cache, graph, dependency)?;
            ids.push(graph.spec(dependency).id.as_str());
        }
        let inputs = Inputs::views(self.run_dir.views_dir(), ids);
        Ok(Launch {
            index,
            spec,
            fingerprint: queued.keyed.fingerprint(graph, spec, self.options),
            key: queued.key,
            inputs,
            log: self.run_dir.log_path(&spec.id),
            key_lock,
        })
    }

    /// What to do after a launch pass.
    pub fn next(&self) -> Next {
        let stopping = self.stopping();
        // With nothing running, all that can be left is nodes waiting for other engines (or nothing); what was
        // built is committed before the run ends, even a stopping one.
        if self.slots.running == 0
            && self.committing == 0
            && (stopping || (self.ready.is_empty() && self.queue.is_empty()))
        {
            return Next::End;
        }
        if !self.ready.is_empty() && !stopping {
            return Next::Key;
        }
        if self.slots.running > 0 || self.committing > 0 {
            return Next::Wait(TICK);
        }
        let now = Instant::now();
        let soonest = self
            .queue
            .iter()
            .filter_map(|(_, index)| match self.states.get(*index) {
                Some(State::Queued(queued)) => queued
                    .blocked
                    .as_ref()
                    .map(|blocked| blocked.retry_at.saturating_duration_since(now)),
                _ => None,
            })
            .min()
            .unwrap_or(TICK);
        Next::Wait(soonest.min(TICK))
    }

    /// A launched node's thread is done: what it built is linked into the run directory, its dependents may
    /// start on it, and it goes to the committer (`commit`); or it failed.
    pub fn finished(&mut self, finished: Finished) -> io::Result<()> {
        let index = finished.index;
        let spec = self.graph.spec(index);
        self.slots.release(spec);
        let staged = match finished.result {
            Ok(staged) => staged,
            Err(error) => {
                self.fail(index, &error)?;
                return self.checkpoint(true);
            }
        };
        self.run_dir.publish_staged(&spec.id, &spec.kind, &staged)?;
        self.states.insert(index, State::Committing);
        if matches!(self.known.get(index), Some(Known::Effect(_))) {
            // Its dependents were keyed when it was; now the ones queued behind it may start.
            self.effect_finished(index);
        } else {
            self.known
                .insert(index, Known::Output(staged.entry.output_hash));
            self.contribution_known(index);
        }
        self.committing += 1;
        self.hand_to_committer(Work::Commit(Box::new(ToCommit {
            index,
            staged,
            kind: spec.kind.clone(),
            seconds: finished.seconds,
            key_lock: finished.key_lock,
            staging: finished.staging,
        })))
    }

    /// Where staged results and manifest checkpoints go from now on.
    pub fn set_committer(&mut self, queue: CommitQueue) {
        self.committer = Some(queue);
    }

    fn hand_to_committer(&mut self, work: Work) -> io::Result<()> {
        let sent = self.committer.as_ref().map(|queue| queue.send(work));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(io::Error::other("the run's committer has stopped")),
        }
    }

    /// Hands the manifest to the committer when it is due for a rewrite (see [`RunDir::checkpoint`]).
    fn checkpoint(&mut self, ran: bool) -> io::Result<()> {
        match self.run_dir.checkpoint(ran, self.graph)? {
            Some(checkpoint) => self.hand_to_committer(Work::Manifest(checkpoint)),
            None => Ok(()),
        }
    }

    /// Closes the committer's queue: once it has written what it holds, it ends.
    pub fn close_committer(&mut self) {
        self.committer = None;
    }

    /// The committer published a group: each node is finished now, or failed if its entry could not be
    /// written (its dependents that already started keep their own results, which key on its outputs).
    pub fn committed(&mut self, group: Vec<Committed>) -> io::Result<()> {
        for committed in group {
            self.committing -= 1;
            let index = committed.index;
            let spec = self.graph.spec(index);
            match committed.result {
                Ok(entry) => {
                    let record = self.run_dir.record_mut(&spec.id, &spec.kind);
                    record.status = NodeStatus::Built;
                    record.seconds = Some(committed.seconds);
                    self.emit(EventKind::NodeFinished {
                        node: spec.id.clone(),
                        key: entry.key,
                        seconds: committed.seconds,
                        output_hash: entry.output_hash,
                    })?;
                    self.summary.built += 1;
                    self.states.insert(index, State::Done);
                }
                Err(error) => {
                    let error =
                        NodeError::permanent(format!("storing outputs of `{}`: {error}", spec.id));
                    self.fail(index, &error)?;
                }
            }
        }
        self.checkpoint(true)
    }

    /// Completes a node with an entry found in the cache: linked into the run directory, never executed.
    fn use_cached(&mut self, index: NodeIndex, entry: Hit) -> io::Result<()> {
        let spec = self.graph.spec(index);
        let (key, output_hash, seconds) = (entry.key, entry.output_hash, entry.seconds);
        let record = self.run_dir.publish_hit(self.graph, index, entry);
        record.status = NodeStatus::Cached;
        record.seconds = Some(seconds);
        self.emit(EventKind::NodeCached {
            node: spec.id.clone(),
            key,
        })?;
        self.states.insert(index, State::Done);
        self.known.insert(index, Known::Output(output_hash));
        self.contribution_known(index);
        self.summary.cached += 1;
        self.checkpoint(false)
    }

    /// What `index` contributes to its dependents' keys is known: those that waited only for it are ready.
    fn contribution_known(&mut self, index: NodeIndex) {
        for dependent in self.graph.dependents(index) {
            if let Some(State::Waiting(unknown)) = self.states.get_mut(dependent) {
                *unknown -= 1;
                if *unknown == 0 {
                    self.states.insert(dependent, State::Ready);
                    self.ready
                        .insert((self.position[dependent.index()], dependent));
                }
            }
        }
    }

    /// A lazy effect finished: the nodes queued behind it wait for one effect fewer.
    fn effect_finished(&mut self, index: NodeIndex) {
        for dependent in self.graph.dependents(index) {
            if let Some(State::Queued(queued)) = self.states.get_mut(dependent) {
                queued.effects_first = queued.effects_first.saturating_sub(1);
            }
        }
    }

    /// The node failed: everything downstream of it can no longer run.
    fn fail(&mut self, index: NodeIndex, error: &NodeError) -> io::Result<()> {
        let spec = self.graph.spec(index);
        self.states.insert(index, State::Failed);
        self.run_dir.discard_empty_views(&spec.id);
        let record = self.run_dir.record_mut(&spec.id, &spec.kind);
        record.status = NodeStatus::Failed;
        record.error = Some(error.message.clone());
        self.summary
            .failed
            .push((spec.id.clone(), error.message.clone()));
        self.emit(EventKind::NodeFailed {
            node: spec.id.clone(),
            error: error.message.clone(),
        })?;
        let reason = format!("dependency `{}` failed", spec.id);
        let mut stack: Vec<NodeIndex> = self.graph.dependents(index).collect();
        while let Some(dependent) = stack.pop() {
            if !matches!(
                self.states.get(dependent),
                Some(State::Waiting(_) | State::Ready | State::Queued(_))
            ) {
                continue;
            }
            self.states.insert(dependent, State::Skipped);
            self.ready
                .remove(&(self.position[dependent.index()], dependent));
            self.queue
                .remove(&(self.position[dependent.index()], dependent));
            self.skip(dependent, &reason)?;
            stack.extend(self.graph.dependents(dependent));
        }
        Ok(())
    }

    /// Records and announces that `index` did not run.
    fn skip(&mut self, index: NodeIndex, reason: &str) -> io::Result<()> {
        let spec = self.graph.spec(index);
        let record = self.run_dir.record_mut(&spec.id, &spec.kind);
        record.status = NodeStatus::Skipped;
        record.reason = Some(reason.to_owned());
        self.emit(EventKind::NodeSkipped {
            node: spec.id.clone(),
            reason: reason.to_owned(),
        })
    }

    /// Ends the run: lazy effects nobody needed are reported not needed, whatever never ran is skipped, and
    /// the manifest is written for good.
    pub fn finish(mut self) -> io::Result<RunSummary> {
        let reason = if self.cancel.is_cancelled() {
            "run interrupted"
        } else {
            "run stopped after a failure"
        };
        // A lazy effect that no node pulled in was not needed: each of its dependents was a cache hit, an
        // effect not needed either, or skipped after a failure under `--keep-going`. When the run stopped
        // before some dependent got that far, the effect is skipped with it, for the same reason. Last
        // dependents first.
        let stopping = self.stopping();
        let mut deferred: Vec<NodeIndex> = self
            .states
            .iter()
            .filter(|(_, s)| matches!(s, State::Deferred(_)))
            .map(|(i, _)| i)
            .collect();
        deferred.sort_by_key(|i| std::cmp::Reverse(self.position[i.index()]));
        for &index in &deferred {
            let stopped = stopping
                && self.graph.dependents(index).any(|d| {
                    matches!(
                        self.states.get(d),
                        Some(State::Waiting(_) | State::Ready | State::Queued(_) | State::Skipped)
                    )
                });
            self.states.insert(
                index,
                if stopped {
                    State::Ready
                } else {
                    State::NotNeeded
                },
            );
        }
        deferred.reverse();
        for index in deferred {
            if matches!(self.states.get(index), Some(State::NotNeeded)) {
                self.skip(index, NOT_NEEDED)?;
            }
        }
        let mut leftover: Vec<NodeIndex> = self
            .states
            .iter()
            .filter(|(_, s)| matches!(s, State::Waiting(_) | State::Ready | State::Queued(_)))
            .map(|(i, _)| i)
            .collect();
        leftover.sort_by_key(|i| self.position[i.index()]);
        for index in leftover {
            self.states.insert(index, State::Skipped);
            self.skip(index, reason)?;
        }
        self.summary.skipped = self
            .states
            .values()
            .filter(|s| matches!(s, State::Skipped | State::NotNeeded))
            .count();
        self.summary.status = if self.cancel.is_cancelled() {
            RunStatus::Interrupted
        } else if self.summary.failed.is_empty() {
            RunStatus::Succeeded
        } else {
            RunStatus::Failed
        };
        let status = match self.summary.status {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Running => "running",
        };
        // Before the last event: a run that repeats another journals that instead of each hit.
        self.run_dir.settle_views(self.engine.cache, self.graph)?;
        self.emit(EventKind::RunFinished {
            status: status.to_owned(),
            seconds: self.started.elapsed().as_secs_f64(),
        })?;
        self.engine.stat.save()?;
        self.run_dir
            .finish(self.engine.cache, self.summary.status, self.graph)?;
        Ok(self.summary.clone())
    }

    /// Tells the observer and appends to `events.jsonl`.
    fn emit(&mut self, kind: EventKind) -> io::Result<()> {
        self.observer.event(&kind);
        self.run_dir.event(kind)
    }
}

/// The outcome of trying a queued node's key lock.
enum KeyLockStep {
    Locked(KeyLock),
    /// Locking failed (reported once): the node builds without the lock.
    Unlocked,
    /// Another engine builds the key: try again later.
    HeldElsewhere,
}

/// The event that says a node waits for another engine, with the holder's start in this machine's time.
fn waiting_event(node: &str, key: &Digest, holder: Option<Holder>) -> EventKind {
    let since = |text: &str| {
        chrono::DateTime::parse_from_rfc3339(text).map_or_else(
            |_| text.to_owned(),
            |t| {
                t.with_timezone(&chrono::Local)
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
            },
        )
    };
    EventKind::NodeWaiting {
        node: node.to_owned(),
        key: *key,
        holder_pid: holder.as_ref().map(|h| h.pid),
        holder_since: holder.as_ref().map(|h| since(&h.since)),
        holder_host: holder.map(|h| h.host),
    }
}

fn node_cores(spec: &NodeSpec, budget: usize) -> usize {
    let declared = spec
        .resources
        .iter()
        .filter_map(|r| match r {
            Resource::Cores(n) => Some(*n as usize),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    // A node asking for more than the budget runs alone rather than never.
    declared.min(budget)
}

/// The devices and hosts a node holds alone while it runs.
pub(crate) fn exclusive(spec: &NodeSpec) -> impl Iterator<Item = Resource> + '_ {
    spec.resources
        .iter()
        .filter(|r| !matches!(r, Resource::Cores(_)))
        .cloned()
}
