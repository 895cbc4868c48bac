//! One module per `fracflow` command; `main.rs` dispatches to their `run` functions.

pub mod bitstreams;
pub mod cache;
pub mod clean;
pub mod client;
pub mod completions;
pub mod cpu_server;
pub mod device;
pub mod diff;
pub mod export;
pub mod graph;
pub mod logs;
pub mod node_exec;
pub mod plan;
pub mod plot;
pub mod run;
pub mod runs;
pub mod status;
pub mod targets;
pub mod testbed;
pub mod verify;
pub mod why;

use std::collections::BTreeMap;

use fracflow_core::RunOptions;

use crate::select::Select;

/// The scheduler's options for a selection (`plan` and `why` predict with the same ones `run` uses).
fn run_options(
    select: &Select,
    jobs: usize,
    keep_going: bool,
    testbed: BTreeMap<String, serde_json::Value>,
) -> RunOptions {
    RunOptions {
        jobs,
        keep_going,
        rerun: select.rerun.clone(),
        testbed,
    }
}
