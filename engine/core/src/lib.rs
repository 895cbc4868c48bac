//! fracflow's engine core: node specs, the DAG, fingerprints, the content-addressed cache and the scheduler —
//! it knows no YAML, sockets or devices.

pub mod cache;
mod decide;
pub mod exec;
pub mod fingerprint;
pub mod graph;
pub mod history;
mod hitindex;
pub mod keylock;
pub mod lock;
pub mod plan;
mod pointers;
pub mod remote;
pub mod run;
pub mod scheduler;
pub mod spec;
pub mod statcache;
mod storedir;
pub mod suggest;

pub use cache::{Cache, CacheEntry, Hit};
pub use exec::{
    Cancel, ConfigProblem, Executor, Inputs, Job, KindInfo, Kinds, NodeError, Outcome, PathSegment,
    RunIdentity,
};
pub use fingerprint::{FieldChange, Fingerprint};
pub use graph::{Graph, GraphError};
pub use lock::{LockError, LockScope, TestbedLock, lock_name};
pub use run::{RunDir, RunMeta};
pub use scheduler::{Engine, Observer, RunOptions, RunSummary};
pub use spec::{NodeId, NodeSpec, Origin, Pipeline, Resource, Settings};
pub use statcache::StatCache;
