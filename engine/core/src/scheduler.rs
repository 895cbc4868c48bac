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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use petgraph::graph::NodeIndex;

use fracflow_record::{EventKind, NodeStatus, RunStatus};

use crate::cache::{Cache, CacheEntry};
use crate::exec::{Cancel, Job, KindInfo, Kinds, NodeError, Outcome, RunIdentity};
use crate::fingerprint::{FINGERPRINT_VERSION, Fingerprint};
use crate::graph::Graph;
use crate::keylock::{self, Attempt, Holder};
use crate::run::{RunDir, now_rfc3339};
use crate::spec::{NodeSpec, Resource};
use crate::statcache::StatCache;

/// First wait before retrying a transient failure; doubled per attempt, capped at `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How soon a node whose key another engine builds tries the lock again; doubled per try, capped at
/// `MAX_LOCK_POLL`. Each try is an open and a `flock` (a round trip on NFS), so the cap keeps hundreds of
/// waiting nodes cheap while a waiter still notices a release within a couple of seconds.
const FIRST_LOCK_POLL: Duration = Duration::from_millis(50);
const MAX_LOCK_POLL: Duration = Duration::from_secs(2);
/// A holder writes its name into the lock file just after locking it; a waiter that read the file in between
/// waits this long for the name before announcing the wait without it.
const UNNAMED_HOLDER_GRACE: Duration = Duration::from_secs(1);
/// How long the scheduler sleeps for a finished node before looking at the rest again.
const TICK: Duration = Duration::from_millis(100);

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

