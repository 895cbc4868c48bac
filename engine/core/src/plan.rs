//! `plan` and `why`: what a run would do and why, computed from the cache without touching anything.

use std::collections::{BTreeMap, HashMap, HashSet};

use petgraph::graph::NodeIndex;
use serde::Serialize;

use crate::fingerprint::{FieldChange, Fingerprint};
use crate::graph::Graph;
use crate::scheduler::{Engine, RunOptions};

/// Why a node would run, or that it would not.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Verdict {
    /// Its key is in the cache.
    Cached { key: String },
    /// Its key is new; `changes` says what differs from the node's newest cached entry (empty: no entry).
    Run {
        key: String,
        changes: Vec<FieldChange>,
    },
    /// Forced by `--rerun`.
    Forced { key: String },
    /// A dependency will run, so its key is known only then.
    AfterUpstream { upstream: Vec<String> },
    /// Its key cannot be computed (missing input file, unknown kind).
    Error { message: String },
    /// The kind is an effect (programming a device): it runs whenever the run reaches it; a lazy effect, only
    /// because something that needs it runs.
    Always { key: String },
    /// A lazy effect (a set-up step) whose dependents are all cached: the run will skip it.
    NotNeeded { key: String },
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
    /// The node's current fingerprint, when its dependencies' outputs are known.
    #[serde(skip)]
    pub fingerprint: Option<Fingerprint>,
}

impl PlanItem {
    pub fn will_run(&self) -> bool {
        !matches!(self.verdict, Verdict::Cached { .. })
    }
}

/// Every node `targets` need, in topological order, with its verdict and estimates.
pub fn plan(
    engine: Engine<'_>,
    graph: &Graph,
    targets: &[NodeIndex],
    options: &RunOptions,
) -> Vec<PlanItem> {
    let selected = graph.closure(targets);
    let mut output_hash: HashMap<NodeIndex, Option<String>> = HashMap::new();
    // Lazy effects: their dependents key on their keys, and they key on none but each other's (see `scheduler`).
    let mut lazy_nodes: HashSet<NodeIndex> = HashSet::new();
    let mut items: Vec<PlanItem> = Vec::new();
    let mut item_of: HashMap<NodeIndex, usize> = HashMap::new();
    for &index in graph.topological() {
        if !selected.contains(&index) {
            continue;
        }
        let spec = graph.spec(index);
        let command = engine
            .kinds
            .executor(&spec.kind)
            .map(|e| e.describe(spec))
            .unwrap_or_default();
        let info = engine.kind_info(spec);
        let lazy = info.as_ref().is_ok_and(|info| engine.is_lazy(spec, info));
        let mut upstream = BTreeMap::new();
        let mut pending = Vec::new();
        for dep in graph.dependencies(index) {
            if lazy && !lazy_nodes.contains(&dep) {
                continue;
            }
            match output_hash.get(&dep).cloned().flatten() {
                Some(hash) => {
                    upstream.insert(graph.spec(dep).id.clone(), hash);
                }
                None => pending.push(graph.spec(dep).id.clone()),
            }
        }
        pending.sort();
        let mut current = None;
        let (verdict, hash) = if !pending.is_empty() {
            (Verdict::AfterUpstream { upstream: pending }, None)
        } else {
            match info.and_then(|info| {
                engine
                    .fingerprint(spec, &info, upstream, &options.testbed)
                    .map(|f| (info, f))
            }) {
                Err(error) => (
                    Verdict::Error {
                        message: error.message,
                    },
                    None,
                ),
                Ok((info, fingerprint)) => {
                    let key = fingerprint.key();
                    current = Some(fingerprint.clone());
                    let forced = options.rerun.iter().any(|p| {
                        p == &spec.id || glob::Pattern::new(p).is_ok_and(|g| g.matches(&spec.id))
                    });
                    if lazy {
                        // It runs only if a dependent does; `plan` cannot say yet, and prints it as an effect.
                        lazy_nodes.insert(index);
                        (Verdict::Always { key: key.clone() }, Some(key))
                    } else if !info.cacheable {
                        (Verdict::Always { key }, None)
                    } else if forced {
                        (Verdict::Forced { key }, None)
                    } else if let Some(entry) = engine.cache.get(&key) {
                        (Verdict::Cached { key }, Some(entry.output_hash))
                    } else {
                        let changes = engine
                            .cache
                            .latest_for(&spec.id)
                            .map(|old| old.fingerprint.diff(&fingerprint))
                            .unwrap_or_default();
                        (Verdict::Run { key, changes }, None)
                    }
                }
            }
        };
        output_hash.insert(index, hash);
        let (estimate_seconds, estimate_source) =
            match (spec.estimate, engine.cache.median_duration(&spec.id)) {
                (Some(declared), _) => (Some(declared.as_secs_f64()), "declared"),
                (None, Some(median)) => (Some(median), "median of past runs"),
                (None, None) => (None, "unknown"),
            };
        let estimate_bytes = engine
            .cache
            .latest_for(&spec.id)
            .map(|entry| entry.outputs.values().map(|b| b.size).sum());
        item_of.insert(index, items.len());
        items.push(PlanItem {
            node: spec.id.clone(),
            kind: spec.kind.clone(),
            command,
            verdict,
            estimate_seconds,
            estimate_source,
            estimate_bytes,
            fingerprint: current,
        });
    }
    mark_unneeded_effects(graph, &selected, &lazy_nodes, &item_of, &mut items);
    items
}

/// A lazy effect runs when a node that depends on it runs (along a chain, when the next effect runs) or when
/// nothing in the plan depends on it (asked for by itself); otherwise the run skips it, as the scheduler does.
fn mark_unneeded_effects(
    graph: &Graph,
    selected: &std::collections::BTreeSet<NodeIndex>,
    lazy_nodes: &HashSet<NodeIndex>,
    item_of: &HashMap<NodeIndex, usize>,
    items: &mut [PlanItem],
) {
    let mut needed: HashSet<NodeIndex> = HashSet::new();
    for &index in graph.topological().iter().rev() {
        if !lazy_nodes.contains(&index) {
            continue;
        }
        let dependents: Vec<NodeIndex> = graph
            .dependents(index)
            .filter(|d| selected.contains(d))
            .collect();
        let runs = dependents.is_empty()
            || dependents.iter().any(|d| {
                if lazy_nodes.contains(d) {
                    needed.contains(d)
                } else {
                    item_of
                        .get(d)
                        .is_none_or(|&i| !matches!(items[i].verdict, Verdict::Cached { .. }))
                }
            });
        if runs {
            needed.insert(index);
        } else if let Some(&i) = item_of.get(&index)
            && let Verdict::Always { key } = &items[i].verdict
        {
            items[i].verdict = Verdict::NotNeeded { key: key.clone() };
        }
    }
}

/// What `why NODE` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Why {
    /// The current key is cached: nothing to explain.
    UpToDate {
        key: String,
    },
    /// The node has never been stored.
    NeverBuilt,
    /// The current key differs from the newest entry in these fields.
    Changed {
        old_key: String,
        new_key: String,
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
    let Some(item) = plan(engine, graph, &[node], options)
        .into_iter()
        .find(|i| &i.node == id)
    else {
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
    let Some(current) = item.fingerprint else {
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
