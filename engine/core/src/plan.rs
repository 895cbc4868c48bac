//! `plan` and `why`: what a run would do and why, computed from the cache without touching anything.

use petgraph::graph::NodeIndex;
use serde::Serialize;

use fracflow_record::Digest;

use crate::decide::{self, AskRemote, Contribution, Need, Unkeyed};
use crate::fingerprint::{FieldChange, Fingerprint};
use crate::graph::{Graph, NodeMap};
use crate::scheduler::{Engine, RunOptions};

/// Why a node would run, or that it would not.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Verdict {
    /// Its key is in the cache.
    Cached { key: Digest },
    /// Its key is not in the local cache but the remote tier holds it: the run downloads it, runs nothing.
    Remote { key: Digest },
    /// Its key is new; `changes` says what differs from the node's newest cached entry (empty: no entry).
    Run {
        key: Digest,
        changes: Vec<FieldChange>,
    },
    /// Forced by `--rerun`.
    Forced { key: Digest },
    /// A dependency will run, so its key is known only then. For a lazy effect: whether it runs is known only
    /// once these nodes have run (they decide whether a node that needs it is a cache hit).
    AfterUpstream { upstream: Vec<String> },
    /// Its key cannot be computed (missing input file, unknown kind).
    Error { message: String },
    /// The kind is an effect (programming a device): it runs whenever the run reaches it; a lazy effect, only
    /// because something that needs it runs.
    Always { key: Digest },
    /// A lazy effect (a set-up step) whose dependents are all cached, or not needed either: the run will skip it.
    NotNeeded { key: Digest },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanItem {
    pub node: String,
    pub kind: String,
    pub command: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Seconds: the declared estimate, else the median of recorded durations, else unknown.
    pub estimate_seconds: Option<f64>,
    pub estimate_source: &'static str,
    /// Bytes of outputs, from the node's newest cached entry.
    pub estimate_bytes: Option<u64>,
}

impl PlanItem {
    /// Whether the run executes it, or may (`run?`, errors): neither a cache hit nor a lazy effect that
    /// nothing needs, which the run skips and which takes no time.
    pub fn will_run(&self) -> bool {
        !matches!(
            self.verdict,
            Verdict::Cached { .. } | Verdict::Remote { .. } | Verdict::NotNeeded { .. }
        )
    }
}

/// What a planned node contributes to its dependents' keys, when that is known before the run.
enum Known {
    Effect(Digest),
    Output(Digest),
}

/// Every node `targets` need, in topological order, with its verdict and estimates. Keys and needs come from
/// `decide`, as in a run.
pub fn plan(
    engine: Engine<'_>,
    graph: &Graph,
    targets: &[NodeIndex],
    options: &RunOptions,
) -> Vec<PlanItem> {
    plan_with_fingerprint(engine, graph, targets, options, None).0
}

