//! One line of `events.jsonl`: what happened to which node, when.

use serde::{Deserialize, Serialize};

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
        key: String,
    },
    NodeStarted {
        node: String,
        key: String,
        attempt: u32,
    },
    NodeFinished {
        node: String,
        key: String,
        seconds: f64,
        output_hash: String,
    },
    NodeFailed {
        node: String,
        error: String,
    },
    NodeSkipped {
        node: String,
        reason: String,
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
            | EventKind::NodeFinished { node, .. }
            | EventKind::NodeFailed { node, .. }
            | EventKind::NodeSkipped { node, .. } => Some(node),
            EventKind::RunStarted { .. } | EventKind::RunFinished { .. } => None,
        }
    }
}
