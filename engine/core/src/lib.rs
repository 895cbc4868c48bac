//! fracflow's engine core: node specs, the DAG, fingerprints, the content-addressed cache and the scheduler —
//! it knows no YAML, sockets or devices.

pub mod graph;
pub mod spec;

pub use graph::{Graph, GraphError};
pub use spec::{NodeId, NodeSpec, Origin, Pipeline, Resource};
