//! The one place that says how a node's key is made and what the node needs once its key is known. The
//! scheduler acts on these answers and `plan` predicts with them, so a prediction cannot drift from a run.

use std::collections::BTreeMap;

use petgraph::graph::NodeIndex;

use crate::cache::Hit;
use crate::exec::{KindInfo, NodeError};
use crate::fingerprint::{
    FINGERPRINT_VERSION, Fingerprint, FingerprintRef, UpstreamRef, sort_upstream,
};
use crate::graph::Graph;
use crate::scheduler::{Engine, RunOptions, exclusive, uses_testbed};
use crate::spec::NodeSpec;
use fracflow_record::Digest;

/// What a dependency contributes to the keys of the nodes that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contribution<'a> {
    /// A lazy effect: its own key, known before it runs (see `scheduler`'s module comment).
    Effect(&'a Digest),
    /// Any other node: the hash of its outputs, known once it is built or found in the cache.
    Output(&'a Digest),
    /// Not known yet: the dependency has still to run.
    Unknown,
}

/// A node whose key is known.
#[derive(Debug, Clone)]
pub(crate) struct Keyed {
    pub info: KindInfo,
    /// A lazy effect (see `Executor::lazy`).
    pub lazy: bool,
    pub key: Digest,
    /// The parts of its fingerprint that are not in its spec or its kind's facts.
    inputs: BTreeMap<String, String>,
    /// Each dependency's contribution, sorted by its id.
    upstream: Vec<(NodeIndex, Digest)>,
    placement: Vec<String>,
    uses_testbed: bool,
}

/// The testbed fields of a node that does not touch the testbed.
static NO_TESTBED: BTreeMap<String, serde_json::Value> = BTreeMap::new();

impl Keyed {
    /// The fingerprint the key was made from, borrowed from the node's `spec` and the run's `testbed`.
    pub fn fingerprint_ref<'a>(
        &'a self,
        graph: &'a Graph,
        spec: &'a NodeSpec,
        testbed: &'a BTreeMap<String, serde_json::Value>,
    ) -> FingerprintRef<'a> {
        FingerprintRef {
            version: FINGERPRINT_VERSION,
            kind: &spec.kind,
            kind_version: self.info.version,
            config: &spec.config,
            point: &spec.point,
            outputs: &spec.outputs,
            inputs: &self.inputs,
            upstream: UpstreamRef::Nodes {
                graph,
                entries: &self.upstream,
            },
            tools: &self.info.tools,
            testbed: if self.uses_testbed {
                testbed
            } else {
                &NO_TESTBED
            },
            placement: &self.placement,
        }
    }

    /// The whole fingerprint, for a node that runs (its entry stores it) or that `plan` explains.
    pub fn fingerprint(&self, graph: &Graph, spec: &NodeSpec, options: &RunOptions) -> Fingerprint {
        self.fingerprint_ref(graph, spec, &options.testbed)
            .to_fingerprint()
    }
}

/// Why a node's key is not known.
#[derive(Debug, Clone)]
pub(crate) enum Unkeyed {
    /// These dependencies (ids, sorted) have yet to run.
    Upstream(Vec<String>),
    /// The key cannot be computed: unknown kind, unreadable input file.
    Error(NodeError),
}

/// The node's key, from what each dependency contributes. A lazy effect keys only on the lazy effects
/// before it: what cacheable dependencies made orders it rather than shaping what it sets up.
pub(crate) fn key<'c>(
    engine: Engine<'_>,
    graph: &Graph,
    index: NodeIndex,
    options: &RunOptions,
    contribution: impl Fn(NodeIndex) -> Contribution<'c>,
) -> Result<Keyed, Unkeyed> {
    let spec = graph.spec(index);
    let info = engine.kind_info(spec);
    let lazy = info.as_ref().is_ok_and(|info| engine.is_lazy(spec, info));
    // Sized once: grown by doubling, the vector of a node over a large sweep left its earlier copies' pages
    // behind in the process (8 MB at 100 000 dependencies).
    let mut upstream = Vec::with_capacity(graph.dependencies(index).count());
    let mut pending = Vec::new();
    for dependency in graph.dependencies(index) {
        let id = &graph.spec(dependency).id;
        match contribution(dependency) {
            Contribution::Effect(key) => upstream.push((dependency, *key)),
            Contribution::Output(_) if lazy => {}
            Contribution::Output(hash) => upstream.push((dependency, *hash)),
            Contribution::Unknown if lazy => {}
            Contribution::Unknown => pending.push(id.clone()),
        }
    }
    if !pending.is_empty() {
        pending.sort();
        return Err(Unkeyed::Upstream(pending));
    }
    let info = info.map_err(Unkeyed::Error)?;
    sort_upstream(graph, &mut upstream);
    let mut keyed = Keyed {
        info,
        lazy,
        key: Digest::default(),
        inputs: engine.input_hashes(spec).map_err(Unkeyed::Error)?,
        upstream,
        placement: exclusive(spec).map(|r| r.to_string()).collect(),
        uses_testbed: uses_testbed(spec),
    };
    keyed.key = keyed.fingerprint_ref(graph, spec, &options.testbed).key();
    Ok(keyed)
}

/// What a node whose key is known needs.
#[derive(Debug, Clone)]
pub(crate) enum Need {
    /// Cacheable, and its key is in the cache: published from there, never executed.
    Hit(Box<Hit>),
    /// Cacheable, not in the local cache, and the remote tier holds it (asked without downloading: `plan`).
    Remote(Box<Hit>),
    /// Cacheable, and its key is not in the cache: it executes, holding the key's lock.
    Miss,
    /// Named by `--rerun`: it executes even though its key may be cached.
    Forced,
    /// An effect that executes whenever the run reaches it: an eager one (`program`, `load`), or a lazy one
    /// that nothing in the run depends on (it was asked for by itself).
    Effect,
    /// A lazy effect that nodes in the run depend on: it executes, before them, only if one of them executes
    /// (a dependent that is queued to execute pulls it in); otherwise it is skipped, "nothing that needs it
    /// runs".
    IfNeeded,
}

/// Why a lazy effect did not run.
pub(crate) const NOT_NEEDED: &str = "nothing that needs it runs";

/// How a local miss asks the remote tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AskRemote {
    /// Download what it holds (a run): a remote hit becomes a local one.
    Fetch,
    /// Only ask whether it holds it (`plan`).
    Probe,
}

/// What `spec`, keyed as `keyed`, needs. `has_dependents`: some node of the run depends on it.
pub(crate) fn decide(
    engine: Engine<'_>,
    spec: &NodeSpec,
    keyed: &Keyed,
    options: &RunOptions,
    has_dependents: bool,
    ask_remote: AskRemote,
) -> Need {
    let forced = options.forces(&spec.id);
    if keyed.lazy {
        return if forced {
            Need::Forced
        } else if has_dependents {
            Need::IfNeeded
        } else {
            Need::Effect
        };
    }
    if !keyed.info.cacheable {
        return Need::Effect;
    }
    if forced {
        return Need::Forced;
    }
    if let Some(hit) = engine.cache.lookup(&keyed.key) {
        return Need::Hit(Box::new(hit));
    }
    match ask_remote {
        AskRemote::Fetch => engine
            .cache
            .lookup_remote(&keyed.key, true)
            .map_or(Need::Miss, |hit| Need::Hit(Box::new(hit))),
        AskRemote::Probe => engine
            .cache
            .lookup_remote(&keyed.key, false)
            .map_or(Need::Miss, |hit| Need::Remote(Box::new(hit))),
    }
}
