//! What a loaded pipeline is, independent of the YAML it came from.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A node's unique id within a pipeline: its name, then its sweep point, e.g. `measure[m=1024,n=4]`.
pub type NodeId = String;

/// A node's kind settings or its sweep point: a few named values, sorted by name.
pub type Settings = fracflow_record::SortedMap<serde_json::Value>;

/// Where a node was declared, so every later error can point at the YAML.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Origin {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// A resource a node holds while it runs. Exclusive resources (`device:`, `host:`) serialise every node that
/// names them; `cores:N` counts against the scheduler's core budget.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Resource {
    Device(String),
    Host(String),
    Cores(u32),
}

impl Resource {
    /// Parses `device:NAME`, `host:NAME` or `cores:N`.
    pub fn parse(text: &str) -> Result<Resource, String> {
        let (kind, value) = text.split_once(':').ok_or_else(|| {
            format!("resource `{text}` must look like device:NAME, host:NAME or cores:N")
        })?;
        if value.is_empty() {
            return Err(format!("resource `{text}` has an empty value"));
        }
        match kind {
            "device" => Ok(Resource::Device(value.to_owned())),
            "host" => Ok(Resource::Host(value.to_owned())),
            "cores" => value
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(Resource::Cores)
                .ok_or_else(|| format!("resource `{text}`: cores takes a whole number ≥ 1")),
            other => Err(format!(
                "resource kind `{other}` is unknown; expected device, host or cores"
            )),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Device(name) => write!(f, "device:{name}"),
            Resource::Host(name) => write!(f, "host:{name}"),
            Resource::Cores(n) => write!(f, "cores:{n}"),
        }
    }
}

/// One fully resolved node: templates filled in, sweep point fixed, paths absolute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Unique id: `name` alone, or `name[k1=v1,k2=v2]` for a node expanded over sweep keys.
    pub id: NodeId,
    /// The name the node has in the YAML.
    pub name: String,
    /// Node kind (`command`, `hls`, `measure`, …), chosen by the executor registry.
    pub kind: String,
    /// Kind-specific settings after template resolution (for `command`: run, env, cwd, metrics, …).
    pub config: Settings,
    /// The sweep coordinates of this instance (empty for an unswept node).
    // Every field is written, even when empty: the load memo stores specs by position (see
    // `fracflow_loader::memo`), and a field left out would shift the ones after it. A spec from JSON may still
    // leave the defaulted ones out.
    #[serde(default)]
    pub point: Settings,
    /// Ids of the nodes whose outputs this node reads.
    #[serde(default)]
    pub deps: Vec<NodeId>,
    /// Files whose content enters the key, absolute.
    #[serde(default)]
    pub inputs: Vec<PathBuf>,
    /// Output files the node must produce, relative to its output directory.
    pub outputs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<Resource>,
    /// Extra attempts after a transient failure.
    #[serde(default)]
    pub retries: u32,
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// Declared duration, used by `plan` before any run has been recorded.
    #[serde(default)]
    pub estimate: Option<Duration>,
    pub origin: Origin,
}

#[cfg(test)]
impl NodeSpec {
    /// A `command` node named `id` that depends on `deps` and has nothing else, for the crate's unit tests.
    pub(crate) fn for_test(id: &str, deps: &[&str]) -> NodeSpec {
        NodeSpec {
            id: id.to_owned(),
            name: id.to_owned(),
            kind: "command".to_owned(),
            config: Settings::new(),
            point: Settings::new(),
            deps: deps.iter().map(|d| (*d).to_owned()).collect(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            resources: Vec::new(),
            retries: 0,
            timeout: None,
            estimate: None,
            origin: Origin::default(),
        }
    }
}

/// A loaded pipeline: its nodes in declaration order and its named targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    pub name: String,
    /// The project root every relative path was resolved against.
    pub root: PathBuf,
    /// Every YAML file read to build this pipeline (the entry file first).
    pub sources: Vec<PathBuf>,
    /// The nodes as the loader builds them; once the pipeline is loaded they are in its `Graph`
    /// (`Graph::from_pipeline` moves them there) and this is empty.
    pub nodes: Vec<NodeSpec>,
    /// Named targets (`fig16`, …) → the node ids that produce them.
    pub targets: BTreeMap<String, Vec<NodeId>>,
}
