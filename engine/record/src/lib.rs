//! On-disk formats and shared vocabulary of fracflow: run manifests, event lines, summary tables, provenance,
//! expectation verdicts, and the atomic write they share.

pub mod atomic;
pub mod event;
pub mod manifest;
pub mod table;

pub use atomic::{atomic_replace, atomic_write, fsync_dir, unique_suffix};
pub use event::{Event, EventKind};
pub use manifest::{NodeRecord, NodeStatus, RunManifest, RunStatus};
pub use table::{Cell, ExpectationResult, Provenance, Table};

/// Version of every format in this crate; bump it when a field changes meaning.
pub const FORMAT_VERSION: u32 = 1;
