//! One line of `events.jsonl`: what happened to which node, when.

use serde::{Deserialize, Serialize};

use crate::Digest;

/// An engine event, streamed to `events.jsonl` and to `--json` output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    RunStarted {
        pipeline: String,
        run_id: String,
        nodes: usize,
        testbed: String,
    },
    NodeCached {
        node: String,
        key: Digest,
    },
    NodeStarted {
        node: String,
        key: Digest,
        attempt: u32,
    },
    /// Another engine on the same cache is building this node's key; this run waits for its result.
    NodeWaiting {
        node: String,
        key: Digest,
        /// The holder as its lock file names it; absent when the file could not be read.
        holder_pid: Option<u32>,
        holder_host: Option<String>,
        /// When the holder took the lock, RFC 3339 in this machine's local time.
        holder_since: Option<String>,
    },
    /// Something the user should know that is not about one node (e.g. locks that only work on this machine).
    Warning {
        message: String,
    },
    NodeFinished {
        node: String,
        key: Digest,
        seconds: f64,
        output_hash: Digest,
    },
    NodeFailed {
        node: String,
        error: String,
    },
    NodeSkipped {
        node: String,
        reason: String,
    },
    /// Journal only: stands for the `node_cached` events of a run that repeated run `run_id` exactly (see the
    /// manifest's `repeats`): `nodes` nodes, every one a cache hit under the key that run recorded.
    RunRepeated {
        run_id: String,
        nodes: usize,
    },
    RunFinished {
        status: String,
        seconds: f64,
    },
}

impl EventKind {
    /// The node this event is about, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            EventKind::NodeCached { node, .. }
            | EventKind::NodeStarted { node, .. }
            | EventKind::NodeWaiting { node, .. }
            | EventKind::NodeFinished { node, .. }
            | EventKind::NodeFailed { node, .. }
            | EventKind::NodeSkipped { node, .. } => Some(node),
            EventKind::RunStarted { .. }
            | EventKind::RunRepeated { .. }
            | EventKind::RunFinished { .. }
            | EventKind::Warning { .. } => None,
        }
    }
}