/// [`plan`], and the current fingerprint of `fingerprinted` when its key is known. A plan of a cached graph
/// makes no other node's owned fingerprint: one for every node was a tenth of a 100 000-node plan's peak heap
/// (they were kept for `why`, which asks for one).
fn plan_with_fingerprint(
    engine: Engine<'_>,
    graph: &Graph,
    targets: &[NodeIndex],
    options: &RunOptions,
    fingerprinted: Option<NodeIndex>,
) -> (Vec<PlanItem>, Option<Fingerprint>) {
    let mut wanted_fingerprint = None;
    let selected = graph.closure(targets);
    let mut known: NodeMap<Known> = NodeMap::for_graph(graph);
    // Sized once: grown by doubling, the vector's last copy held a 100 000-node plan twice.
    let mut items: Vec<PlanItem> = Vec::with_capacity(selected.len());
    let mut item_of: NodeMap<usize> = NodeMap::for_graph(graph);
    // Lazy effects that run only if a node that depends on them runs, decided once their dependents are.
    let mut if_needed: Vec<NodeIndex> = Vec::new();
    for &index in graph.topological() {
        if !selected.contains(&index) {
            continue;
        }
        let spec = graph.spec(index);
        // The node's pointer (newest key, past durations), read at most once and only when needed.
        let mut pointer: Option<Option<crate::cache::NodePointer>> = None;
        let mut hit_bytes: Option<u64> = None;
        let command = engine
            .kinds
            .executor(&spec.kind)
            .map(|e| e.describe(spec))
            .unwrap_or_default();
        let keyed = decide::key(engine, graph, index, options, |dependency| {
            match known.get(dependency) {
                Some(Known::Effect(key)) => Contribution::Effect(key),
                Some(Known::Output(hash)) => Contribution::Output(hash),
                None => Contribution::Unknown,
            }
        });
        let verdict = match keyed {
            Err(Unkeyed::Upstream(upstream)) => Verdict::AfterUpstream { upstream },
            Err(Unkeyed::Error(error)) => Verdict::Error {
                message: error.message,
            },
            Ok(keyed) => {
                let has_dependents = graph.dependents(index).any(|d| selected.contains(&d));
                let need = decide::decide(
                    engine,
                    spec,
                    &keyed,
                    options,
                    has_dependents,
                    AskRemote::Probe,
                );
                let key = keyed.key;
                if keyed.lazy {
                    known.insert(index, Known::Effect(key));
                }
                if fingerprinted == Some(index) {
                    wanted_fingerprint = Some(keyed.fingerprint(graph, spec, options));
                }
                match need {
                    Need::Hit(entry) => {
                        hit_bytes = Some(entry.outputs.values().map(|b| b.size).sum());
                        known.insert(index, Known::Output(entry.output_hash));
                        Verdict::Cached { key }
                    }
                    Need::Remote(entry) => {
                        hit_bytes = Some(entry.outputs.values().map(|b| b.size).sum());
                        known.insert(index, Known::Output(entry.output_hash));
                        Verdict::Remote { key }
                    }
                    Need::Miss => {
                        let changes = pointer
                            .get_or_insert_with(|| engine.cache.pointer(&spec.id))
                            .as_ref()
                            .and_then(|p| engine.cache.get(&p.latest_key))
                            .map(|old| {
                                old.fingerprint
                                    .diff(&keyed.fingerprint(graph, spec, options))
                            })
                            .unwrap_or_default();
                        Verdict::Run { key, changes }
                    }
                    Need::Forced => Verdict::Forced { key },
                    Need::Effect => Verdict::Always { key },
                    Need::IfNeeded => {
                        if_needed.push(index);
                        Verdict::Always { key }
                    }
                }
            }
        };
        // A cached node costs no time; its past durations and sizes are read only for nodes that run, once.
        let cached = matches!(verdict, Verdict::Cached { .. } | Verdict::Remote { .. });
        let mut history = || {
            pointer
                .get_or_insert_with(|| engine.cache.pointer(&spec.id))
                .clone()
        };
        let (estimate_seconds, estimate_source) = match spec.estimate {
            Some(declared) => (Some(declared.as_secs_f64()), "declared"),
            None if cached => (None, "cached"),
            None => match history().and_then(|p| p.median_duration()) {
                Some(median) => (Some(median), "median of past runs"),
                None => (None, "unknown"),
            },
        };
        let estimate_bytes = hit_bytes.or_else(|| {
            history()
                .and_then(|p| engine.cache.get(&p.latest_key))
                .map(|entry| entry.outputs.values().map(|b| b.size).sum())
        });
        item_of.insert(index, items.len());
        items.push(PlanItem {
            node: spec.id.clone(),
            kind: spec.kind.clone(),
            command,
            verdict,
            estimate_seconds,
            estimate_source,
            estimate_bytes,
        });
    }
    // Last dependents first: along a chain (program → reboot → driver) each effect is needed when the next is.
    for &index in if_needed.iter().rev() {
        let mut pending: Vec<String> = Vec::new();
        let mut runs = false;
        for dependent in graph.dependents(index) {
            let Some(&item) = item_of.get(dependent) else {
                continue;
            };
            match &items[item].verdict {
                Verdict::Run { .. } | Verdict::Forced { .. } | Verdict::Always { .. } => {
                    runs = true
                }
                Verdict::AfterUpstream { upstream } => pending.extend(upstream.iter().cloned()),
                // A node whose key cannot be computed fails before it could need anything.
                Verdict::Cached { .. }
                | Verdict::Remote { .. }
                | Verdict::NotNeeded { .. }
                | Verdict::Error { .. } => {}
            }
        }
        let Some(&item) = item_of.get(index) else {
            continue;
        };
        let Verdict::Always { key } = &items[item].verdict else {
            continue;
        };
        let key = *key;
        items[item].verdict = if runs {
            Verdict::Always { key }
        } else if pending.is_empty() {
            Verdict::NotNeeded { key }
        } else {
            // A dependent's key waits for a node that runs first: early cutoff may yet make it a hit.
            pending.sort();
            pending.dedup();
            Verdict::AfterUpstream { upstream: pending }
        };
    }
    (items, wanted_fingerprint)
}

/// What `why NODE` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Why {
    /// The current key is cached: nothing to explain.
    UpToDate {
        key: Digest,
    },
    /// The node has never been stored.
    NeverBuilt,
    /// The current key differs from the newest entry in these fields.
    Changed {
        old_key: Digest,
        new_key: Digest,
        changes: Vec<FieldChange>,
    },
    /// A dependency has no cached result, so the key is not known yet.
    UpstreamPending {
        upstream: Vec<String>,
    },
    Error {
        message: String,
    },
}

/// Diffs the node's current fingerprint against its newest cached entry.
pub fn why(engine: Engine<'_>, graph: &Graph, node: NodeIndex, options: &RunOptions) -> Why {
    let id = &graph.spec(node).id;
    let (items, fingerprint) = plan_with_fingerprint(engine, graph, &[node], options, Some(node));
    let Some(item) = items.into_iter().find(|i| &i.node == id) else {
        return Why::Error {
            message: format!("node `{id}` is not in its own plan"),
        };
    };
    if let Verdict::AfterUpstream { upstream } = item.verdict {
        return Why::UpstreamPending { upstream };
    }
    if let Verdict::Error { message } = item.verdict {
        return Why::Error { message };
    }
    let Some(current) = fingerprint else {
        return Why::Error {
            message: format!("no fingerprint computed for `{id}`"),
        };
    };
    let new_key = current.key();
    match engine.cache.latest_for(id) {
        None => Why::NeverBuilt,
        Some(_) if engine.cache.get(&new_key).is_some() => Why::UpToDate { key: new_key },
        Some(old) => Why::Changed {
            old_key: old.key,
            changes: old.fingerprint.diff(&current),
            new_key,
        },
    }
}