fn matches_pattern(pattern: &str, id: &str) -> bool {
    pattern == id || glob::Pattern::new(pattern).is_ok_and(|p| p.matches(id))
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

    /// The node's fingerprint, given its dependencies' output hashes.
    pub fn fingerprint(
        &self,
        spec: &NodeSpec,
        info: &KindInfo,
        upstream: BTreeMap<String, String>,
        testbed: &BTreeMap<String, serde_json::Value>,
    ) -> Result<Fingerprint, NodeError> {
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
        Ok(Fingerprint {
            version: FINGERPRINT_VERSION,
            kind: spec.kind.clone(),
            kind_version: info.version,
            config: spec.config.clone(),
            point: spec.point.clone(),
            outputs: spec.outputs.clone(),
            inputs,
            upstream,
            tools: info.tools.clone(),
            // Only nodes that touch the testbed (a device or a host) depend on it: switching testbeds must
            // not rebuild bitstreams.
            testbed: if spec
                .resources
                .iter()
                .any(|r| matches!(r, Resource::Device(_) | Resource::Host(_)))
            {
                testbed.clone()
            } else {
                BTreeMap::new()
            },
            placement: exclusive(spec).map(|r| r.to_string()).collect(),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Waiting,
    Ready,
    Running,
    Done(String),
    Failed,
    Skipped,
    /// A lazy effect whose key is known and that no node has needed yet.
    Deferred,
    /// A lazy effect that no node needed: it did not run.
    NotNeeded,
}

/// Why a lazy effect did not run.
const NOT_NEEDED: &str = "nothing that needs it runs";

struct Finished {
    index: NodeIndex,
    result: Result<CacheEntry, NodeError>,
    seconds: f64,
}

/// A node whose key is missing from the cache, waiting for cores, its device, or another engine.
struct Pending {
    fingerprint: Fingerprint,
    /// Cacheable nodes take the key's lock before they run; effects are never taken from the cache, so
    /// another engine's result would not replace them.
    lock: bool,
    /// `--rerun`: runs even when another engine has just published the key.
    forced: bool,
}

/// A pending node whose key lock another engine holds.
struct Blocked {
    since: Instant,
    /// The holder last announced.
    holder: Option<Holder>,
    announced: bool,
    retry_at: Instant,
    poll: Duration,
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
    let started = Instant::now();
    let selected = graph.closure(targets);
    let position: HashMap<NodeIndex, usize> = graph
        .topological()
        .iter()
        .enumerate()
        .map(|(p, &i)| (i, p))
        .collect();
    let mut state: HashMap<NodeIndex, State> =
        selected.iter().map(|&i| (i, State::Waiting)).collect();
    let mut waiting_on: HashMap<NodeIndex, usize> = selected
        .iter()
        .map(|&i| (i, graph.dependencies(i).count()))
        .collect();
    let mut ready: BTreeSet<(usize, NodeIndex)> = BTreeSet::new();
    // Nodes whose key is known and missing from the cache, waiting for cores, their device or another engine.
    let mut runnable: BTreeMap<(usize, NodeIndex), Pending> = BTreeMap::new();
    let mut blocked: HashMap<NodeIndex, Blocked> = HashMap::new();
    let mut effects = Effects::default();
    for &index in &selected {
        if waiting_on[&index] == 0 {
            ready.insert((position[&index], index));
        }
        let spec = graph.spec(index);
        run_dir.record_mut(&spec.id, &spec.kind);
    }
    let mut emit = |run_dir: &mut RunDir,
                    observer: &mut dyn Observer,
                    kind: EventKind|
     -> std::io::Result<()> {
        observer.event(&kind);
        run_dir.event(kind).map(|_| ())
    };
    emit(
        run_dir,
        observer,
        EventKind::RunStarted {
            pipeline: run_dir.manifest().pipeline.clone(),
            run_id: run_dir.run_id().to_owned(),
            nodes: selected.len(),
            testbed: run_dir.manifest().testbed.clone(),
        },
    )?;
    let locks = engine.cache.locks_dir();
    // Held until the run returns: `gc` deletes nothing while a run may still link or publish blobs.
    let _in_use = match engine.cache.in_use() {
        Ok(guard) => Some(guard),
        Err(error) => {
            emit(
                run_dir,
                observer,
                EventKind::Warning {
                    message: format!(
                        "cannot mark the cache in use ({error}): a `cache gc` running meanwhile could delete \
                         what this run uses"
                    ),
                },
            )?;
            None
        }
    };
    if let Some(message) = keylock::locality_caveat(engine.cache.root()) {
        emit(run_dir, observer, EventKind::Warning { message })?;
    }
    // A lock error is reported once; the nodes it concerns are built without the lock.
    let mut lock_error_reported = false;

    let identity = RunIdentity {
        pipeline: run_dir.manifest().pipeline.clone(),
        run_id: run_dir.run_id().to_owned(),
        testbed: run_dir.manifest().testbed.clone(),
    };
    let budget = options.jobs.max(1);
    let mut cores_in_use = 0usize;
    let mut held: HashSet<Resource> = HashSet::new();
    let mut running = 0usize;
    let mut summary = RunSummary {
        status: RunStatus::Succeeded,
        built: 0,
        cached: 0,
        failed: Vec::new(),
        skipped: 0,
    };
    let (sender, receiver) = mpsc::channel::<Finished>();

    std::thread::scope(|scope| -> std::io::Result<()> {
        loop {
            // Newly ready nodes get their key once: a hit completes now (it needs no core), a miss waits to run.
            while !must_stop(cancel, options, &summary) {
                let Some((_, index)) = ready.pop_first() else {
                    break;
                };
                let spec = graph.spec(index);
                let prepared = engine.kind_info(spec).and_then(|info| {
                    let lazy = engine.is_lazy(spec, &info);
                    // A lazy effect's dependents key on its key; its own key leaves out what cacheable
                    // dependencies made (see the module's comment).
                    let upstream: BTreeMap<String, String> = graph
                        .dependencies(index)
                        .filter_map(|d| {
                            let hash = match (effects.keys.get(&d), &state[&d]) {
                                (Some(key), _) => key,
                                (None, State::Done(hash)) if !lazy => hash,
                                _ => return None,
                            };
                            Some((graph.spec(d).id.clone(), hash.clone()))
                        })
                        .collect();
                    engine
                        .fingerprint(spec, &info, upstream, &options.testbed)
                        .map(|f| (info, lazy, f))
                });
                let (info, lazy, fingerprint) = match prepared {
                    Ok(pair) => pair,
                    Err(error) => {
                        fail(
                            graph,
                            index,
                            &error,
                            &mut state,
                            run_dir,
                            &mut summary,
                            observer,
                            &mut emit,
                        )?;
                        continue;
                    }
                };
                let key = fingerprint.key();
                let forced = options.rerun.iter().any(|p| matches_pattern(p, &spec.id));
                if lazy {
                    run_dir.record_mut(&spec.id, &spec.kind).key = Some(key.clone());
                    effects.keys.insert(index, key.clone());
                    let pending = Pending {
                        fingerprint,
                        lock: false,
                        forced,
                    };
                    // Its dependents get their keys now; whether it runs depends on theirs. One that nothing in
                    // this run depends on was selected for its own sake (`fracflow run setup`), and runs.
                    let wanted = !graph.dependents(index).any(|d| selected.contains(&d));
                    let now = if forced || wanted {
                        State::Ready
                    } else {
                        State::Deferred
                    };
                    complete(
                        graph,
                        index,
                        now.clone(),
                        &mut state,
                        &mut waiting_on,
                        &mut ready,
                        &position,
                    );
                    if now == State::Deferred {
                        effects.deferred.insert(index, pending);
                    } else {
                        effects.enqueue(
                            graph,
                            index,
                            pending,
                            &position,
                            &mut state,
                            &mut runnable,
                        );
                    }
                    continue;
                }
                if info.cacheable
                    && !forced
                    && let Some(entry) = engine.cache.get(&key)
                {
                    let mut progress = Progress {
                        state: &mut state,
                        waiting_on: &mut waiting_on,
                        ready: &mut ready,
                        summary: &mut summary,
                    };
                    use_cached(
                        engine.cache,
                        graph,
                        index,
                        entry,
                        &position,
                        &mut progress,
                        run_dir,
                        observer,
                        &mut emit,
                    )?;
                    continue;
                }
                effects.enqueue(
                    graph,
                    index,
                    Pending {
                        fingerprint,
                        lock: info.cacheable,
                        forced,
                    },
                    &position,
                    &mut state,
                    &mut runnable,
                );
            }
            // Launch runnable nodes in declaration order while the core budget has room; a node whose device
            // or host is busy, or whose key another engine builds, is passed over, not waited for. The scan
            // stops as soon as the budget is full.
            let mut cursor = runnable.keys().next().copied();
            while let Some(at) = cursor {
                if must_stop(cancel, options, &summary) || (running > 0 && cores_in_use >= budget) {
                    break;
                }
                let Some((&(pos, index), _)) = runnable.range(at..).next() else {
                    break;
                };
                cursor = runnable.range((pos, index)..).nth(1).map(|(k, _)| *k);
                // A node waiting in line for an effect that failed was skipped with it.
                if state.get(&index) == Some(&State::Skipped) {
                    runnable.remove(&(pos, index));
                    effects.awaiting.remove(&index);
                    blocked.remove(&index);
                    continue;
                }
                // Its effects run first.
                if effects.awaiting.contains_key(&index) {
                    continue;
                }
                let spec = graph.spec(index);
                let cores = node_cores(spec, budget);
                if running > 0 && (cores_in_use + cores > budget || conflicts(spec, &held)) {
                    continue;
                }
                if blocked
                    .get(&index)
                    .is_some_and(|b| b.retry_at > Instant::now())
                {
                    continue;
                }
                let Some(pending) = runnable.get(&(pos, index)) else {
                    continue;
                };
                let key = pending.fingerprint.key();
                let key_lock = if pending.lock {
                    match keylock::try_acquire(&locks, &key, &spec.id) {
                        Ok(Attempt::Acquired(lock)) => Some(lock),
                        Ok(Attempt::Held(holder)) => {
                            let now = Instant::now();
                            let wait = blocked.entry(index).or_insert_with(|| Blocked {
                                since: now,
                                holder: None,
                                announced: false,
                                retry_at: now,
                                poll: FIRST_LOCK_POLL,
                            });
                            wait.retry_at = now + wait.poll;
                            wait.poll = (wait.poll * 2).min(MAX_LOCK_POLL);
                            // Named once its file says who holds it, and again when another engine takes
                            // over (the holder died, or failed); unnamed only if the file stays unreadable.
                            let announce = match &holder {
                                Some(_) => wait.holder != holder,
                                None => {
                                    !wait.announced
                                        && now.duration_since(wait.since) >= UNNAMED_HOLDER_GRACE
                                }
                            };
                            if announce {
                                wait.announced = true;
                                wait.holder.clone_from(&holder);
                                emit(run_dir, observer, waiting_event(&spec.id, &key, holder))?;
                            }
                            continue;
                        }
                        Err(error) => {
                            if !lock_error_reported {
                                lock_error_reported = true;
                                emit(
                                    run_dir,
                                    observer,
                                    EventKind::Warning {
                                        message: format!(
                                            "cannot lock keys in {} ({error}): building without per-key \
                                             locks, so another engine may build the same key at the same \
                                             time (the cache stays consistent)",
                                            locks.display()
                                        ),
                                    },
                                )?;
                            }
                            None
                        }
                    }
                } else {
                    None
                };
                blocked.remove(&index);
                let Some(pending) = runnable.remove(&(pos, index)) else {
                    continue;
                };
                // Look again under the lock: the engine we waited for, or one that finished between our first
                // look and our lock, has published the key. Its result is ours.
                if pending.lock
                    && !pending.forced
                    && let Some(entry) = engine.cache.get(&key)
                {
                    drop(key_lock);
                    let mut progress = Progress {
                        state: &mut state,
                        waiting_on: &mut waiting_on,
                        ready: &mut ready,
                        summary: &mut summary,
                    };
                    use_cached(
                        engine.cache,
                        graph,
                        index,
                        entry,
                        &position,
                        &mut progress,
                        run_dir,
                        observer,
                        &mut emit,
                    )?;
                    continue;
                }
                let fingerprint = pending.fingerprint;
                // Run it.
                state.insert(index, State::Running);
                running += 1;
                cores_in_use += cores;
                held.extend(exclusive(spec));
                let record = run_dir.record_mut(&spec.id, &spec.kind);
                record.status = NodeStatus::Running;
                record.key = Some(key.clone());
                record.started = Some(now_rfc3339());
                record.log = Some(format!("logs/{}.log", crate::run::node_dir_name(&spec.id)));
                emit(
                    run_dir,
                    observer,
                    EventKind::NodeStarted {
                        node: spec.id.clone(),
                        key,
                        attempt: 0,
                    },
                )?;
                let inputs: BTreeMap<String, PathBuf> = graph
                    .dependencies(index)
                    .map(|d| {
                        let id = graph.spec(d).id.clone();
                        let dir = run_dir.outputs_dir(&id);
                        (id, dir)
                    })
                    .collect();
                let log = run_dir.log_path(&spec.id);
                let sender = sender.clone();
                let cancel = cancel.clone();
                let identity = &identity;
                scope.spawn(move || {
                    let started = Instant::now();
                    let result = execute_with_retries(
                        engine,
                        spec,
                        &fingerprint,
                        &inputs,
                        &log,
                        &cancel,
                        identity,
                    );
                    // The entry is published (or the node failed): a waiting engine now finds the entry, or
                    // takes the lock and builds the key itself.
                    drop(key_lock);
                    let _ = sender.send(Finished {
                        index,
                        result,
                        seconds: started.elapsed().as_secs_f64(),
                    });
                });
            }
            let stopping = must_stop(cancel, options, &summary);
            // With nothing running, all that can be left is nodes waiting for other engines (or nothing).
            if running == 0 && (stopping || (ready.is_empty() && runnable.is_empty())) {
                break;
            }
            // A node found in the cache after a wait made dependents ready: key them before sleeping.
            if !ready.is_empty() && !stopping {
                continue;
            }
            let nap = if running > 0 {
                TICK
            } else {
                let now = Instant::now();
                blocked
                    .values()
                    .map(|b| b.retry_at.saturating_duration_since(now))
                    .min()
                    .unwrap_or(TICK)
                    .min(TICK)
            };
            let finished = match receiver.recv_timeout(nap) {
                Ok(finished) => finished,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let spec = graph.spec(finished.index);
            running -= 1;
            cores_in_use -= node_cores(spec, budget);
            for resource in exclusive(spec) {
                held.remove(&resource);
            }
            match finished.result {
                Ok(entry) => {
                    run_dir.publish(engine.cache, &entry)?;
                    let record = run_dir.record_mut(&spec.id, &spec.kind);
                    record.status = NodeStatus::Built;
                    record.seconds = Some(finished.seconds);
                    emit(
                        run_dir,
                        observer,
                        EventKind::NodeFinished {
                            node: spec.id.clone(),
                            key: entry.key.clone(),
                            seconds: finished.seconds,
                            output_hash: entry.output_hash.clone(),
                        },
                    )?;
                    summary.built += 1;
                    if let Some(key) = effects.keys.get(&finished.index) {
                        // Its dependents were keyed when it was; now the ones in line for it may start.
                        state.insert(finished.index, State::Done(key.clone()));
                        effects.release(graph, finished.index);
                    } else {
                        complete(
                            graph,
                            finished.index,
                            State::Done(entry.output_hash),
                            &mut state,
                            &mut waiting_on,
                            &mut ready,
                            &position,
                        );
                    }
                }
                Err(error) => {
                    fail(
                        graph,
                        finished.index,
                        &error,
                        &mut state,
                        run_dir,
                        &mut summary,
                        observer,
                        &mut emit,
                    )?;
                }
            }
            run_dir.checkpoint(true)?;
        }
        Ok(())
    })?;

    // Whatever never ran was skipped: by a failure, or by an interruption.
    let reason = if cancel.is_cancelled() {
        "run interrupted"
    } else {
        "run stopped after a failure"
    };
    // A lazy effect nobody needed was not needed when each of its dependents was a cache hit or an effect not
    // needed either; one whose dependents never got that far was skipped with them. Last dependents first.
    let mut unneeded: Vec<NodeIndex> = state
        .iter()
        .filter(|(_, s)| **s == State::Deferred)
        .map(|(&i, _)| i)
        .collect();
    unneeded.sort_by_key(|i| std::cmp::Reverse(position[i]));
    for &index in &unneeded {
        let stopped = graph.dependents(index).any(|d| {
            matches!(
                state.get(&d),
                Some(State::Waiting | State::Ready | State::Skipped)
            )
        });
        state.insert(
            index,
            if stopped {
                State::Ready
            } else {
                State::NotNeeded
            },
        );
    }
    unneeded.reverse();
    for index in unneeded {
        if state[&index] == State::NotNeeded {
            let spec = graph.spec(index);
            let record = run_dir.record_mut(&spec.id, &spec.kind);
            record.status = NodeStatus::Skipped;
            record.reason = Some(NOT_NEEDED.to_owned());
            emit(
                run_dir,
                observer,
                EventKind::NodeSkipped {
                    node: spec.id.clone(),
                    reason: NOT_NEEDED.to_owned(),
                },
            )?;
        }
    }
    let mut leftover: Vec<NodeIndex> = state
        .iter()
        .filter(|(_, s)| matches!(s, State::Waiting | State::Ready))
        .map(|(&i, _)| i)
        .collect();
    leftover.sort_by_key(|i| position[i]);
    for index in leftover {
        let spec = graph.spec(index);
        let record = run_dir.record_mut(&spec.id, &spec.kind);
        record.status = NodeStatus::Skipped;
        record.reason = Some(reason.to_owned());
        emit(
            run_dir,
            observer,
            EventKind::NodeSkipped {
                node: spec.id.clone(),
                reason: reason.to_owned(),
            },
        )?;
    }
    summary.skipped = state
        .values()
        .filter(|s| {
            matches!(
                s,
                State::Skipped | State::Waiting | State::Ready | State::NotNeeded
            )
        })
        .count();
    summary.status = if cancel.is_cancelled() {
        RunStatus::Interrupted
    } else if summary.failed.is_empty() {
        RunStatus::Succeeded
    } else {
        RunStatus::Failed
    };
    let status_text = match summary.status {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Interrupted => "interrupted",
        RunStatus::Running => "running",
    };
    emit(
        run_dir,
        observer,
        EventKind::RunFinished {
            status: status_text.to_owned(),
            seconds: started.elapsed().as_secs_f64(),
        },
    )?;
    engine.stat.save()?;
    run_dir.finish(summary.status)?;
    Ok(summary)
}

/// The lazy effects of a run: their keys, the ones no node has needed yet, and the nodes in line for them.
#[derive(Default)]
struct Effects {
    /// Every lazy effect whose key is known → that key, which its dependents key on.
    keys: HashMap<NodeIndex, String>,
    /// Lazy effects that no node has needed yet.
    deferred: HashMap<NodeIndex, Pending>,
    /// Runnable nodes → how many of their lazy effects have yet to finish.
    awaiting: HashMap<NodeIndex, usize>,
}

impl Effects {
    /// Makes `index` runnable, and with it every lazy effect it depends on that has not run yet (and theirs:
    /// program → reboot → driver), each waiting for those before it.
    fn enqueue(
        &mut self,
        graph: &Graph,
        index: NodeIndex,
        pending: Pending,
        position: &HashMap<NodeIndex, usize>,
        state: &mut HashMap<NodeIndex, State>,
        runnable: &mut BTreeMap<(usize, NodeIndex), Pending>,
    ) {
        let mut stack = vec![(index, pending)];
        while let Some((node, pending)) = stack.pop() {
            let mut unfinished = 0;
            for dependency in graph.dependencies(node) {
                // Done: it ran earlier in this run. Otherwise it is deferred (needed now), or already in line.
                if self.keys.contains_key(&dependency)
                    && !matches!(state.get(&dependency), Some(State::Done(_)))
                {
                    unfinished += 1;
                    if let Some(effect) = self.deferred.remove(&dependency) {
                        state.insert(dependency, State::Ready);
                        stack.push((dependency, effect));
                    }
                }
            }
            if unfinished > 0 {
                self.awaiting.insert(node, unfinished);
            }
            runnable.insert((position[&node], node), pending);
        }
    }

    /// The effect `index` finished: its dependents in line for it wait for one effect fewer.
    fn release(&mut self, graph: &Graph, index: NodeIndex) {
        for dependent in graph.dependents(index) {
            if let Some(count) = self.awaiting.get_mut(&dependent) {
                *count -= 1;
                if *count == 0 {
                    self.awaiting.remove(&dependent);
                }
            }
        }
    }
}

/// The scheduler's bookkeeping that a completed node updates.
struct Progress<'a> {
    state: &'a mut HashMap<NodeIndex, State>,
    waiting_on: &'a mut HashMap<NodeIndex, usize>,
    ready: &'a mut BTreeSet<(usize, NodeIndex)>,
    summary: &'a mut RunSummary,
}

/// Completes a node with an entry found in the cache: linked into the run directory, never executed.
#[allow(clippy::too_many_arguments)]
fn use_cached(
    cache: &Cache,
    graph: &Graph,
    index: NodeIndex,
    entry: CacheEntry,
    position: &HashMap<NodeIndex, usize>,
    progress: &mut Progress<'_>,
    run_dir: &mut RunDir,
    observer: &mut dyn Observer,
    emit: &mut impl FnMut(&mut RunDir, &mut dyn Observer, EventKind) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let spec = graph.spec(index);
    run_dir.publish(cache, &entry)?;
    cache.touch(&entry.key);
    let record = run_dir.record_mut(&spec.id, &spec.kind);
    record.status = NodeStatus::Cached;
    record.seconds = Some(entry.seconds);
    emit(
        run_dir,
        observer,
        EventKind::NodeCached {
            node: spec.id.clone(),
            key: entry.key,
        },
    )?;
    complete(
        graph,
        index,
        State::Done(entry.output_hash),
        progress.state,
        progress.waiting_on,
        progress.ready,
        position,
    );
    progress.summary.cached += 1;
    run_dir.checkpoint(false)
}

/// The event that says a node waits for another engine, with the holder's start in this machine's time.
fn waiting_event(node: &str, key: &str, holder: Option<Holder>) -> EventKind {
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
        key: key.to_owned(),
        holder_pid: holder.as_ref().map(|h| h.pid),
        holder_since: holder.as_ref().map(|h| since(&h.since)),
        holder_host: holder.map(|h| h.host),
    }
}

/// Nothing new starts once the run is cancelled, or once a node failed without `--keep-going`.
fn must_stop(cancel: &Cancel, options: &RunOptions, summary: &RunSummary) -> bool {
    cancel.is_cancelled() || (!options.keep_going && !summary.failed.is_empty())
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

fn exclusive(spec: &NodeSpec) -> impl Iterator<Item = Resource> + '_ {
    spec.resources
        .iter()
        .filter(|r| !matches!(r, Resource::Cores(_)))
        .cloned()
}

fn conflicts(spec: &NodeSpec, held: &HashSet<Resource>) -> bool {
    exclusive(spec).any(|r| held.contains(&r))
}

/// The node's key contribution is known (`now` is `Done`, or for a lazy effect `Deferred` or `Ready`): its
/// dependents that waited only for it become ready.
fn complete(
    graph: &Graph,
    index: NodeIndex,
    now: State,
    state: &mut HashMap<NodeIndex, State>,
    waiting_on: &mut HashMap<NodeIndex, usize>,
    ready: &mut BTreeSet<(usize, NodeIndex)>,
    position: &HashMap<NodeIndex, usize>,
) {
    state.insert(index, now);
    for dependent in graph.dependents(index) {
        if let Some(count) = waiting_on.get_mut(&dependent) {
            *count -= 1;
            if *count == 0 && state.get(&dependent) == Some(&State::Waiting) {
                state.insert(dependent, State::Ready);
                ready.insert((position[&dependent], dependent));
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn fail(
    graph: &Graph,
    index: NodeIndex,
    error: &NodeError,
    state: &mut HashMap<NodeIndex, State>,
    run_dir: &mut RunDir,
    summary: &mut RunSummary,
    observer: &mut dyn Observer,
    emit: &mut impl FnMut(&mut RunDir, &mut dyn Observer, EventKind) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let spec = graph.spec(index);
    state.insert(index, State::Failed);
    let record = run_dir.record_mut(&spec.id, &spec.kind);
    record.status = NodeStatus::Failed;
    record.error = Some(error.message.clone());
    summary
        .failed
        .push((spec.id.clone(), error.message.clone()));
    emit(
        run_dir,
        observer,
        EventKind::NodeFailed {
            node: spec.id.clone(),
            error: error.message.clone(),
        },
    )?;
    // Everything downstream can no longer run.
    let mut stack: Vec<NodeIndex> = graph.dependents(index).collect();
    while let Some(dependent) = stack.pop() {
        if matches!(state.get(&dependent), Some(State::Waiting | State::Ready)) {
            state.insert(dependent, State::Skipped);
            let dep_spec = graph.spec(dependent);
            let reason = format!("dependency `{}` failed", spec.id);
            let record = run_dir.record_mut(&dep_spec.id, &dep_spec.kind);
            record.status = NodeStatus::Skipped;
            record.reason = Some(reason.clone());
            emit(
                run_dir,
                observer,
                EventKind::NodeSkipped {
                    node: dep_spec.id.clone(),
                    reason,
                },
            )?;
            stack.extend(graph.dependents(dependent));
        }
    }
    Ok(())
}

/// One node's attempts: each in a fresh staging directory, published to the cache only on success.
fn execute_with_retries(
    engine: Engine<'_>,
    spec: &NodeSpec,
    fingerprint: &Fingerprint,
    inputs: &BTreeMap<String, PathBuf>,
    log: &Path,
    cancel: &Cancel,
    identity: &RunIdentity,
) -> Result<CacheEntry, NodeError> {
    let executor = engine
        .kinds
        .executor(&spec.kind)
        .ok_or_else(|| NodeError::permanent(format!("no executor for kind `{}`", spec.kind)))?;
    let io = |e: std::io::Error| NodeError::permanent(format!("node `{}`: {e}", spec.id));
    if let Some(parent) = log.parent() {
        fs::create_dir_all(parent).map_err(io)?;
    }
    // A fresh log for this run; the kind appends to it.
    fs::File::create(log).map_err(io)?;
    let key = fingerprint.key();
    let mut attempt = 0;
    loop {
        let staging = engine.cache.staging_dir(&spec.id).map_err(io)?;
        let started = Instant::now();
        let job = Job {
            spec,
            root: engine.root,
            out_dir: &staging,
            inputs,
            log,
            cancel,
            attempt,
            run: identity,
            key: &key,
        };
        let result: Result<Outcome, NodeError> = executor.execute(&job);
        let published = result.and_then(|outcome| {
            engine
                .cache
                .put(
                    &spec.id,
                    fingerprint,
                    &staging,
                    &spec.outputs,
                    outcome.metrics,
                    Some(log),
                    started.elapsed().as_secs_f64(),
                    now_rfc3339(),
                )
                .map_err(|e| NodeError::permanent(format!("storing outputs of `{}`: {e}", spec.id)))
        });
        let _ = fs::remove_dir_all(&staging);
        match published {
            Ok(entry) => return Ok(entry),
            Err(error) if error.transient && attempt < spec.retries && !cancel.is_cancelled() => {
                let backoff = FIRST_BACKOFF
                    .saturating_mul(1 << attempt.min(16))
                    .min(MAX_BACKOFF);
                append_log(
                    log,
                    &format!(
                        "fracflow: attempt {} failed ({error}); retrying in {backoff:?}\n",
                        attempt + 1
                    ),
                );
                let deadline = Instant::now() + backoff;
                while Instant::now() < deadline && !cancel.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

fn append_log(log: &Path, text: &str) {
    use std::io::Write;
    if let Ok(mut file) = fs::OpenOptions::new().append(true).open(log) {
        let _ = file.write_all(text.as_bytes());
    }
}
