//! The contract between the scheduler and the node kinds that the executors crate implements.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::spec::NodeSpec;

/// Set once on Ctrl-C or SIGTERM; every running node watches it and stops its children.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    /// The flag itself, for signal handlers that set it directly.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// Why a node did not produce its outputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NodeError {
    pub message: String,
    /// Worth retrying (device busy, link down, timeout of a flaky tool); never cached either way.
    pub transient: bool,
}

impl NodeError {
    pub fn permanent(message: impl Into<String>) -> NodeError {
        NodeError {
            message: message.into(),
            transient: false,
        }
    }
    pub fn transient(message: impl Into<String>) -> NodeError {
        NodeError {
            message: message.into(),
            transient: true,
        }
    }
}

/// What a kind contributes to a node's fingerprint and caching policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindInfo {
    /// Bumped by the kind's implementation whenever its behaviour changes.
    pub version: u32,
    /// Tool name → version string, probed once per tool.
    pub tools: BTreeMap<String, String>,
    /// False for effects (programming a device): never taken from the cache.
    pub cacheable: bool,
}

/// Everything a kind needs to run one node.
#[derive(Debug)]
pub struct Job<'a> {
    pub spec: &'a NodeSpec,
    /// Project root; relative paths in the node resolve against it.
    pub root: &'a Path,
    /// Private staging directory: the node writes its declared outputs here.
    pub out_dir: &'a Path,
    /// Dependency id → directory holding that dependency's outputs.
    pub inputs: &'a BTreeMap<String, std::path::PathBuf>,
    /// The node's log file, already created; append to it.
    pub log: &'a Path,
    pub cancel: &'a Cancel,
    /// 0 for the first attempt.
    pub attempt: u32,
    /// The run this node executes in (a cached result keeps the identity of the run that made it).
    pub run: &'a RunIdentity,
    /// The node's key (blake3 of its fingerprint): the same in every run and engine that does this same work,
    /// so work handed elsewhere (a Slurm job) can be found again after a restart.
    pub key: &'a str,
}

/// Which run a node executes in: figures and reports name it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunIdentity {
    pub pipeline: String,
    pub run_id: String,
    /// The testbed profile's name.
    pub testbed: String,
}

/// What a successful node reports besides its output files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub metrics: BTreeMap<String, serde_json::Value>,
}

/// One node kind.
pub trait Executor: Send + Sync {
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError>;
    /// The command or action, as `plan` prints it.
    fn describe(&self, spec: &NodeSpec) -> String;
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError>;
    /// Whether a non-cacheable node is a *lazy* effect (a device set-up step): it runs only when a node that
    /// depends on it runs, once, before it; its dependents key on its spec, not on what it printed. Effects
    /// that are not lazy run whenever the run reaches them.
    fn lazy(&self, _spec: &NodeSpec) -> bool {
        false
    }
}

/// The registry of kinds the scheduler dispatches to.
pub trait Kinds: Send + Sync {
    fn executor(&self, kind: &str) -> Option<&dyn Executor>;
}
