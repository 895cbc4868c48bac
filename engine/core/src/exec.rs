//! The contract between the scheduler and the node kinds that the executors crate implements.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// A node's dependencies, each with the directory holding its outputs, in id order.
#[derive(Debug, Clone)]
pub enum Inputs<'a> {
    /// The run directory's views: `dir/<node_dir_name(id)>` for each id. The paths are made when asked for: an
    /// aggregator over a 100 000-point sweep held a path and a copy of the id for each input, 24 MB at the
    /// moment its run held the most (heaptrack).
    Views { dir: PathBuf, ids: Vec<&'a str> },
    /// Listed one by one: a job read back from a file (a Slurm job), or a test's.
    Listed(&'a BTreeMap<String, PathBuf>),
}

impl<'a> Inputs<'a> {
    /// The views in `dir` of the dependencies `ids`, in any order and with repeats.
    pub fn views(dir: PathBuf, mut ids: Vec<&'a str>) -> Inputs<'a> {
        ids.sort_unstable();
        ids.dedup();
        Inputs::Views { dir, ids }
    }

    pub fn len(&self) -> usize {
        match self {
            Inputs::Views { ids, .. } => ids.len(),
            Inputs::Listed(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each dependency's id and directory, in id order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&'a str, PathBuf)> + '_> {
        match self {
            Inputs::Views { dir, ids } => {
                Box::new(ids.iter().map(|id| (*id, crate::run::view_of(dir, id))))
            }
            Inputs::Listed(map) => Box::new(map.iter().map(|(id, dir)| (id.as_str(), dir.clone()))),
        }
    }

    /// Each dependency's directory, in the order of the ids.
    pub fn dirs(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.iter().map(|(_, dir)| dir)
    }

    /// The whole listing, owned: what a job written to a file carries.
    pub fn to_map(&self) -> BTreeMap<String, PathBuf> {
        self.iter().map(|(id, dir)| (id.to_owned(), dir)).collect()
    }
}

/// Everything a kind needs to run one node.
#[derive(Debug)]
pub struct Job<'a> {
    pub spec: &'a NodeSpec,
    /// Project root; relative paths in the node resolve against it.
    pub root: &'a Path,
    /// Private staging directory: the node writes its declared outputs here.
    pub out_dir: &'a Path,
    /// Each dependency and the directory holding its outputs.
    pub inputs: &'a Inputs<'a>,
    /// The node's log file, already created; append to it.
    pub log: &'a Path,
    pub cancel: &'a Cancel,
    /// 0 for the first attempt.
    pub attempt: u32,
    /// The run this node executes in (a cached result keeps the identity of the run that made it).
    pub run: &'a RunIdentity,
    /// The node's key (blake3 of its fingerprint): the same in every run and engine that does this same work,
    /// so work handed elsewhere (a Slurm job) can be found again after a restart.
    pub key: &'a fracflow_record::Digest,
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

/// One step of the way from a node's mapping to one of its values: a key, or a list position.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathSegment {
    Key(String),
    Index(usize),
}

impl std::fmt::Display for PathSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathSegment::Key(key) => f.write_str(key),
            PathSegment::Index(index) => write!(f, "{index}"),
        }
    }
}

/// A value of a node's configuration that its kind rejects, found before anything runs.
///
/// `path` leads from the node's mapping (the keys written beside `kind:`) to the value, e.g. `claims`, `2`,
/// `metric`; the loader turns it back into the YAML position of that value. Empty means the node as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub path: Vec<PathSegment>,
    pub message: String,
    pub hint: Option<String>,
    /// The problem is the key itself (an unknown key), not its value: shown at the key.
    pub at_key: bool,
}

impl ConfigProblem {
    /// A problem with the value at `path`.
    pub fn at(path: Vec<PathSegment>, message: impl Into<String>) -> ConfigProblem {
        ConfigProblem {
            path,
            message: message.into(),
            hint: None,
            at_key: false,
        }
    }

    /// A problem with the value of the node's key `key`.
    pub fn key(key: &str, message: impl Into<String>) -> ConfigProblem {
        ConfigProblem::at(vec![PathSegment::Key(key.to_owned())], message)
    }

    pub fn with_hint(mut self, hint: Option<String>) -> ConfigProblem {
        self.hint = hint;
        self
    }

    /// `claims.2.metric`, for messages where no YAML position is at hand.
    pub fn dotted_path(&self) -> String {
        let parts: Vec<String> = self.path.iter().map(ToString::to_string).collect();
        parts.join(".")
    }
}

/// One node kind.
pub trait Executor: Send + Sync {
    /// Every problem of the node's resolved configuration that can be judged without upstream data (unknown
    /// keys, values out of range, files of the project that do not exist). The loader calls it for every
    /// node before anything runs; `execute` may assume an empty answer.
    fn check(&self, _spec: &NodeSpec, _root: &Path) -> Vec<ConfigProblem> {
        Vec::new()
    }
    /// The JSON schema (draft 2020-12) of the kind's own keys, as written in a pipeline (a value may be a
    /// template): an object schema with `properties`, `required` and a `description`.
    fn config_schema(&self) -> serde_json::Value {
        serde_json::json!({ "type": "object" })
    }
    /// The keys whose string value is run by a shell (`sh -c`), so that whoever substitutes text into them
    /// knows to quote it.
    fn shell_fields(&self) -> &'static [&'static str] {
        &[]
    }
    /// Files the kind writes whatever the node's `outputs:` say (e.g. `metrics.json`), given its configuration;
    /// the loader adds them to the node's outputs so the cache keeps them.
    fn implied_outputs(&self, _spec: &NodeSpec) -> Vec<String> {
        Vec::new()
    }
    /// Project files the node reads because its configuration names them (a measure node's trace file),
    /// relative to `root`; the loader adds them to the node's `inputs`, so their content hashes enter its key
    /// as any input's do. Only files the node will read: one it may do without when absent is left out then,
    /// and one it needs but is missing is a problem of `check`.
    fn implied_inputs(&self, _spec: &NodeSpec, _root: &Path) -> Vec<String> {
        Vec::new()
    }
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
    /// Every kind's name, for did-you-mean and for the pipeline schema; a registry that only dispatches (a
    /// test's) may leave it empty.
    fn names(&self) -> Vec<&str> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_list_each_dependency_once_in_id_order_under_its_folder_name() {
        let ids = vec!["p[a=2]", "agg/x", "p[a=10]", "p[a=2]"];
        let views = Inputs::views(PathBuf::from("/run/nodes"), ids);
        assert_eq!(views.len(), 3);
        let listed: BTreeMap<String, PathBuf> = BTreeMap::from([
            ("p[a=2]".to_owned(), PathBuf::from("/run/nodes/p[a=2]")),
            ("agg/x".to_owned(), PathBuf::from("/run/nodes/agg_x")),
            ("p[a=10]".to_owned(), PathBuf::from("/run/nodes/p[a=10]")),
        ]);
        // The same listing, in the same order, as the map a Slurm job carries.
        assert_eq!(views.to_map(), listed);
        let in_order: Vec<(&str, PathBuf)> = views.iter().collect();
        let from_map: Vec<(&str, PathBuf)> = Inputs::Listed(&listed).iter().collect();
        assert_eq!(in_order, from_map);
        assert!(Inputs::views(PathBuf::from("/run/nodes"), Vec::new()).is_empty());
    }
}
