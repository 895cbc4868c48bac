//! `results/<pipeline>/<run-id>/manifest.json`: what a run did, rewritten after every node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Digest, SortedMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Interrupted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    Pending,
    Running,
    /// Finished in this run and stored in the cache.
    Built,
    /// Taken from the cache without running.
    Cached,
    Failed,
    /// Not run because a dependency failed or the run was interrupted.
    Skipped,
}

/// One node's entry in the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub kind: String,
    pub status: NodeStatus,
    /// The node's cache key, once its dependencies are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Digest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Output file name → blob hash.
    #[serde(default, skip_serializing_if = "SortedMap::is_empty")]
    pub outputs: SortedMap<Digest>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why a skipped node did not run (a dependency failed, the run stopped, nothing needed an effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Log file relative to the run directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

impl NodeRecord {
    pub fn pending(kind: &str) -> NodeRecord {
        NodeRecord {
            kind: kind.to_owned(),
            status: NodeStatus::Pending,
            key: None,
            started: None,
            seconds: None,
            outputs: SortedMap::new(),
            metrics: BTreeMap::new(),
            error: None,
            reason: None,
            log: None,
        }
    }
}

/// Where the project's sources stood when the run started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GitState {
    pub commit: String,
    pub dirty: bool,
}

/// `P` is how the params are held: read back, a map of values (the default); a running run keeps them in the
/// form it writes (`core::run::RunParams`), since a value per node was the larger part of a large run's memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest<P = BTreeMap<String, serde_json::Value>> {
    pub format_version: u32,
    pub engine_version: String,
    pub pipeline: String,
    pub run_id: String,
    /// The command line that started the run.
    pub command: Vec<String>,
    pub host: String,
    pub testbed: String,
    /// The testbed profile as used: its kind, its adaptation of the paper's runs and the params it lowered.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub testbed_profile: serde_json::Value,
    pub git: Option<GitState>,
    pub started: String,
    /// Times this run directory was continued with `--resume`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    pub status: RunStatus,
    /// The run this one repeated exactly: every node a cache hit under the keys, outputs and metrics that run
    /// recorded, and the same resolved parameters. Its own fields are then in `repeat.json` (without `params`
    /// and `nodes`) and its `manifest.json` is a link to that run's; `core::run::read_manifest` takes the
    /// params and nodes from there, each node `cached` (with the seconds that run recorded for it), so a no-op
    /// writes a fixed number of bytes however large the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<String>,
    /// Resolved parameters of every node, by node id.
    #[serde(default)]
    pub params: P,
    #[serde(default)]
    pub nodes: BTreeMap<String, NodeRecord>,
}

impl<P> RunManifest<P> {
    /// The same manifest with its params held as `params` makes them.
    pub fn map_params<Q>(self, params: impl FnOnce(P) -> Q) -> RunManifest<Q> {
        RunManifest {
            format_version: self.format_version,
            engine_version: self.engine_version,
            pipeline: self.pipeline,
            run_id: self.run_id,
            command: self.command,
            host: self.host,
            testbed: self.testbed,
            testbed_profile: self.testbed_profile,
            git: self.git,
            started: self.started,
            resumed: self.resumed,
            finished: self.finished,
            status: self.status,
            repeats: self.repeats,
            params: params(self.params),
            nodes: self.nodes,
        }
    }
}
